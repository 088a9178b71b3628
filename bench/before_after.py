"""Two commits' benchmarks side by side in one run: each commit's own bench section (or its
reliability suite) on its own code, the two alternated round by round so that the machine's
load hits both.

    python bench/before_after.py --base a16c030 manager worker pipeline
    python bench/before_after.py --base a16c030 --rounds 1 chaos            # CI-sized fault runs
    python bench/before_after.py --base a16c030 --rounds 1 --chaos-full chaos  # nox -s chaos's sizes

Each commit gets a ``git worktree`` (detached) in a temporary directory outside the
repository; ``--head`` (default ``HEAD``) is checked out the same way, so that neither side
writes into this checkout's docs/benchmarks. A side runs in one venv (``--python``; default the
tests session's, the one ``nox -s bench`` and ``nox -s chaos`` use) with its own tree's
``packages/*/src`` and ``tests/plugins/*/src`` first on PYTHONPATH: the backends' entry points
name modules (``envfleet_toy.plugin``), which then load from that tree. Before the first round,
each side prints where ``envfleet``, ``envfleet_ray`` and ``envfleet_toy`` were imported from,
and the run stops if any is outside its tree.

A bench section runs as ``python <tree>/bench/run.py SECTION`` and is read back from
``<tree>/docs/benchmarks/SECTION.json`` (every numeric cell of its rows, and its numeric
extras). ``chaos`` runs ``pytest tests/reliability`` of the tree with ``ENVFLEET_RELIABILITY_OUT``
(CI's sizes; ``--chaos-full`` sets ``ENVFLEET_CHAOS=1``, the sizes of ``nox -s chaos``) and
reads its fault reports: counts (faults, recoveries, chunks and env steps returned, leaks)
and timings (longest stall, median step, wall time). ``-k`` selects reliability tests.

The table gives each figure's median over the rounds for base and head, head / base, and
whether head is at least as good where the figure's unit says which way is better (a time:
lower; a rate: higher; a count of leaks, lost chunks or truncations: lower; of recoveries
or things returned: higher); ``?`` where it does not.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RENDER_ENV = {"MUJOCO_GL": "egl", "PYOPENGL_PLATFORM": "egl"}  # as noxfile.py's sessions set it
Figures = dict[tuple[str, str], float]
# Sections that start no Ray. a16c030's init_ray joins any Ray running on the machine (ray.init's
# own search), so the others need a machine with no other Ray up.
RAY_FREE = ("manager", "dataproto")

# Which way a figure is better, by the words in its column's name (first match wins).
_LOWER = ("leaked", "lost", "truncated", "stall", "(ms)", "(s)", "ms per", "wall", "cycle / ideal", "added")
_HIGHER = ("steps/s", "/s", "recovered", "returned", "ratio_vs", "x)")


def running_rays() -> list[int]:
    """Pids of the Ray GCS servers running on this machine (one per Ray instance)."""
    pids = []
    for entry in os.listdir("/proc"):
        try:
            with open(os.path.join("/proc", entry, "comm")) as fh:
                if fh.read().strip() == "gcs_server":
                    pids.append(int(entry))
        except (OSError, ValueError):
            continue
    return pids


def git(*args: str) -> str:
    """Output of ``git args`` in this repository."""
    return subprocess.run(["git", "-C", ROOT, *args], check=True, capture_output=True, text=True).stdout.strip()


class Side:
    """One commit checked out in its own worktree, and the environment that runs its code."""

    def __init__(self, name: str, commit: str, parent: str, python: str) -> None:
        self.name, self.python = name, python
        self.commit = git("rev-parse", "--short", commit)
        self.tree = os.path.join(parent, name)
        git("worktree", "add", "--detach", "--quiet", self.tree, self.commit)
        sources = sorted(glob.glob(os.path.join(self.tree, "packages", "*", "src")))
        sources += sorted(glob.glob(os.path.join(self.tree, "tests", "plugins", "*", "src")))
        bindir = os.path.dirname(python)
        self.env = {
            **os.environ,
            **RENDER_ENV,
            "PATH": os.pathsep.join([bindir, os.environ.get("PATH", "")]),
            "VIRTUAL_ENV": os.path.dirname(bindir),
            "PYTHONPATH": os.pathsep.join([*sources, os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep),
            "RAY_DEDUP_LOGS": "0",
        }

    def check_imports(self) -> None:
        """Print where this side's packages load from; exit if one is not from its tree."""
        code = "import json, envfleet, envfleet_ray, envfleet_toy; print(json.dumps({m.__name__: m.__file__ for m in (envfleet, envfleet_ray, envfleet_toy)}))"
        out = subprocess.run([self.python, "-c", code], capture_output=True, text=True, env=self.env, cwd=self.tree)
        if out.returncode != 0:
            sys.exit(f"{self.name} ({self.commit}): cannot import its packages:\n{out.stderr[-2000:]}")
        files = json.loads(out.stdout.strip().splitlines()[-1])
        for module, path in files.items():
            print(f"  {self.name} {self.commit}: {module} from {path}")
            if not os.path.realpath(path).startswith(os.path.realpath(self.tree) + os.sep):
                sys.exit(f"{self.name}: {module} loaded from {path}, not from {self.tree}; is the venv's copy installed non-editable?")

    def run(self, argv: list[str], log: str, timeout: float, env: dict[str, str] | None = None) -> tuple[int, float]:
        """Run ``argv`` in the tree with this side's environment; its output goes to ``log``. (exit code, seconds)."""
        t0 = time.perf_counter()
        with open(log, "w") as fh:
            code = subprocess.run(
                argv, cwd=self.tree, env={**self.env, **(env or {})}, stdout=fh, stderr=subprocess.STDOUT, timeout=timeout
            )
        return code.returncode, time.perf_counter() - t0

    def remove(self) -> None:
        git("worktree", "remove", "--force", self.tree)


