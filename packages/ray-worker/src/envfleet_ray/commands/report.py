"""``envfleet report RUN_DIR``: one self-contained HTML page of a run, for people to look at.

From the run's ``summary.json`` (and, where the run recorded datasets, ``train.record``):

- the per-task table: episodes, successes at any step (``success_once``) and at the end
  (``success_at_end``), each rate with its 95% Wilson score interval, mean length;
- the run's restarts with their causes, and its protocol fingerprint;
- a plot (matplotlib, inlined as SVG) of each task's success rate with its interval and mean length;
- for each task, one failed and one successful episode's camera video, inline (re-encoded
  from the dataset's lossless file to VP9 in WebM, which every browser plays), where recorded.

The page has no script and loads nothing: images, videos and styles are inside it.
"""

from __future__ import annotations

import argparse
import base64
import html
import io
import json
import os
from typing import Any

from envfleet.errors import InvalidInputError

from .compare import load_summary
from .intervals import group_counts, wilson

# Imports inside functions: matplotlib, PyAV and recording's readers load only for the parts of the page that
# need them.

__all__ = ["build_report", "add_parser", "run"]

_STYLE = """
body{font-family:system-ui,sans-serif;margin:24px;color:#222;max-width:1200px}
table{border-collapse:collapse;margin:12px 0}th,td{border:1px solid #ccc;padding:4px 8px;text-align:right}
td.l,th.l{text-align:left}th{background:#f2f2f2}.ok{color:#176617}.bad{color:#a11}
video{width:192px;margin:4px;border:1px solid #999}figure{display:inline-block;margin:4px}
figcaption{font-size:12px}pre{background:#f7f7f7;padding:8px;overflow:auto;max-height:300px}
"""


def _esc(value: Any) -> str:
    return html.escape(str(value))


def _rate(k: int, n: int) -> str:
    lo, hi = wilson(k, n)
    return f"{k}/{n} = {k / n if n else 0.0:.2f} [{lo:.2f}, {hi:.2f}]"


def _table(summary: dict[str, Any]) -> str:
    head = "<tr><th>task</th><th class=l>instruction</th><th>episodes</th><th>success_once [95% Wilson]</th>"
    head += "<th>success_at_end [95% Wilson]</th><th>mean length</th></tr>"
    rows = []
    totals = [0, 0, 0]
    for task, row in summary["per_task"].items():
        n, k, k_end = int(row["episodes"]), int(row["successes"]), int(row.get("successes_at_end", 0))
        totals = [totals[0] + n, totals[1] + k, totals[2] + k_end]
        rows.append(
            f"<tr><td>{_esc(task)}</td><td class=l>{_esc(row.get('description', ''))}</td><td>{n}</td>"
            f"<td>{_rate(k, n)}</td><td>{_rate(k_end, n)}</td><td>{float(row.get('mean_length', 0)):.1f}</td></tr>"
        )
    rows.append(
        f"<tr><th>all</th><th></th><th>{totals[0]}</th><th>{_rate(totals[1], totals[0])}</th><th>{_rate(totals[2], totals[0])}</th><th></th></tr>"
    )
    return f"<table id=per-task>{head}{''.join(rows)}</table>" + group_table(summary)


def group_table(summary: dict[str, Any]) -> str:
    """Success per group (LIBERO-plus: per perturbation dimension), with Wilson intervals, beside the whole."""
    counts, at_end = group_counts(summary["per_task"]), group_counts(summary["per_task"], "successes_at_end")
    if not counts:
        return ""
    head = "<tr><th>group</th><th>episodes</th><th>success_once [95% Wilson]</th><th>success_at_end [95% Wilson]</th></tr>"
    rows = [
        f"<tr><td>{_esc(g)}</td><td>{n}</td><td>{_rate(k, n)}</td><td>{_rate(at_end[g][0], n)}</td></tr>" for g, (k, n) in counts.items()
    ]
    k, n, k_end = sum(c[0] for c in counts.values()), sum(c[1] for c in counts.values()), sum(c[0] for c in at_end.values())
    rows.append(f"<tr><th>all</th><th>{n}</th><th>{_rate(k, n)}</th><th>{_rate(k_end, n)}</th></tr>")
    return f"<h2>per group</h2><table id=per-group>{head}{''.join(rows)}</table>"


