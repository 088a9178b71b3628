"""The ``envfleet`` command: ``envfleet backends`` and ``envfleet rollout`` (the main job)."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback
from collections.abc import Sequence
from typing import Any

__all__ = ["main", "build_parser", "TRACEBACK_ENV"]

TRACEBACK_ENV = "ENVFLEET_TRACEBACK"  # set to 1 to print the full traceback of a failure


class _UsageError(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> Any:  # one clear line, exit code 2, no traceback
        raise _UsageError(f"{self.prog}: {message}")


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``envfleet`` command."""
    parser = _Parser(
        prog="envfleet",
        description="Environment workers for RL of robot policies.",
        epilog=f"--traceback (anywhere on the line) or {TRACEBACK_ENV}=1: print the full traceback of a failure.",
    )
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    be = sub.add_parser("backends", help="list installed backends and plugins that failed to load (exit code 1 if any did)")
    be.add_argument("--check", action="store_true", help="also build and step each backend once (exit code 1 if any fails)")
    be.add_argument("names", nargs="*", help="with --check: the backends to check (default all), and key=value overrides")
    ro = sub.add_parser("rollout", help="run a pipelined rollout (the main job)")
    ro.add_argument("--config", help="YAML config in verl's env layout")
    ro.add_argument("--address", help="Ray cluster to join (default: $RAY_ADDRESS, else a local Ray on 127.0.0.1)")
    ro.add_argument("--workers", type=int, default=1, help="EnvWorker actors (default 1)")
    ro.add_argument("--cpus-per-worker", type=float, default=1.0, help="CPUs reserved per worker (default 1)")
    ro.add_argument("--steps", type=int, default=10, help="chunk steps per stage (default 10)")
    ro.add_argument("--policy", default="random", help="zero, random, sleep:SECONDS or package.module:callable")
    ro.add_argument("--out", default="runs/rollout", help="output directory (summary.json, videos)")
    ro.add_argument("--no-progress", action="store_true", help="no progress bar")
    ro.add_argument("overrides", nargs="*", help="config overrides key=value, e.g. train.num_envs=2")
    return parser


def cmd_backends(check: bool = False, names: Sequence[str] = ()) -> int:
    """Print the installed backends and the plugins that failed to load; with ``check``, build and
    step each backend once. Returns 1 if a plugin failed to load or a check failed, else 0."""
    from envfleet.plugins import list_backends, plugin_failures

    specs = list_backends()
    if specs:
        width = max(len("backend"), *(len(n) for n in specs))
        print(f"{'backend':<{width}}  package              version   description")
        for name, spec in specs.items():
            print(f"{name:<{width}}  {spec.package or '-':<20} {spec.version or '-':<9} {spec.description}")
    else:
        print("no backends installed (pip install envfleet-libero, envfleet-isaac, or your own plugin)")
    failures = plugin_failures()
    if failures:
        print("\nplugins that failed to load:")
        for failure in failures:
            print(f"  {failure.name}: {failure.what}: {type(failure.error).__name__}: {failure.error}")
    if not check:
        return 1 if failures else 0
    from envfleet.check import check_backend

    overrides = [n for n in names if "=" in n]
    chosen = [n for n in names if "=" not in n] or list(specs)
    unknown = [n for n in chosen if n not in specs]
    if unknown:
        raise _UsageError(f"envfleet backends --check: not installed: {', '.join(unknown)} (installed: {', '.join(specs) or 'none'})")
    print("\nchecks (build one env, reset it, step one chunk):")
    results = [check_backend(name, overrides) for name in chosen]
    for result in results:
        print(f"  {result.line()}", flush=True)
    return 1 if failures or not all(r.ok for r in results) else 0