def _row_labels(rows: list[dict[str, Any]]) -> list[str]:
    """A name for each row that the other commit's table can match, so that a row one commit adds does not
    shift the others: its ``case`` or ``what``; else its first text cell (the table's first column), or
    its first two; else, where none of these tells the rows apart, the row's number."""

    def text(row: dict[str, Any], n: int) -> str:
        return " / ".join([str(v) for v in row.values() if isinstance(v, str)][:n])

    for name in (lambda row: str(row.get("case") or row.get("what") or ""), lambda row: text(row, 1), lambda row: text(row, 2)):
        labels = [name(row) for row in rows]
        if all(labels) and len(set(labels)) == len(labels):
            return labels
    return [f"row {i + 1}" for i in range(len(rows))]


def bench_figures(side: Side, section: str, log: str) -> Figures:
    """Run one bench section of ``side`` and read back its figures."""
    out = os.path.join(side.tree, "docs", "benchmarks", f"{section}.json")
    if os.path.exists(out):
        os.remove(out)  # the tree's committed figures, which must not be read as this run's
    code, seconds = side.run([side.python, os.path.join("bench", "run.py"), section], log, timeout=7200)
    if code != 0 or not os.path.exists(out):
        sys.exit(f"{side.name} ({side.commit}) bench {section} failed (exit {code}); see {log}")
    with open(out) as fh:
        result = json.load(fh)
    figures: Figures = {("(section)", "wall (s)"): seconds}
    rows = result.get("rows", [])
    for label, row in zip(_row_labels(rows), rows):
        for column, value in row.items():
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                figures[(label, column)] = float(value)
    for key, value in result.items():
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            figures[("(extras)", key)] = float(value)
    return figures


def chaos_figures(side: Side, log: str, full: bool, select: str | None) -> Figures:
    """Run ``side``'s reliability suite and read back its fault reports."""
    out = tempfile.mkdtemp(prefix=f"reliability-{side.name}-", dir=os.path.dirname(side.tree))
    argv = [side.python, "-m", "pytest", "-p", "no:cacheprovider", "--timeout=5400", "-q", "-s", "tests/reliability"]
    argv += ["-k", select] if select else []
    env = {"ENVFLEET_RELIABILITY_OUT": out, **({"ENVFLEET_CHAOS": "1"} if full else {})}
    if not full:
        side.env.pop("ENVFLEET_CHAOS", None)
    code, seconds = side.run(argv, log, timeout=3 * 3600, env=env)
    figures: Figures = {("(suite)", "pytest exit code"): float(code), ("(suite)", "wall (s)"): seconds}
    path = os.path.join(out, "results.json")
    reports = json.load(open(path)) if os.path.exists(path) else []
    for report in reports:
        for key, value in report.items():
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                figures[(report["name"], key)] = float(value)
    shutil.rmtree(out, ignore_errors=True)
    return figures


def verdict(column: str, base: float, head: float) -> str:
    """Whether head is at least as good as base on this figure ('yes' / 'no'), or '?' where its name does not say."""
    name = column.lower()
    if name == "pytest exit code":
        return "yes" if head <= base else "no"
    if name.endswith(("_s", "_ms")) or any(word in name for word in _LOWER):
        return "yes" if head <= base else "no"
    if any(word in name for word in _HIGHER):
        return "yes" if head >= base else "no"
    return "?"


