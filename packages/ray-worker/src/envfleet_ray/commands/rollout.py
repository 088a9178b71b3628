"""``envfleet rollout``: the main job, a pipelined rollout on Ray; writes summary.json and the videos."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any

from . import UsageError

# Imports inside functions: Ray, the runtime and tqdm load when a rollout runs, not when `envfleet --help` or
# another subcommand imports this module.

__all__ = ["add_parser", "run", "UNDER_OUT"]

#: The keys of an env section holding a directory that a relative value puts under ``--out``.
UNDER_OUT = ("video_cfg.video_base_dir", "record.dir")


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add ``envfleet rollout`` to ``subparsers``."""
    ro: argparse.ArgumentParser = subparsers.add_parser("rollout", help="run a pipelined rollout (the main job)")
    ro.add_argument("--config", help="YAML config in verl's env layout")
    ro.add_argument("--address", help="Ray cluster to join (default: $RAY_ADDRESS, else a local Ray on 127.0.0.1)")
    ro.add_argument("--workers", type=int, default=1, help="EnvWorker actors (default 1)")
    ro.add_argument("--cpus-per-worker", type=float, default=1.0, help="CPUs reserved per worker (default 1)")
    ro.add_argument("--steps", type=int, default=10, help="chunk steps per stage (default 10)")
    ro.add_argument("--policy", default="random", help="zero, random, sleep:SECONDS or package.module:callable")
    ro.add_argument("--out", default="runs/rollout", help="output directory (summary.json, videos)")
    ro.add_argument("--no-progress", action="store_true", help="no progress bar")
    ro.add_argument("overrides", nargs="*", help="config overrides key=value, e.g. train.num_envs=2")
    return ro


class _Progress:
    """A tqdm bar of env steps, on stderr, when it is a terminal (or ``ENVFLEET_PROGRESS=1``).

    The bar appears with the first chunk, after ``on_first()`` (the start-up display's end), so
    that the two do not share the line while the first reset runs.
    """

    def __init__(self, total: int, enabled: bool, on_first: Any = None) -> None:
        self.enabled = enabled and (sys.stderr.isatty() or os.environ.get("ENVFLEET_PROGRESS") == "1")
        self.total = total
        self.on_first = on_first
        self.bar: Any = None

    def __call__(self, stats: Any) -> None:
        if self.on_first is not None:
            self.on_first()
            self.on_first = None
        if self.bar is None and self.enabled:
            from tqdm import tqdm

            self.bar = tqdm(total=self.total, unit="step", desc="env steps", file=sys.stderr, dynamic_ncols=True, mininterval=0.5)
        if self.bar is not None:
            self.bar.update(stats.env_steps - self.bar.n)
            self.bar.set_postfix(episodes=stats.episodes, successes=stats.successes, refresh=False)

    def close(self) -> None:
        """Close the bar (safe twice)."""
        if self.bar is not None:
            self.bar.close()
            self.bar = None


def _rollout_config(args: argparse.Namespace) -> Any:
    """The validated config of ``envfleet rollout``, with relative video and dataset paths under ``--out``."""
    from omegaconf import OmegaConf

    from envfleet.config import load_config, with_values

    if args.workers < 1:
        raise UsageError(f"envfleet rollout: --workers must be >= 1, got {args.workers}")
    if args.steps < 1:
        raise UsageError(f"envfleet rollout: --steps must be >= 1, got {args.steps}")
    cfg = load_config(args.config, args.overrides)
    dirs = {f"{section}.{key}": str(OmegaConf.select(cfg, f"{section}.{key}")) for section in ("train", "val") for key in UNDER_OUT}
    relative = {key: os.path.join(os.path.abspath(args.out), path) for key, path in dirs.items() if not os.path.isabs(path)}
    if relative:
        cfg = with_values(cfg, relative)
    if cfg.train.record.format is not None:
        from envfleet.recording import check_record_config

        check_record_config(cfg.train)
    if cfg.train.video_cfg.save_video:
        from envfleet.video import require_video_deps

        require_video_deps()
    return cfg