class _Progress:
    def __init__(self, total: int, enabled: bool) -> None:
        self.total = max(total, 1)
        self.enabled = (enabled and sys.stderr.isatty()) or (enabled and os.environ.get("ENVFLEET_PROGRESS") == "1")
        self.t0 = time.perf_counter()
        self.last = 0.0

    def __call__(self, stats: Any) -> None:
        now = time.perf_counter()
        if not self.enabled or (now - self.last < 0.2 and stats.env_steps < self.total):
            return
        self.last = now
        rate = stats.env_steps / max(now - self.t0, 1e-9)
        frac = min(stats.env_steps / self.total, 1.0)
        bar = "#" * int(frac * 30)
        sys.stderr.write(f"\r[{bar:<30}] {stats.env_steps}/{self.total} env steps | {rate:7.1f} steps/s | {stats.episodes} episodes")
        sys.stderr.flush()

    def close(self) -> None:
        if self.enabled:
            sys.stderr.write("\n")


def cmd_rollout(args: argparse.Namespace) -> int:
    """Run the main job; see ``envfleet rollout --help``."""
    from omegaconf import OmegaConf

    from envfleet.config import load_config
    from envfleet.errors import ConfigError

    from .policies import load_policy

    if args.workers < 1:
        raise _UsageError(f"envfleet rollout: --workers must be >= 1, got {args.workers}")
    if args.steps < 1:
        raise _UsageError(f"envfleet rollout: --steps must be >= 1, got {args.steps}")
    cfg = load_config(args.config, args.overrides)
    out_dir = os.path.abspath(args.out)
    video_dir = str(cfg.train.video_cfg.video_base_dir)
    if not os.path.isabs(video_dir):
        data = OmegaConf.to_container(cfg, resolve=True)
        assert isinstance(data, dict)
        for section in ("train", "val"):
            data[section]["video_cfg"]["video_base_dir"] = os.path.join(out_dir, video_dir)
        cfg = load_config(data={str(k): v for k, v in data.items()})
    chunk, action_dim = int(cfg.actor.model.num_action_chunks), int(cfg.actor.model.action_dim)
    policy = load_policy(args.policy, chunk, action_dim, seed=int(cfg.train.seed))
    if cfg.train.video_cfg.save_video:
        from envfleet.video import require_video_deps

        require_video_deps()
    os.makedirs(out_dir, exist_ok=True)

    from .cluster import init_ray

    ray_info = init_ray(args.address)
    import ray

    from .group import EnvWorkerGroup
    from .loop import EnvLoop

    group = None
    try:
        t_setup = time.perf_counter()
        group = EnvWorkerGroup(cfg, num_workers=args.workers, cpus_per_worker=args.cpus_per_worker)
        group.init_worker()
        group.init_simulator()
        setup_s = time.perf_counter() - t_setup
        stages, n = group.stage_num, group.num_envs
        total = args.steps * stages * args.workers * n * chunk
        progress = _Progress(total, not args.no_progress)
        print(
            f"envfleet rollout: {cfg.train.simulator_type} {cfg.train.task_suite_name or cfg.train.task_name or ''} | "
            f"{args.workers} worker(s) x {stages} stage(s) x {n} env(s), chunk {chunk} | policy {args.policy} | "
            f"Ray {'local on 127.0.0.1' if ray_info['local'] else ray_info['address']} | setup {setup_s:.1f}s",
            flush=True,
        )
        loop = EnvLoop(group, policy, on_progress=progress)
        stats = loop.run(args.steps)
        progress.close()
        metrics = group.finish_rollout("train")
    except ConfigError:
        raise
    finally:
        if group is not None:
            group.shutdown()
        if ray_info["local"]:
            ray.shutdown()
    total_m = metrics["total"]
    per_task = {
        str(t): {"description": r["description"], "episodes": r["episodes"], "successes": r["successes"]}
        for t, r in sorted(total_m["per_task"].items())
    }
    episodes = total_m["episodes"]
    summary = {
        "backend": str(cfg.train.simulator_type),
        "task_suite_name": cfg.train.task_suite_name,
        "task_name": cfg.train.task_name,
        "workers": args.workers,
        "stages": stages,
        "num_envs": n,
        "chunk": chunk,
        "policy": args.policy,
        "env_steps": stats.env_steps,
        "wall_s": round(stats.wall_s, 3),
        "setup_s": round(setup_s, 3),
        "first_reset_s": round(stats.first_reset_s, 3),
        "env_steps_per_s": round(EnvLoop.steps_per_s(stats), 3),
        "episodes": episodes,
        "success_rate": (total_m["successes"] / episodes) if episodes else 0.0,
        "per_task": per_task,
        "videos": sorted(total_m["videos"]),
        "sim_restarts": total_m["sim_restarts"] + metrics["worker_restarts"],
        "restart_causes": total_m["restart_causes"],
        "time": {k: round(v, 3) for k, v in total_m["time"].items()}
        | {"policy_s": round(stats.policy_s, 3), "driver_wait_s": round(stats.wait_s, 3)},
    }
    with open(os.path.join(out_dir, "summary.json"), "w") as fh:
        json.dump(summary, fh, indent=2)
    print(f"\n{'task':>5}  {'episodes':>8}  {'successes':>9}  description")
    for task, row in per_task.items():
        print(f"{task:>5}  {row['episodes']:>8}  {row['successes']:>9}  {row['description']}")
    if not per_task:
        print("  (no episode finished within the steps run)")
    print(
        f"\n{stats.env_steps} env steps in {stats.wall_s - stats.first_reset_s:.1f}s (after a first reset of {stats.first_reset_s:.1f}s) "
        f"= {summary['env_steps_per_s']:.1f} env steps/s | "
        f"episodes {episodes}, success rate {summary['success_rate']:.2f} | restarts {summary['sim_restarts']}"
    )
    for cause in summary["restart_causes"]:
        print(_restart_line(cause))
    for path in summary["videos"]:
        print(f"video: {path}")
    print(f"summary: {os.path.join(out_dir, 'summary.json')}")
    return 0


