"""verl-vla's ``cluster.env`` config read into envfleet's: what maps, and what is refused.

verl-vla's layout (``EnvTrainConfig``, or a mapping of the same shape)::

    env_loop:   {pipeline_stage_num, max_interactions}
    env_worker: {auto_reset, num_envs, modes, device, simulator_start_timeout_s,
                 action_execution, teleop, recorder, target_step_hz, ...,
                 simulator: {simulator_type, libero: {...}, envfleet: {...}, ...}}

``simulator_type: libero`` reads verl-vla's ``libero`` section: ``task_suite_name``,
``max_episode_steps``, ``seed``, the cameras (``camera_heights``, ``camera_widths``,
``camera_names``), ``reset_warmup_steps`` (envfleet's ``settle_steps``, with verl-vla's
all-zero action: ``train.libero.settle_action: zeros``) and the reset
filters (``task_ids``, ``num_trials_per_task``, ``specific_reset_id``). Any other name
is an envfleet backend, configured by the section's ``envfleet`` keys (envfleet's
``train`` layout) and the filters beside it. ``envfleet`` keys win over mapped ones.

``action_execution`` maps to envfleet's ``train.execution`` (:mod:`envfleet.execution`):
``mode: async`` to ``mode: realtime`` on ``clock: wall`` (verl-vla's executor runs on the wall
clock; ``simulator.envfleet.execution.clock: sim`` makes it reproducible), ``replan_after_steps``
to ``horizon``, ``smooth_overlapping_actions`` to ``smooth_overlap``, ``interpolation`` and
``serial_smoothing`` as they are, ``target_step_hz`` to ``execution.target_step_hz`` (async only).
``log_step_latency`` is the adapter's: a ``[step-latency]`` line per sub-step, as verl-vla prints.
A combination envfleet does not serve (serial smoothing or pacing under ``mode: serial`` with
async's keys, pacing of serial stepping) is a ConfigError naming both keys.

Refused with a :class:`~envfleet.errors.ConfigError` naming the key, since envfleet
does not serve them: teleoperation, ``confirm_before_record`` and verl-vla's own ``arena``
and ``piper`` simulators.
verl-vla's ``video`` recorder maps to envfleet's ``video_cfg``; its ``lerobot`` recorder to
envfleet's ``train.record`` (``format: lerobot``, ``dir: {lerobot.root}/{lerobot.repo_id}_envfleet``),
whose datasets ``pop_lerobot_dataset`` hands out (:mod:`envfleet_ray.verl_vla_record`). ``auto_reset`` is the
adapter's own (finished envs reset at the chunk's end to states drawn from the filtered
pool, as verl-vla's env does); envfleet's ``train.auto_reset`` stays off.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import torch
from omegaconf import DictConfig, ListConfig, OmegaConf

from envfleet.errors import ConfigError

__all__ = ["VerlVlaSettings", "read_config", "plain"]

_MODES = ("train", "eval")
_FILTERS = ("task_ids", "num_trials_per_task", "specific_reset_id")


@dataclass
class VerlVlaSettings:
    """What the verl-vla adapter reads from verl-vla's config."""

    stage_num: int
    num_envs: int
    modes: tuple[str, ...]
    auto_reset: bool
    seed: int
    filters: dict[str, Any]  # ResetPlan's task_ids, num_trials_per_task, specific_reset_id
    state_dtype: torch.dtype  # verl-vla's LIBERO hands out float64 state
    fleet_config: dict[str, Any] = field(default_factory=dict)  # envfleet's config (load_config layout)
    lerobot: dict[str, str] | None = None  # verl-vla's recorder.lerobot root and repo_id, when it records
    realtime: bool = False  # action_execution.mode: async
    log_step_latency: bool = False  # print verl-vla's [step-latency] lines


