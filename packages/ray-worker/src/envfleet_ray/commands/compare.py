"""``envfleet compare RUN_A RUN_B``: two results side by side, refused when their protocols differ.

A success rate means something only next to another measured the same way. Each run's
``summary.json`` carries its protocol fingerprint (:mod:`envfleet.fingerprint`); the
comparison flattens both into dotted fields (``settle_steps``, ``cameras.height``,
``packages.mujoco``, ``libero.instruction_source``, ...) and refuses, with exit code 1
and one line per differing field, when they differ in anything but what is sampled:

- the policy (not part of the fingerprint: it is what is being compared);
- ``seed`` and ``state_ids`` (which fixture placements and initial states were drawn):
  two runs of one protocol with other seeds are two samples of it, and the intervals
  say how far apart samples fall.

``--allow FIELD`` (repeatable; a field or a prefix such as ``packages``) compares anyway
and prints that field's two values in the header. The table has, per task and in total,
each run's successes, episodes and rate with a 95% Wilson score interval, and the
difference B - A with Newcombe's hybrid score interval (Newcombe 1998, method 10),
which, unlike the Wald interval, stays inside [-1, 1] and behaves at rates of 0 and 1
(:mod:`envfleet_ray.commands.intervals`).

Further pairs (``envfleet compare A1 B1 A2 B2 ...``, one pair of runs per suite) are compared
pair by pair, and a last table sums them per LIBERO-PRO perturbation family
(:mod:`envfleet_ray.commands.families`); one pair gets a one-row family table naming its family.
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Mapping, Sequence
from typing import Any

from envfleet.errors import InvalidInputError

from .families import family_lines
from .intervals import diff_cell, group_counts, rate_cell
from .paired import paired_lines

__all__ = [
    "SAMPLED_FIELDS",
    "METRICS",
    "load_summary",
    "flatten",
    "differences",
    "rendered_by",
    "compare",
    "add_parser",
    "run",
]

#: Fingerprint fields that say which samples were drawn, not how they were measured.
SAMPLED_FIELDS: tuple[str, ...] = ("hash", "seed", "state_ids")

#: ``success_once``: success at any step of an episode (the ``successes`` count);
#: ``success_at_end``: success at its last step (``successes_at_end``).
METRICS: dict[str, str] = {"success_once": "successes", "success_at_end": "successes_at_end"}


def load_summary(path: str) -> dict[str, Any]:
    """The ``summary.json`` of ``path`` (the file, or a run folder holding it)."""
    file = os.path.join(path, "summary.json") if os.path.isdir(path) else path
    if not os.path.isfile(file):
        raise InvalidInputError(f"envfleet compare: {path!r} is neither a summary.json nor a run folder holding one")
    try:
        with open(file) as fh:
            data = json.load(fh)
    except (OSError, ValueError) as exc:
        raise InvalidInputError(f"envfleet compare: cannot read {file!r} as JSON: {exc}") from None
    if not isinstance(data, dict) or not isinstance(data.get("per_task"), dict):
        raise InvalidInputError(f"envfleet compare: {file!r} is not an envfleet summary (no 'per_task' table)")
    if not isinstance(data.get("fingerprint"), dict):
        raise InvalidInputError(f"envfleet compare: {file!r} has no protocol fingerprint, so nothing says how it was measured")
    return data


def flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    """Nested mappings as ``{"a.b": leaf}``; lists stay leaves."""
    if not isinstance(value, Mapping):
        return {prefix.rstrip("."): value}
    out: dict[str, Any] = {}
    for key, sub in value.items():
        name = f"{prefix}{key}"
        out.update(flatten(sub, f"{name}.") if isinstance(sub, Mapping) else {name: sub})
    return out


def _sampled(field: str) -> bool:
    return any(field == s or field.startswith(f"{s}.") for s in SAMPLED_FIELDS)


def differences(a: Mapping[str, Any], b: Mapping[str, Any]) -> dict[str, tuple[Any, Any]]:
    """The protocol fields (dotted) whose values differ between fingerprints ``a`` and ``b``, sampled fields left out."""
    fa, fb = flatten(a), flatten(b)
    missing = object()
    out = {}
    for field in sorted(set(fa) | set(fb)):
        va, vb = fa.get(field, missing), fb.get(field, missing)
        if va != vb and not _sampled(field):
            out[field] = (None if va is missing else va, None if vb is missing else vb)
    return out


def _fmt(value: Any) -> str:
    return "(absent)" if value is None else json.dumps(value, default=str) if not isinstance(value, str) else value


def _metric(a: dict[str, Any], b: dict[str, Any], chosen: str | None) -> str:
    if chosen is not None:
        return chosen
    named = {flatten(s["fingerprint"]).get("named_protocol.success_metric") for s in (a, b)} - {None}
    return str(named.pop()) if len(named) == 1 else "success_once"


def rendered_by(fingerprint: Mapping[str, Any]) -> str:
    """What rendered a run's images, from its fingerprint: ``GPU (NVIDIA Corporation, NVIDIA H200/PCIe/SSE2)``.

    >>> rendered_by({"renderer": {"rasterizer": "CPU rasterizer", "gl_vendor": "Mesa", "gl_renderer": "llvmpipe"}})
    'CPU rasterizer (Mesa, llvmpipe)'
    """
    renderer = fingerprint.get("renderer") or {}
    which = ", ".join(str(renderer[k]) for k in ("gl_vendor", "gl_renderer") if renderer.get(k))
    kind = renderer.get("rasterizer") or renderer.get("platform") or renderer.get("mujoco_gl") or "renderer not recorded"
    return f"{kind} ({which})" if which else str(kind)


def compare(a: dict[str, Any], b: dict[str, Any], allow: Sequence[str] = (), metric: str | None = None) -> tuple[int, list[str]]:
    """Compare summaries ``a`` and ``b``: ``(exit code, lines to print)``; 1 with the differing fields when refused."""
    diff = differences(a["fingerprint"], b["fingerprint"])
    known = set(flatten(a["fingerprint"])) | set(flatten(b["fingerprint"]))
    for pattern in allow:
        if not any(f == pattern or f.startswith(f"{pattern}.") for f in known):
            raise InvalidInputError(f"envfleet compare: --allow {pattern!r} names no fingerprint field; fields: {', '.join(sorted(known))}")

    def allowed(field: str) -> bool:
        return any(field == p or field.startswith(f"{p}.") for p in allow)

    refused = {f: v for f, v in diff.items() if not allowed(f)}
    if refused:
        lines = [f"refused: the two runs were measured differently in {len(refused)} field(s) of their protocol fingerprint:"]
        if any(f == "renderer" or f.startswith("renderer.") for f in refused):
            lines.append(f"  rendered differently: A {rendered_by(a['fingerprint'])} | B {rendered_by(b['fingerprint'])}")
        lines += [f"  differs: {field}: A {_fmt(va)} | B {_fmt(vb)}" for field, (va, vb) in refused.items()]
        lines.append("(--allow FIELD compares anyway and shows the field in the header)")
        return 1, lines
    metric = _metric(a, b, metric)
    key = METRICS[metric]
    fa, fb = flatten(a["fingerprint"]), flatten(b["fingerprint"])
    lines = [
        f"A: policy {a.get('policy', '?')}, fingerprint {fa.get('hash')}, seed {fa.get('seed')}, {fa.get('state_ids.count')} state ids"
    ]
    lines.append(
        f"B: policy {b.get('policy', '?')}, fingerprint {fb.get('hash')}, seed {fb.get('seed')}, {fb.get('state_ids.count')} state ids"
    )
    lines += [f"allowed to differ: {field}: A {_fmt(va)} | B {_fmt(vb)}" for field, (va, vb) in diff.items()]
    lines.append(f"metric: {metric} ({key}); rates with 95% Wilson intervals, B - A with Newcombe's interval")
    lines.append(f"{'task':>5}  {'A: k/n rate [95% CI]':>27}  {'B: k/n rate [95% CI]':>27}  {'B - A [95% CI]':>22}  description")
    tasks = sorted(set(a["per_task"]) | set(b["per_task"]), key=lambda t: (len(str(t)), str(t)))
    totals = [0, 0, 0, 0]
    for task in tasks:
        ra, rb = a["per_task"].get(task), b["per_task"].get(task)
        ka, na = (int(ra[key]), int(ra["episodes"])) if ra else (None, None)
        kb, nb = (int(rb[key]), int(rb["episodes"])) if rb else (None, None)
        desc = (ra or rb or {}).get("description", "")
        lines.append(f"{task:>5}  {rate_cell(ka, na)}  {rate_cell(kb, nb)}  {diff_cell(ka, na, kb, nb)}  {desc}")
        for i, v in enumerate((ka, na, kb, nb)):
            totals[i] += v or 0
    lines.append(f"{'all':>5}  {rate_cell(totals[0], totals[1])}  {rate_cell(totals[2], totals[3])}  {diff_cell(*totals)}")
    ga, gb = group_counts(a["per_task"], key), group_counts(b["per_task"], key)
    if ga or gb:
        lines.append(f"{'group':>12}  {'A: k/n rate [95% CI]':>27}  {'B: k/n rate [95% CI]':>27}  {'B - A [95% CI]':>22}")
        for group in [*ga, *(g for g in gb if g not in ga)]:
            (ka, na), (kb, nb) = ga.get(group, (None, None)), gb.get(group, (None, None))
            lines.append(f"{group:>12}  {rate_cell(ka, na)}  {rate_cell(kb, nb)}  {diff_cell(ka, na, kb, nb)}")
    return 0, lines


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add the ``compare`` subcommand to the ``envfleet`` parser's subparsers."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "compare",
        help="two runs' success rates side by side with confidence intervals; refused (exit code 1) if measured differently",
        description="Compare two runs (summary.json files or run folders) task by task. Refused, with exit code 1 and "
        "a line per differing field, when their protocol fingerprints differ in anything but the seed and the state ids.",
    )
    parser.add_argument("run_a", metavar="RUN_A", help="summary.json or a run folder")
    parser.add_argument("run_b", metavar="RUN_B", help="summary.json or a run folder")
    parser.add_argument(
        "more",
        nargs="*",
        metavar="RUN",
        help="further pairs RUN_A2 RUN_B2 ... (one pair per suite, e.g. LIBERO-PRO's _lan/_object/_swap/_task): "
        "each pair is compared, then the pairs are summed per perturbation family",
    )
    parser.add_argument("--allow", action="append", default=[], metavar="FIELD", help="a fingerprint field allowed to differ (repeatable)")
    parser.add_argument(
        "--metric", choices=sorted(METRICS), help="success_once or success_at_end (default: the named protocol's, else success_once)"
    )
    return parser


def run(args: argparse.Namespace) -> int:
    """Run ``envfleet compare`` with parsed ``args``; prints the table or the refusal and returns the exit code."""
    paths = [args.run_a, args.run_b, *getattr(args, "more", [])]
    if len(paths) % 2:
        raise InvalidInputError(f"envfleet compare takes runs in pairs (RUN_A RUN_B [RUN_A2 RUN_B2 ...]), got {len(paths)} runs")
    pairs = [(paths[i], paths[i + 1]) for i in range(0, len(paths), 2)]
    summaries = [(load_summary(pa), load_summary(pb)) for pa, pb in pairs]
    out: list[str] = []
    for (path_a, path_b), (a, b) in zip(pairs, summaries):
        code, lines = compare(a, b, args.allow, args.metric)
        if len(pairs) > 1:
            lines = [f"== {path_a} vs {path_b} (suite {flatten(a['fingerprint']).get('task_suite_name')})", *lines]
        if code != 0:
            print("\n".join(out + lines))
            return code
        seed_a, seed_b = (flatten(s["fingerprint"]).get("seed") for s in (a, b))
        out += lines
        out += [
            "",
            "independent rates above: Wilson intervals, B - A with Newcombe's interval",
            *paired_lines(path_a, path_b, seed_a, seed_b, _metric(a, b, args.metric)),
            "",
        ]
    a0, b0 = summaries[0]
    out += family_lines(summaries, METRICS[_metric(a0, b0, args.metric)])
    print("\n".join(out))
    return 0