def _restart_line(cause: dict[str, Any]) -> str:
    """One line for a restart: where, why, and the simulator's last output line."""
    if cause.get("stage") is None:
        return f"restart: worker {cause['rank']}: {cause['cause']}"
    last = next((line for line in reversed(cause.get("stderr_tail", [])) if line.strip()), "")
    where = f"worker {cause['rank']} stage {cause['stage']} shard {cause['shard']} (envs {cause['envs']})"
    return f"restart: {where}: {cause['cause']} ({cause['exit']})" + (f"; last output: {last.strip()}" if last else "")


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``envfleet`` command.

    A failure ends with one line naming the problem: exit code 2 for usage and config
    errors, 1 for a failure while running, whose line says that ``--traceback`` or
    ``ENVFLEET_TRACEBACK=1`` prints the full traceback too.
    """
    from envfleet.errors import EnvFleetError

    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    show = "--traceback" in argv or os.environ.get(TRACEBACK_ENV, "") not in ("", "0")
    argv = [a for a in argv if a != "--traceback"]
    hint = "" if show else f" (--traceback or {TRACEBACK_ENV}=1 shows where)"
    try:
        args = parser.parse_args(argv)
        if args.command == "backends":
            if args.names and not args.check:
                raise _UsageError("envfleet backends: backend names and overrides go with --check")
            return cmd_backends(args.check, args.names)
        return cmd_rollout(args)
    except _UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except Exception as exc:
        if show:
            traceback.print_exc()
        message = str(exc.args[0]) if isinstance(exc, KeyError) and exc.args else str(exc)
        first = message.strip().splitlines()[0] if message.strip() else type(exc).__name__
        if not isinstance(exc, (EnvFleetError, KeyError)):
            first = f"{type(exc).__name__}: {first}"
        # A config error says all there is to fix; a failure while running says where to look.
        usage = isinstance(exc, (EnvFleetError, KeyError)) and not isinstance(exc, RuntimeError)
        print(f"error: {first}{'' if usage else hint}", file=sys.stderr)
        return 2 if usage else 1


if __name__ == "__main__":
    sys.exit(main())
