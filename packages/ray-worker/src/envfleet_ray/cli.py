"""The ``envfleet`` command: ``envfleet backends``, ``doctor``, ``venv``, ``compare``, ``protocols`` and ``rollout`` (the main job)."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback
import warnings
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
    from . import compare, doctor, protocols, venv

    doctor.add_parser(sub)
    venv.add_parser(sub)
    compare.add_parser(sub)
    protocols.add_parser(sub)
    from . import report

    report.add_parser(sub)
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
    from envfleet.plugins import PLUGIN_API_VERSION, deprecations, list_backends, plugin_failures

    specs = list_backends()
    if specs:
        width = max(len("backend"), *(len(n) for n in specs))
        print(f"{'backend':<{width}}  package              version   description")
        for name, spec in specs.items():
            print(f"{name:<{width}}  {spec.package or '-':<20} {spec.version or '-':<9} {spec.description}")
    else:
        print("no backends installed (pip install envfleet-libero, envfleet-isaac, or your own plugin)")
    old = [d for spec in specs.values() for d in deprecations(spec)]
    if old:  # they still run, the old way: a notice for their authors, not a failure
        print(f"\nbackends written for an older plugin API (this envfleet's is {PLUGIN_API_VERSION}; they run as before):")
        for deprecation in old:
            print(f"  deprecated: {deprecation.line()}")
    failures = plugin_failures()
    if failures:
        print("\nplugins that failed to load:")
        for failure in failures:
            print(f"  {failure.name}: {failure.what}: {type(failure.error).__name__}: {failure.error}")
    if not check:
        return 1 if failures else 0
    from envfleet.diagnostics.check import check_backend

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
    """A tqdm bar of env steps, on stderr, when it is a terminal (or ``ENVFLEET_PROGRESS=1``)."""

    def __init__(self, total: int, enabled: bool) -> None:
        enabled = enabled and (sys.stderr.isatty() or os.environ.get("ENVFLEET_PROGRESS") == "1")
        self.bar: Any = None
        if enabled:
            from tqdm import tqdm

            self.bar = tqdm(total=total, unit="step", desc="env steps", file=sys.stderr, dynamic_ncols=True, mininterval=0.5)

    def __call__(self, stats: Any) -> None:
        if self.bar is not None:
            self.bar.update(stats.env_steps - self.bar.n)
            self.bar.set_postfix(episodes=stats.episodes, successes=stats.successes, refresh=False)

    def close(self) -> None:
        """Close the bar (safe twice)."""
        if self.bar is not None:
            self.bar.close()
            self.bar = None


def _rollout_config(args: argparse.Namespace) -> Any:
    """The validated config of ``envfleet rollout``, with relative video paths under ``--out``."""
    from omegaconf import OmegaConf

    from envfleet.config import load_config

    if args.workers < 1:
        raise _UsageError(f"envfleet rollout: --workers must be >= 1, got {args.workers}")
    if args.steps < 1:
        raise _UsageError(f"envfleet rollout: --steps must be >= 1, got {args.steps}")
    cfg = load_config(args.config, args.overrides)
    video_dir = str(cfg.train.video_cfg.video_base_dir)
    record_dir = str(cfg.train.record.dir)
    if not os.path.isabs(video_dir) or not os.path.isabs(record_dir):
        data = OmegaConf.to_container(cfg, resolve=True)
        assert isinstance(data, dict)
        for section in ("train", "val"):
            data[section]["video_cfg"]["video_base_dir"] = os.path.join(os.path.abspath(args.out), video_dir)
            data[section]["record"]["dir"] = os.path.join(os.path.abspath(args.out), str(data[section]["record"]["dir"]))
        cfg = load_config(data={str(k): v for k, v in data.items()})
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
    from .cluster import init_ray
    from .group import EnvWorkerGroup
    from .loop import EnvLoop

    ray_info = init_ray(args.address)
    group = None
    interrupted = False
    try:
        t_setup = time.perf_counter()
        group = EnvWorkerGroup(cfg, num_workers=args.workers, cpus_per_worker=args.cpus_per_worker)
        group.init_worker()
        group.init_simulator()
        setup_s = time.perf_counter() - t_setup
        chunk = int(cfg.actor.model.num_action_chunks)
        print(
            f"envfleet rollout: {cfg.train.simulator_type} {cfg.train.task_suite_name or cfg.train.task_name or ''} | "
            f"{args.workers} worker(s) x {group.stage_num} stage(s) x {group.num_envs} env(s), chunk {chunk} | policy {args.policy} | "
            f"Ray {'local on 127.0.0.1' if ray_info['local'] else ray_info['address']} | setup {setup_s:.1f}s",
            flush=True,
        )
        progress = _Progress(args.steps * group.stage_num * args.workers * group.num_envs * chunk, not args.no_progress)
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
        if group is not None:
            group.shutdown()
        if ray_info["local"]:
            import ray

            ray.shutdown()


def _summary(args: argparse.Namespace, cfg: Any, stats: Any, metrics: dict[str, Any], setup_s: float, interrupted: bool) -> dict[str, Any]:
    """What summary.json holds."""
    from .loop import EnvLoop

    total = metrics["total"]
    episodes = total["episodes"]
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
        "per_task": {str(t): row for t, row in sorted(total["per_task"].items())},
        "fingerprint": total["fingerprint"],
        "warnings": total["warnings"],
        "videos": sorted(total["videos"]),
        "datasets": total.get("datasets", []),
        "sim_restarts": total["sim_restarts"] + metrics["worker_restarts"],
        "restart_causes": total["restart_causes"],
        "time": {k: round(v, 3) for k, v in total["time"].items()}
        | {"policy_s": round(stats.policy_s, 3), "driver_wait_s": round(stats.wait_s, 3)},
    }


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
        print(f"dataset: {ds['root']} ({ds['episodes']} episodes, {ds['frames']} frames)")
    for path in summary["videos"]:
        print(f"video: {path}")
    print(f"summary: {os.path.join(out_dir, 'summary.json')}")


def cmd_rollout(args: argparse.Namespace) -> int:
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


def _show_plugin_deprecations() -> None:
    """Print each :class:`~envfleet.errors.PluginDeprecationWarning` once, as a ``warning:`` line on stderr.

    Python hides a ``DeprecationWarning`` raised inside a library, and this one is for whoever
    runs the command as much as for the plugin's author: it names the plugin to update.
    """
    from envfleet.errors import PluginDeprecationWarning

    warnings.filterwarnings("default", category=PluginDeprecationWarning)
    shown: set[str] = set()
    original = warnings.showwarning

    def show(
        message: Warning | str, category: type[Warning], filename: str, lineno: int, file: Any = None, line: str | None = None
    ) -> None:
        if not issubclass(category, PluginDeprecationWarning):
            original(message, category, filename, lineno, file, line)
        elif str(message) not in shown:
            shown.add(str(message))
            print(f"warning: {category.__name__}: {message}", file=sys.stderr, flush=True)

    warnings.showwarning = show


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``envfleet`` command.

    A failure ends with one line naming the problem: exit code 2 for usage and config
    errors, 1 for a failure while running, whose line says that ``--traceback`` or
    ``ENVFLEET_TRACEBACK=1`` prints the full traceback too.
    """
    from envfleet.errors import EnvFleetError

    _show_plugin_deprecations()
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
        if args.command == "doctor":
            from . import doctor

            return doctor.run(args)
        if args.command == "venv":
            from . import venv

            return venv.run(args)
        if args.command == "report":
            from . import report

            return report.run(args)
        if args.command in ("compare", "protocols"):
            from . import compare, protocols

            return (compare if args.command == "compare" else protocols).run(args)
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