def _run_rollout(args: argparse.Namespace, cfg: Any, policy: Any) -> tuple[Any, dict[str, Any], float, bool]:
    """Start Ray and the group, run the loop, collect the metrics, and stop everything again.

    Returns the loop's stats, the group's metrics, the setup time and whether Ctrl-C cut the
    run short (the metrics then cover what ran). Nothing started here outlives the call.
    """
    import ray

    from ..runtime.cluster import init_ray
    from ..runtime.group import EnvWorkerGroup
    from ..runtime.startup import StartupDisplay
    from .loop import EnvLoop

    made: list[EnvWorkerGroup] = []  # the group, for the start-up display's polls once it exists

    def poll() -> Any:
        return ray.get([w.startup_status.remote() for w in made[0].workers], timeout=5.0) if made else None

    display = StartupDisplay(poll, enabled=not args.no_progress)
    display.begin("ray")
    try:
        ray_info = init_ray(args.address)
    except BaseException:
        display.close()
        raise
    group = None
    interrupted = False
    try:
        t_setup = time.perf_counter()
        display.begin("workers")
        group = EnvWorkerGroup(cfg, num_workers=args.workers, cpus_per_worker=args.cpus_per_worker)
        made.append(group)
        group.init_worker()
        display.begin("shards")
        group.init_simulator()
        display.end()
        setup_s = time.perf_counter() - t_setup
        chunk = int(cfg.actor.model.num_action_chunks)
        print(
            f"envfleet rollout: {cfg.train.simulator_type} {cfg.train.task_suite_name or cfg.train.task_name or ''} | "
            f"{args.workers} worker(s) x {group.stage_num} stage(s) x {group.num_envs} env(s), chunk {chunk} | policy {args.policy} | "
            f"Ray {'local on 127.0.0.1' if ray_info['local'] else ray_info['address']} | setup {setup_s:.1f}s",
            flush=True,
        )
        display.begin("reset")
        progress = _Progress(args.steps * group.stage_num * args.workers * group.num_envs * chunk, not args.no_progress, display.close)
        loop = EnvLoop(group, policy, on_progress=progress)
        try:
            loop.run(args.steps)
        except KeyboardInterrupt:
            interrupted = True
            print("\ninterrupted: collecting what ran so far", file=sys.stderr, flush=True)
        finally:
            progress.close()
        metrics = group.finish_rollout("train")
        return loop.stats, metrics, setup_s, interrupted
    finally:
        display.close()
        if group is not None:
            group.shutdown()
        if ray_info["local"]:
            ray.shutdown()


def _summary(args: argparse.Namespace, cfg: Any, stats: Any, metrics: dict[str, Any], setup_s: float, interrupted: bool) -> dict[str, Any]:
    """What summary.json holds."""
    from .loop import EnvLoop

    total = metrics["total"]
    episodes = total["episodes"]
    per_task = _with_groups(cfg, {str(t): dict(row) for t, row in sorted(total["per_task"].items())})
    return {
        "backend": str(cfg.train.simulator_type),
        "task_suite_name": cfg.train.task_suite_name,
        "task_name": cfg.train.task_name,
        "workers": args.workers,
        "stages": int(cfg.rollout.pipeline_stage_num),
        "num_envs": int(cfg.train.num_envs),
        "chunk": int(cfg.actor.model.num_action_chunks),
        "policy": args.policy,
        "interrupted": interrupted,
        "env_steps": stats.env_steps,
        "wall_s": round(stats.wall_s, 3),
        "setup_s": round(setup_s, 3),
        "first_reset_s": round(stats.first_reset_s, 3),
        "env_steps_per_s": round(EnvLoop.steps_per_s(stats), 3),
        "episodes": episodes,
        "success_rate": (total["successes"] / episodes) if episodes else 0.0,
        "per_task": per_task,
        "per_group": _group_rows(per_task),
        "execution": total.get("execution"),  # mode realtime: sub-steps per source, calls per delay
        "fingerprint": total["fingerprint"],
        "warnings": total["warnings"],
        "videos": sorted(total["videos"]),
        "datasets": total.get("datasets", []),
        "sim_restarts": total["sim_restarts"] + metrics["worker_restarts"],
        "restart_causes": total["restart_causes"],
        "time": {k: round(v, 3) for k, v in total["time"].items()}
        | {"policy_s": round(stats.policy_s, 3), "driver_wait_s": round(stats.wait_s, 3)},
    }