def plain(value: Any) -> Any:
    """A config (dataclasses, DictConfigs, mappings, sequences) as plain dicts and lists."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, (DictConfig, ListConfig)):
        try:
            return plain(OmegaConf.to_container(value, resolve=True))
        except Exception as exc:
            raise ConfigError(f"verl-vla's env config does not resolve: {exc}") from None
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    return value


def _section(cfg: Mapping[str, Any], key: str, where: str) -> dict[str, Any]:
    value = cfg.get(key)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ConfigError(f"{where}.{key} must be a mapping, got {type(value).__name__}")
    return value


def _refuse(worker: dict[str, Any]) -> None:
    """A ConfigError for the first key envfleet does not serve."""
    where = "cluster.env.env_worker"
    execution = _section(worker, "action_execution", where)
    mode = execution.get("mode", "serial")
    if mode not in ("serial", "async"):
        raise ConfigError(f"{where}.action_execution.mode must be 'serial' or 'async', got {mode!r}")
    both = [
        (
            mode == "async" and bool(_section(execution, "serial_smoothing", where).get("enable")),
            "action_execution.serial_smoothing.enable",
        ),
        (mode == "serial" and bool(execution.get("smooth_overlapping_actions")), "action_execution.smooth_overlapping_actions"),
        (mode == "serial" and worker.get("target_step_hz") is not None, "target_step_hz"),
    ]
    for bad, key in both:
        if bad:
            raise ConfigError(
                f"{where}.{key} and {where}.action_execution.mode: {mode} do not go together in envfleet's env worker: "
                + ("serial smoothing is for mode serial" if "serial_smoothing" in key else "it needs mode async")
            )
    refused = [
        (bool(_section(worker, "teleop", where).get("enable")), "teleop.enable", "teleoperation"),
        (bool(worker.get("confirm_before_record")), "confirm_before_record", "teleoperated recording"),
    ]
    for bad, key, what in refused:
        if bad:
            raise ConfigError(f"{where}.{key}: {what} is not served by envfleet's env worker; unset it, or use verl-vla's own EnvWorker")


def _simulator(sim: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any], int]:
    """envfleet's ``train`` keys, the reset filters and the seed of verl-vla's simulator section."""
    where = "cluster.env.env_worker.simulator"
    name = sim.get("simulator_type", "libero")
    extra = _section(sim, "envfleet", where)
    if name in ("arena", "piper"):
        raise ConfigError(f"{where}.simulator_type: {name!r} is verl-vla's own simulator; envfleet serves 'libero' and its own backends")
    if name == "libero":
        lib = _section(sim, "libero", where)
        train: dict[str, Any] = {"simulator_type": "libero"}
        for src, dst in [("task_suite_name", "task_suite_name"), ("max_episode_steps", "max_episode_steps"), ("seed", "seed")]:
            if lib.get(src) is not None:
                train[dst] = lib[src]
        if lib.get("reset_warmup_steps") is not None:
            train["settle_steps"] = int(lib["reset_warmup_steps"])
        train["libero"] = {"settle_action": "zeros"}  # verl-vla's warm-up steps are all zeros (gripper 0)
        cams = {k: lib[k] for k in ("camera_heights", "camera_widths", "camera_names", "camera_depths") if lib.get(k) is not None}
        if cams:
            train["init_params"] = cams
        filters = {k: lib.get(k) for k in _FILTERS}
        seed = int(lib.get("seed", 42))
    else:
        train = {"simulator_type": str(name)}
        filters = {k: sim.get(k) for k in _FILTERS}
        seed = int(sim.get("seed", 42))
        train["seed"] = seed
    return _merge(train, extra), filters, seed


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in over.items():
        out[key] = _merge(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


def read_config(config: Any) -> VerlVlaSettings:
    """Read verl-vla's ``cluster.env`` (``EnvTrainConfig`` or a mapping of its layout).

    :raises ConfigError: a key envfleet does not serve, a mode it does not know, a malformed section.
    """
    cfg = plain(config)
    if not isinstance(cfg, dict) or "env_worker" not in cfg:
        raise ConfigError(f"EnvWorker takes verl-vla's cluster.env (env_loop, env_worker), got {type(config).__name__}")
    loop = _section(cfg, "env_loop", "cluster.env")
    worker = _section(cfg, "env_worker", "cluster.env")
    _refuse(worker)
    modes = tuple(worker.get("modes") or ["train"])
    unknown = [m for m in modes if m not in _MODES]
    if unknown or not modes:
        raise ConfigError(f"cluster.env.env_worker.modes {list(modes)}: expected some of {list(_MODES)}")
    train, filters, seed = _simulator(_section(worker, "simulator", "cluster.env.env_worker"))
    execution = _execution(worker)
    train["execution"] = _merge(execution, train.get("execution") or {})  # envfleet's own keys win
    auto_reset = bool(worker.get("auto_reset", False))
    train["num_envs"] = int(worker.get("num_envs", 1))
    # The adapter resets finished envs itself, to states drawn from the filtered pool as
    # verl-vla's env does; the backend's own auto-reset (a seeded cycle over the whole suite) stays off.
    train["auto_reset"] = False
    if worker.get("simulator_start_timeout_s") is not None:
        train.setdefault("start_timeout_s", float(worker["simulator_start_timeout_s"]))
    if worker.get("device") not in (None, "cpu"):
        train.setdefault("device", worker["device"])
    recorder = _section(worker, "recorder", "cluster.env.env_worker")
    if recorder.get("enable") and "video" in list(recorder.get("recorders") or []):
        video = _section(recorder, "video", "cluster.env.env_worker.recorder")
        train.setdefault("video_cfg", {"save_video": True, "video_base_dir": video.get("root", "videos"), "fps": int(video.get("fps", 10))})
    lerobot = _lerobot(recorder)
    if lerobot is not None:
        train.setdefault("record", {"format": "lerobot", "dir": f"{lerobot['root']}/{lerobot['repo_id']}_envfleet"})
    stages = int(loop.get("pipeline_stage_num", 2))
    # No chunk length: verl-vla's config has none; the policy's action tensor sets it each call.
    fleet = {"train": train, "rollout": {"pipeline_stage_num": stages}, "actor": {"model": {"num_action_chunks": None}}}
    return VerlVlaSettings(
        stage_num=stages,
        num_envs=train["num_envs"],
        modes=modes,
        auto_reset=auto_reset,
        seed=seed,
        filters=filters,
        state_dtype=torch.float64 if train["simulator_type"] == "libero" else torch.float32,
        fleet_config=fleet,
        lerobot=lerobot,
        realtime=train["execution"].get("mode") == "realtime",
        log_step_latency=bool(worker.get("log_step_latency")),
    )


def _execution(worker: dict[str, Any]) -> dict[str, Any]:
    """envfleet's ``train.execution`` of verl-vla's ``action_execution`` and ``target_step_hz`` (checked by :func:`_refuse`)."""
    where = "cluster.env.env_worker.action_execution"
    section = _section(worker, "action_execution", "cluster.env.env_worker")
    out: dict[str, Any] = {}
    interpolation = _section(section, "interpolation", where)
    if interpolation.get("enable"):
        out["interpolation"] = {"enable": True, "factor": int(interpolation.get("factor", 2))}
    smoothing = _section(section, "serial_smoothing", where)
    if smoothing.get("enable"):
        steps = (int(smoothing.get("execution_steps", 80)), int(smoothing.get("blend_steps", 20)))
        out["serial_smoothing"] = {"enable": True, "execution_steps": steps[0], "blend_steps": steps[1]}
    if section.get("mode", "serial") == "async":
        replan = int(section.get("replan_after_steps", 1))
        if replan <= 0:
            raise ConfigError(f"{where}.replan_after_steps must be positive (sub-steps a call runs), got {replan}")
        out.update(mode="realtime", clock="wall", horizon=replan, smooth_overlap=bool(section.get("smooth_overlapping_actions", False)))
        if worker.get("target_step_hz") is not None:
            out["target_step_hz"] = float(worker["target_step_hz"])
    return out


def _lerobot(recorder: dict[str, Any]) -> dict[str, str] | None:
    """verl-vla's LeRobot recorder's ``root`` and ``repo_id`` (its defaults where unset), or None when it is off."""
    where = "cluster.env.env_worker.recorder"
    section = _section(recorder, "lerobot", where)
    if not recorder.get("enable") or "lerobot" not in list(recorder.get("recorders") or []) or not section.get("enable", True):
        return None
    root, repo_id = section.get("root", "/tmp/verl_vla_lerobot_records"), section.get("repo_id", "local/verl_vla_libero")
    if not isinstance(root, str) or not root or not isinstance(repo_id, str) or not repo_id:
        raise ConfigError(f"{where}.lerobot: root and repo_id must be non-empty strings, got root={root!r}, repo_id={repo_id!r}")
    return {"root": root, "repo_id": repo_id}
