"""``envfleet rollout`` of a realtime config, as a user runs it: what ran in its summary, and in ``envfleet report``'s page."""

from __future__ import annotations

import json

from .test_cli import run


def test_a_realtime_rollout_reports_what_ran_in_its_summary_and_its_page(tmp_path) -> None:
    realtime = ["train.execution.mode=realtime", "train.execution.delay=2", "train.execution.horizon=3"]
    args = ["--steps", "4", "--workers", "1", "--out", str(tmp_path / "run"), "--policy", "zero", "train.simulator_type=toy"]
    args += ["train.num_envs=2", "rollout.pipeline_stage_num=1", "actor.model.num_action_chunks=4", *realtime]
    out = run("rollout", *args)
    assert out.returncode == 0, out.stderr
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    ran = summary["execution"]
    # 4 calls of 2 envs, 3 sub-steps each; the first call after the reset has no delay, the next three a delay of 2:
    # 1 queued action (chunk 4 - horizon 3) then 1 held, then 1 of the new chunk.
    assert ran["delays"] == {"0": 2, "2": 6}
    assert ran["sub_steps"] == {"previous": 6, "current": 12, "hold": 6, "zero": 0}
    assert summary["fingerprint"]["execution"]["delay"] == 2
    page = run("report", str(tmp_path / "run"))
    assert page.returncode == 0, page.stderr
    html = next((tmp_path / "run").glob("*.html")).read_text()
    assert "<h2>Real-time execution</h2>" in html and "mean 1.50" in html and "<td>6 (25.0%)</td>" in html
