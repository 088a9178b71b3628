"""The light core: ``import envfleet``, a plugin listing and a shard process never import torch or tensordict.

Each test runs in a fresh interpreter whose path starts with stand-in ``torch`` and
``tensordict`` packages: importing one records the attempt in a file and raises, as in a
venv without them (``nox -s tests-core`` runs these tests in such a venv too). A shard
under the worker's Python inherits that path, so a shard that imported torch would fail
its start and leave the record.
"""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys
import textwrap

import pytest

_BLOCKER = '''
"""Stand-in for {name}: a test checks that the light core never imports it."""
import os

with open(os.path.join(os.environ["ENVFLEET_TEST_IMPORT_LOG"], "{name}-" + str(os.getpid())), "w") as _log:
    import traceback

    traceback.print_stack(file=_log)
raise ImportError("{name} is blocked by tests/core/test_light_core.py", name="{name}")
'''


@pytest.fixture
def without_torch(tmp_path: pathlib.Path) -> tuple[dict[str, str], pathlib.Path]:
    """The environment of an interpreter where torch and tensordict do not import, and the folder of the import log."""
    blocked = tmp_path / "blocked"
    log = tmp_path / "log"
    log.mkdir()
    for name in ("torch", "tensordict"):
        (blocked / name).mkdir(parents=True)
        (blocked / name / "__init__.py").write_text(_BLOCKER.format(name=name))
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(blocked), *([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])])
    env["ENVFLEET_TEST_IMPORT_LOG"] = str(log)
    return env, log


def _run(code: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, env=env, timeout=300)


def _attempts(log: pathlib.Path) -> str:
    return "\n".join(f"{p.name}:\n{p.read_text()}" for p in sorted(log.iterdir()))


def test_a_shard_steps_the_toy_without_torch(without_torch: tuple[dict[str, str], pathlib.Path]) -> None:
    env, log = without_torch
    out = _run(
        """
        import sys

        import numpy as np

        import envfleet
        from envfleet import ProcessEnvManager, load_config
        from envfleet.plugins import list_backends

        assert "toy" in list_backends()
        cfg = load_config(overrides=["train.simulator_type=toy", "train.num_envs=2", "actor.model.num_action_chunks=2"])
        manager = ProcessEnvManager(cfg)
        manager.start_simulator()
        try:
            manager.reset_envs_to_state_ids(np.array([0, 1]))
            result = manager.chunk_step(np.zeros((2, 2, 7), dtype=np.float32))
        finally:
            manager.close()
        assert result.rewards.shape == (2, 2), result.rewards.shape
        heavy = sorted(m for m in sys.modules if m.split(".")[0] in ("torch", "tensordict"))
        assert not heavy, heavy
        print("stepped")
        """,
        env,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert "stepped" in out.stdout
    assert not list(log.iterdir()), f"the light core or a shard imported torch or tensordict:\n{_attempts(log)}"


@pytest.mark.parametrize("statement", ["from envfleet import DataProto", "import envfleet.dataproto"])
def test_dataproto_without_its_extra_names_the_pip_command(statement: str, without_torch: tuple[dict[str, str], pathlib.Path]) -> None:
    env, _ = without_torch
    out = _run(
        f"""
        from envfleet.errors import MissingExtraError

        try:
            {statement}
        except MissingExtraError as exc:
            print(exc)
        """,
        env,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert "envfleet.dataproto (DataProto) needs torch and tensordict" in out.stdout
    assert "pip install 'envfleet[dataproto]'" in out.stdout