def table(title: str, base: Side, head: Side, runs: dict[str, list[Figures]]) -> str:
    """The comparison of one section as a Markdown table."""
    keys = list(dict.fromkeys([k for figures in runs["base"] + runs["head"] for k in figures]))
    lines = [
        f"### {title}: base {base.commit} against head {head.commit}, {len(runs['base'])} round(s) alternated",
        "",
        "| row | figure | base | head | head / base | head as good |",
        "|---|---|---|---|---|---|",
    ]
    for label, column in keys:
        b = [f[(label, column)] for f in runs["base"] if (label, column) in f]
        h = [f[(label, column)] for f in runs["head"] if (label, column) in f]
        if not b or not h:
            lines.append(
                f"| {label} | {column} | {_fmt(statistics.median(b)) if b else '-'} | {_fmt(statistics.median(h)) if h else '-'} | - | - |"
            )
            continue
        mb, mh = statistics.median(b), statistics.median(h)
        ratio = f"{mh / mb:.3f}" if mb else ("1.000" if mh == mb else "-")
        lines.append(f"| {label} | {column} | {_fmt(mb)} | {_fmt(mh)} | {ratio} | {verdict(column, mb, mh)} |")
    return "\n".join(lines)


def _fmt(value: float) -> str:
    return f"{value:.0f}" if value == int(value) and abs(value) < 1e9 else f"{value:,.4g}"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("sections", nargs="+", help="bench sections both commits have (manager, worker, pipeline, ...), or chaos")
    parser.add_argument("--base", required=True, help="the commit to compare against (e.g. a16c030)")
    parser.add_argument("--head", default="HEAD", help="the commit compared (default HEAD)")
    parser.add_argument("--rounds", type=int, default=3, help="base and head runs of each section, alternated (default 3)")
    parser.add_argument("--python", default=os.path.join(ROOT, ".nox", "tests", "bin", "python"), help="the venv's python")
    parser.add_argument("--chaos-full", action="store_true", help="chaos at nox -s chaos's sizes (ENVFLEET_CHAOS=1), not CI's")
    parser.add_argument("-k", dest="select", help="pytest -k expression selecting reliability tests (chaos)")
    parser.add_argument("--out", help="also write the tables to this Markdown file")
    args = parser.parse_args(argv)
    if not os.path.exists(args.python):
        parser.error(f"--python {args.python} does not exist: build the tests session's venv (nox -s tests --install-only) or pass one")
    rays = running_rays()
    if rays and any(section not in RAY_FREE for section in args.sections):
        parser.error(
            f"another Ray is running here (gcs_server pids {rays}): the older commit's init_ray would join it instead of starting "
            f"its own; stop it, or run only {', '.join(RAY_FREE)}"
        )
    parent = tempfile.mkdtemp(prefix="envfleet-before-after-")
    logs = tempfile.mkdtemp(prefix="envfleet-before-after-logs-")  # kept: a failed run points to its log
    print(f"logs in {logs}")
    sides: list[Side] = []
    try:
        for name, commit in (("base", args.base), ("head", args.head)):
            sides.append(Side(name, commit, parent, args.python))
        for side in sides:
            side.check_imports()
        for section in args.sections:
            if section != "chaos" and not all(os.path.exists(os.path.join(s.tree, "bench", "sections", f"{section}.py")) for s in sides):
                sys.exit(f"bench section {section!r} is not in both commits")
        tables = []
        for section in args.sections:
            runs: dict[str, list[Figures]] = {"base": [], "head": []}
            for r in range(args.rounds):
                # Base first in even rounds, head first in odd ones: neither always runs on a warmer machine.
                for side in sides if r % 2 == 0 else sides[::-1]:
                    log = os.path.join(logs, f"{section}-{side.name}-{r + 1}.log")
                    print(
                        f"[{time.strftime('%H:%M:%S')}] {section}: {side.name} {side.commit}, round {r + 1}/{args.rounds} (log {log})",
                        flush=True,
                    )
                    if section == "chaos":
                        runs[side.name].append(chaos_figures(side, log, args.chaos_full, args.select))
                    else:
                        runs[side.name].append(bench_figures(side, section, log))
            title = f"chaos ({'nox -s chaos sizes' if args.chaos_full else 'CI sizes'})" if section == "chaos" else f"bench {section}"
            tables.append(table(title, sides[0], sides[1], runs))
            print("\n" + tables[-1] + "\n", flush=True)
        if args.out:
            with open(args.out, "w") as fh:
                fh.write("\n\n".join(tables) + "\n")
    finally:
        for side in sides:
            side.remove()
        shutil.rmtree(parent, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