def _plot(summary: dict[str, Any]) -> str:
    """Success rate (with Wilson intervals) and mean episode length per task, as inline SVG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tasks = list(summary["per_task"])
    rows = [summary["per_task"][t] for t in tasks]
    rates = [r["successes"] / r["episodes"] if r["episodes"] else 0.0 for r in rows]
    bounds = [wilson(int(r["successes"]), int(r["episodes"])) for r in rows]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 3))
    x = list(range(len(tasks)))
    ax1.bar(x, rates, color="#4a7fb5")
    ax1.errorbar(
        x,
        rates,
        yerr=[[r - lo for r, (lo, _) in zip(rates, bounds)], [hi - r for r, (_, hi) in zip(rates, bounds)]],
        fmt="none",
        ecolor="k",
    )
    ax1.set(ylim=(0, 1), title="success_once per task (95% Wilson)", xticks=x, xticklabels=tasks, xlabel="task")
    ax2.bar(x, [float(r.get("mean_length", 0)) for r in rows], color="#b5834a")
    ax2.set(title="mean episode length (env steps)", xticks=x, xticklabels=tasks, xlabel="task")
    fig.tight_layout()
    out = io.StringIO()
    fig.savefig(out, format="svg")
    plt.close(fig)
    svg = out.getvalue()
    return svg[svg.index("<svg") :]


def _webm(path: str, max_width: int = 256) -> bytes:
    """The mp4 at ``path`` re-encoded as VP9 in WebM (browsers do not play lossless RGB H.264)."""
    import av

    buf = io.BytesIO()
    with av.open(path) as src, av.open(buf, "w", format="webm") as dst:
        vin: Any = src.streams.video[0]
        rate = vin.average_rate or 10
        stream: Any = dst.add_stream("libvpx-vp9", rate=rate, options={"crf": "32", "b": "0"})
        scale = min(1.0, max_width / vin.codec_context.width)
        stream.width = int(vin.codec_context.width * scale) // 2 * 2
        stream.height = int(vin.codec_context.height * scale) // 2 * 2
        stream.pix_fmt = "yuv420p"
        for decoded in src.decode(video=0):
            frame: Any = decoded.reformat(width=stream.width, height=stream.height, format="yuv420p")
            frame.pts = None
            for packet in stream.encode(frame):
                dst.mux(packet)
        for packet in stream.encode():
            dst.mux(packet)
    return buf.getvalue()


def _videos(run_dir: str, summary: dict[str, Any]) -> str:
    """Per task, a failed and a successful recorded episode (the first of each found), inline."""
    from envfleet.recording import episode_video, find_datasets, read_episodes, read_info

    roots = [d["root"] for d in summary.get("datasets", []) if os.path.isdir(d["root"])] or find_datasets(os.path.join(run_dir, "datasets"))
    if not roots:
        return "<p>No episodes were recorded (set <code>train.record.format=lerobot</code> to record them).</p>"
    chosen: dict[tuple[str, bool], tuple[str, dict[str, Any], str]] = {}
    for root in roots:
        cameras = [k.removeprefix("observation.images.") for k, f in read_info(root)["features"].items() if f["dtype"] == "video"]
        for row in read_episodes(root):
            key = (str(row.get("envfleet/task_id")), bool(row.get("envfleet/success_once")))
            if cameras and key not in chosen and not row.get("envfleet/sim_restarted"):
                chosen[key] = (root, row, cameras[0])
    parts = []
    for task in summary["per_task"]:
        figs = []
        for success in (False, True):
            found = chosen.get((str(task), success))
            label = "successful" if success else "failed"
            if found is None:
                figs.append(f"<figure><figcaption>no {label} episode recorded</figcaption></figure>")
                continue
            root, row, camera = found
            data = base64.b64encode(_webm(episode_video(root, row, camera))).decode()
            caption = f"{label}: state {row.get('envfleet/state_id')}, {row['length']} frames, rank {row.get('envfleet/rank')} stage {row.get('envfleet/stage')}, {camera}"
            figs.append(
                f"<figure><video class={label} controls muted loop src='data:video/webm;base64,{data}'></video><figcaption>{_esc(caption)}</figcaption></figure>"
            )
        parts.append(f"<h3>task {_esc(task)}: {_esc(summary['per_task'][task].get('description', ''))}</h3>{''.join(figs)}")
    return "".join(parts)


def execution_html(summary: dict[str, Any]) -> str:
    """What ran under ``train.execution: realtime``: the schedule, the sub-steps per source, the delays seen; "" otherwise."""
    ran = summary.get("execution")
    if not ran:
        return ""
    stated = (summary.get("fingerprint") or {}).get("execution") or {}
    total = sum(ran["sub_steps"].values()) or 1
    sources = "".join(f"<td>{count} ({100 * count / total:.1f}%)</td>" for count in ran["sub_steps"].values())
    delays = sorted(((int(d), c) for d, c in ran["delays"].items()))
    calls = sum(c for _, c in delays) or 1
    mean = sum(d * c for d, c in delays) / calls
    return (
        "<h2>Real-time execution</h2>"
        f"<p>mode {_esc(stated.get('mode', 'realtime'))}, clock {_esc(stated.get('clock', '?'))}, delay {_esc(stated.get('delay', '?'))}, "
        f"horizon {_esc(stated.get('horizon') or 'the chunk length')}, on_empty {_esc(stated.get('on_empty', '?'))}</p>"
        "<table id=execution><tr>" + "".join(f"<th>{name}</th>" for name in ran["sub_steps"]) + f"</tr><tr>{sources}</tr></table>"
        f"<p>delay seen per call (sub-steps): mean {mean:.2f}; " + ", ".join(f"{d}: {c}" for d, c in delays) + "</p>"
    )


def build_report(run_dir: str) -> str:
    """The HTML page of the run in ``run_dir`` (a folder with ``summary.json``)."""
    summary = load_summary(run_dir)
    fp = summary["fingerprint"]
    restarts = summary.get("restart_causes", [])
    title = f"envfleet run: {summary.get('backend', '?')} {summary.get('task_suite_name') or summary.get('task_name') or ''}"
    head = (
        f"<p>{summary.get('episodes', 0)} episodes, {summary.get('env_steps', 0)} env steps, {summary.get('workers')} worker(s) x "
        f"{summary.get('stages')} stage(s) x {summary.get('num_envs')} env(s), policy <code>{_esc(summary.get('policy'))}</code>, "
        f"{summary.get('env_steps_per_s', 0):.1f} env steps/s</p>"
    )
    restart_html = f"<p>simulator restarts: {summary.get('sim_restarts', 0)}</p>" + (
        "<ul>" + "".join(f"<li>{_esc(json.dumps(c, default=str))}</li>" for c in restarts) + "</ul>" if restarts else ""
    )
    body = [
        f"<h1>{_esc(title)}</h1>",
        head,
        "<h2>Success per task</h2>",
        "<p>success_once: success at any step of the episode; success_at_end: at its last step. Intervals: 95% Wilson score.</p>",
        _table(summary),
        _plot(summary),
        execution_html(summary),
        "<h2>Restarts</h2>",
        restart_html,
        "<h2>Episodes</h2>",
        _videos(run_dir, summary),
        "<h2>Protocol</h2>",
        f"<p>fingerprint <code id=fingerprint>{_esc(fp.get('hash'))}</code></p>",
        f"<pre>{_esc(json.dumps(fp, indent=1, default=str))}</pre>",
    ]
    return f"<!doctype html><html><head><meta charset=utf-8><title>{_esc(title)}</title><style>{_STYLE}</style></head><body>{''.join(body)}</body></html>"


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add the ``report`` subcommand to the ``envfleet`` parser's subparsers."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "report",
        help="one self-contained HTML page of a run: per-task table with intervals, plot, episode videos, protocol",
        description="Write RUN_DIR/report.html (or --out) from the run's summary.json and, where recorded, its datasets.",
    )
    parser.add_argument("run_dir", metavar="RUN_DIR", help="a run folder (envfleet rollout's --out)")
    parser.add_argument("--out", help="where to write the page (default: RUN_DIR/report.html)")
    return parser


def run(args: argparse.Namespace) -> int:
    """Run ``envfleet report``; prints where the page went."""
    if not os.path.isdir(args.run_dir):
        raise InvalidInputError(f"envfleet report: {args.run_dir!r} is not a run folder (envfleet rollout's --out)")
    page = build_report(args.run_dir)
    out = args.out or os.path.join(args.run_dir, "report.html")
    with open(out, "w") as fh:
        fh.write(page)
    print(f"report: {out}")
    return 0