def _with_groups(cfg: Any, per_task: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Each task row with its ``group``, where the backend groups its tasks (``BackendSpec.task_groups``)."""
    from envfleet.plugins import get_backend

    groups = get_backend(str(cfg.train.simulator_type)).task_groups
    if groups is None:
        return per_task
    of = groups(cfg.train)
    for task, row in per_task.items():
        row["group"] = of.get(int(task))
    return per_task


def _group_rows(per_task: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per group: episodes, successes (any step and at the end), the rate and its 95% Wilson interval."""
    from .intervals import group_counts, wilson

    at_end = group_counts(per_task, "successes_at_end")
    out = {}
    for group, (k, n) in group_counts(per_task).items():
        lo, hi = wilson(k, n)
        out[group] = {
            "episodes": n,
            "successes": k,
            "successes_at_end": at_end[group][0],
            "success_rate": k / n if n else 0.0,
            "ci95": [lo, hi],
        }
    return out


def _print_report(summary: dict[str, Any], stats: Any, out_dir: str) -> None:
    """The per-task table, the totals, warnings, restarts, videos and where the summary went."""
    print(f"\n{'task':>5}  {'episodes':>8}  {'success any':>11}  {'at end':>6}  {'at reset':>8}  {'mean len':>8}  description")
    for task, row in summary["per_task"].items():
        print(
            f"{task:>5}  {row['episodes']:>8}  {row['successes']:>11}  {row['successes_at_end']:>6}  "
            f"{row['successful_at_reset']:>8}  {row['mean_length']:>8.1f}  {row['description']}"
        )
    if not summary["per_task"]:
        print("  (no episode finished within the steps run)")
    if summary.get("per_group"):
        from .intervals import rate_cell

        print(f"\n{'group':>12}  {'success any: k/n rate [95% CI]':>30}")
        for group, row in summary["per_group"].items():
            print(f"{group:>12}  {rate_cell(row['successes'], row['episodes']):>30}")
        print(
            f"{'all':>12}  {rate_cell(sum(r['successes'] for r in summary['per_group'].values()), sum(r['episodes'] for r in summary['per_group'].values())):>30}"
        )
    fp = summary["fingerprint"]
    if fp is not None:
        print(f"protocol fingerprint {fp['hash']} (summary.json has what it covers)")
    print(
        f"\n{stats.env_steps} env steps in {stats.wall_s - stats.first_reset_s:.1f}s (after a first reset of {stats.first_reset_s:.1f}s) "
        f"= {summary['env_steps_per_s']:.1f} env steps/s | "
        f"episodes {summary['episodes']}, success rate {summary['success_rate']:.2f} | restarts {summary['sim_restarts']}"
        + (" | interrupted" if summary["interrupted"] else "")
    )
    for warning in summary["warnings"]:
        print(f"warning: {warning}")
    for cause in summary["restart_causes"]:
        print(_restart_line(cause))
    for ds in summary.get("datasets", []):
        cost = f"; {ds['recording_cost']}" if ds.get("recording_cost") else ""
        print(f"dataset: {ds['root']} ({ds['episodes']} episodes, {ds['frames']} frames{cost})")
    for path in summary["videos"]:
        print(f"video: {path}")
    print(f"summary: {os.path.join(out_dir, 'summary.json')}")


def run(args: argparse.Namespace) -> int:
    """Run the main job (see ``envfleet rollout --help``); 130 when Ctrl-C cut it short, after writing what ran."""
    from .policies import load_policy

    cfg = _rollout_config(args)
    policy = load_policy(args.policy, int(cfg.actor.model.num_action_chunks), int(cfg.actor.model.action_dim), seed=int(cfg.train.seed))
    out_dir = os.path.abspath(args.out)
    os.makedirs(out_dir, exist_ok=True)
    stats, metrics, setup_s, interrupted = _run_rollout(args, cfg, policy)
    summary = _summary(args, cfg, stats, metrics, setup_s, interrupted)
    with open(os.path.join(out_dir, "summary.json"), "w") as fh:
        json.dump(summary, fh, indent=2, default=str)
    _print_report(summary, stats, out_dir)
    return 130 if interrupted else 0


def _restart_line(cause: dict[str, Any]) -> str:
    """One line for a restart: where, why, and the simulator's last output line."""
    if cause.get("stage") is None:
        return f"restart: worker {cause['rank']}: {cause['cause']}"
    last = next((line for line in reversed(cause.get("stderr_tail", [])) if line.strip()), "")
    where = f"worker {cause['rank']} stage {cause['stage']} shard {cause['shard']} (envs {cause['envs']})"
    return f"restart: {where}: {cause['cause']} ({cause['exit']})" + (f"; last output: {last.strip()}" if last else "")
