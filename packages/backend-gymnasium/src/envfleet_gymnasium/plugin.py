"""Registration of the ``gymnasium`` backend: any gymnasium env, named by its id in ``train.gymnasium``.

This is the module the ``envfleet`` entry point names, so it stays light: it imports neither
gymnasium nor the env's packages. What the worker must know before any shard starts (the
observation spec, the action size, the episode horizon) comes from the spec probe
(:mod:`envfleet_gymnasium.probe`), run under ``train.simulator_python`` and cached.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Any

import numpy as np

from envfleet.env import ObservationSpec
from envfleet.errors import ConfigError
from envfleet.plugins import BackendRegistry, BackendSpec, hookimpl

from .carry import Layout, action_layout, observation_layout
from .case import AUTO, Case, GymnasiumConfig
from .layout import choose
from .probe import probe
from .spaces import native_spaces

__all__ = [
    "GymnasiumConfig",
    "layout_of",
    "observation_spec",
    "horizon",
    "envs_per_process",
    "default_in_process",
    "action_dim",
    "action_check",
    "protocol_parts",
    "render_last",
    "doctor_findings",
    "envfleet_register_backends",
]


def layout_of(case: Case, answer: dict[str, Any]) -> Layout:
    """What envfleet carries of the probed env (its spaces and render frame) under ``case``'s keys."""
    return observation_layout(answer["obs"], answer.get("render") if case.render else None, case.image_keys, case.state_keys)


def observation_spec(cfg: Any, num_envs: int) -> ObservationSpec:
    """The probed env's observation keys (:mod:`envfleet_gymnasium.carry`); also checks the section:
    the action space, the horizon and the keys, before any shard starts."""
    case = Case.from_section(cfg)
    answer = probe(cfg)
    layout = layout_of(case, answer)
    action_layout(answer["action"], case.rescale_actions)
    horizon(cfg)
    return layout.spec()


def envs_per_process(cfg: Any) -> int:
    """``train.gymnasium.envs_per_process``: the number given, or ``auto``'s (:mod:`envfleet_gymnasium.layout`)."""
    value = Case.from_section(cfg).envs_per_process
    if value != AUTO:
        return int(value)
    return choose(cfg, int(cfg.num_envs), None).per_process


def default_in_process(cfg: Any, num_envs: int, chunk: int | None) -> bool:
    """Whether ``auto`` runs the section's envs in the caller's process (``train.in_process`` unset)."""
    if Case.from_section(cfg).envs_per_process != AUTO:
        return False
    return choose(cfg, num_envs, chunk).in_process


def horizon(cfg: Any) -> int:
    """Sub-steps per episode: ``train.max_episode_steps``, else ``train.gymnasium.max_episode_steps``, else the id's registered limit.

    :raises ConfigError: none of the three says one (envfleet's episodes need a bound).
    """
    if cfg.get("max_episode_steps") is not None:
        return int(cfg.max_episode_steps)
    case = Case.from_section(cfg)
    if case.max_episode_steps is not None:
        return case.max_episode_steps
    registered = probe(cfg).get("max_episode_steps")
    if registered is None:
        raise ConfigError(
            f"{case.name} registers no max_episode_steps and the config sets none: set train.max_episode_steps "
            "(or train.gymnasium.max_episode_steps, which also wraps the env in gymnasium's TimeLimit)"
        )
    return int(registered)


def action_dim(cfg: Any) -> int:
    """The size of one action row: the env's action space, flattened (a Discrete space: 1)."""
    case = Case.from_section(cfg)
    return action_layout(probe(cfg)["action"], case.rescale_actions).dim


def action_check(cfg: Any) -> Callable[[np.ndarray], None]:
    """The check of a stage's actions against the env's action space (a discrete space's whole numbers),
    which the manager runs before any shard gets them."""
    layout = action_layout(probe(cfg)["action"], Case.from_section(cfg).rescale_actions)

    def check(actions: np.ndarray) -> None:
        if layout.kind != "Box":
            layout.convert(actions)

    return check


def render_last(case: Case, layout: Layout) -> str:
    """What ``render: last`` saves for this env, in one sentence (the doctor and the fingerprint say it)."""
    in_obs = [e.key for e in layout.images_in_obs()]
    if layout.renders and not in_obs:
        return "render() is called at the read sub-step only (render: last skips the others)"
    if in_obs and layout.renders:
        return (
            f"render() at the read sub-step only; images in the observation ({', '.join(in_obs)}) are rendered by the env at every sub-step"
        )
    if in_obs:
        return f"nothing to skip: the images ({', '.join(in_obs)}) are in the observation, rendered by the env at every sub-step"
    return "no images"


def protocol_parts(cfg: Any) -> dict[str, Any]:
    """What decides this backend's results, for the protocol fingerprint: the env as made, its package,
    the fixed initial states, the keys carried and where the images come from."""
    case = Case.from_section(cfg)
    answer = probe(cfg)
    layout = layout_of(case, answer)
    seeds = np.asarray(case.seeds, dtype=np.int64)
    return {
        "id": case.id,
        "kwargs": {str(k): v for k, v in sorted(case.kwargs.items())},
        "max_episode_steps": case.max_episode_steps,
        "env_packages": dict(answer.get("env_packages") or {}),
        "gymnasium": (answer.get("versions") or {}).get("gymnasium"),
        "seeds": {"count": int(seeds.size), "sha256": hashlib.sha256(seeds.tobytes()).hexdigest()[:16]},
        "success_key": case.success_key,
        "rescale_actions": case.rescale_actions,
        "keys": {e.key: "render()" if e.source == "render" else ".".join(e.path) or "observation" for e in layout.entries},
        "render_last": render_last(case, layout),
    }


def doctor_findings(cfg: Any) -> list[tuple[str, str, str]]:
    """What ``envfleet doctor --config`` says of the section's env: ``(status, what, fix)`` lines."""
    try:
        case = Case.from_section(cfg)
        answer = probe(cfg)
        layout = layout_of(case, answer)
        action = action_layout(answer["action"], case.rescale_actions)
        steps = horizon(cfg)
    except ConfigError as exc:
        return [("FAIL", f"gymnasium env: {exc}", "fix the config key it names (docs/backends/gymnasium.md)")]
    packages = ", ".join(f"{k} {v}" for k, v in sorted((answer.get("env_packages") or {}).items())) or "no package found"
    keys = ", ".join(f"{e.key} {e.spec.dtype}{list(e.spec.shape)}" for e in layout.entries)
    found = [
        (
            "ok",
            f"gymnasium env {case.id} ({answer.get('env_class')}; {packages}; gymnasium {answer['versions'].get('gymnasium')}) "
            f"builds under {answer.get('python')} (Python {answer.get('python_version')}); probed in {answer.get('seconds')} s",
            "",
        ),
        (
            "ok",
            f"gymnasium env {case.name}: observation keys {keys}; actions {action.kind} of size {action.dim}; "
            f"{len(case.seeds)} fixed initial states; episodes of {steps} sub-steps",
            "",
        ),
    ]
    found.append(layout_finding(cfg, case, answer))
    status = "ok" if layout.renders or not layout.images_in_obs() else "warn"
    fix = "" if status == "ok" else "nothing to do if the env has no render() of its own; otherwise use train.gymnasium.render: rgb_array"
    found.append((status, f"gymnasium env {case.name}: render last: {render_last(case, layout)}", fix))
    if not answer.get("deterministic_reset", True):
        how = "the env registers itself as nondeterministic" if answer.get("nondeterministic") else "the env says nothing of it"
        found.append(
            (
                "warn",
                f"gymnasium env {case.name}: two resets with the same seed gave different non-image observations ({how}): "
                "a state id does not fix the start exactly",
                "check that the env seeds every random draw of its reset from reset(seed=...)",
            )
        )
    return found


def layout_finding(cfg: Any, case: Case, answer: dict[str, Any]) -> tuple[str, str, str]:
    """What ``envfleet doctor --config`` says of where the section's envs run (``envs_per_process``, ``in_process``)."""
    asked = cfg.get("in_process")
    where = f"gymnasium env {case.name}: layout"
    if asked is not None:
        return ("ok", f"{where}: train.in_process is {str(bool(asked)).lower()}", "")
    if case.envs_per_process != AUTO:
        return ("ok", f"{where}: {case.envs_per_process} envs per shard process (train.gymnasium.envs_per_process)", "")
    choice = choose(cfg, int(cfg.num_envs), None)
    if answer.get("step_s") is None:
        fix = "nothing to do if that suits; otherwise set train.gymnasium.envs_per_process or train.in_process"
        return ("warn", f"{where}: envs_per_process auto: {choice.why}", fix)
    return ("ok", f"{where}: envs_per_process auto, for calls of one sub-step: {choice.why}", "")


@hookimpl
def envfleet_register_backends(registry: BackendRegistry) -> None:
    """Register the ``gymnasium`` backend."""
    registry.register(
        BackendSpec(
            name="gymnasium",
            env_factory="envfleet_gymnasium.env:GymnasiumEnv",
            observation_spec=observation_spec,
            config_schema=GymnasiumConfig,
            envs_per_process=envs_per_process,
            in_process=True,
            default_in_process=default_in_process,
            spaces=native_spaces,
            protocol_parts=protocol_parts,
            config_findings=doctor_findings,
            action_dim=None,
            action_dim_for=action_dim,
            action_check=action_check,
            max_episode_steps=horizon,
            # ignore_terminations: gymnasium leaves a step after `terminated` undefined; settle_steps and
            # action_transform: a gymnasium env has no no-op action and no gripper convention.
            implements={"auto_reset", "render", "flip_images"},
            api_version="2.0",
            check_config={"train": {"gymnasium": {"id": "CartPole-v1"}}},
            result_packages=("gymnasium",),
            renderer=None,
            package="envfleet-gymnasium",
            description="any gymnasium env by its id (train.gymnasium.id), in the worker's venv or one of its own",
        )
    )
