"""The toy backend's plugin module: its config schema, observation spec and registration.

This module is what the ``envfleet`` entry point names. It imports nothing heavy:
the env class is named as a ``"module:attr"`` string and imported only in the
shard process that builds it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from envfleet.env import ArraySpec, ObservationSpec
from envfleet.errors import ConfigError
from envfleet.plugins import BackendRegistry, BackendSpec, hookimpl

__all__ = ["DEFAULT_MAX_EPISODE_STEPS", "DEPTH_DTYPES", "ToyConfig", "observation_spec", "envfleet_register_backends"]

#: An episode's length in sub-steps when ``max_episode_steps`` is unset.
DEFAULT_MAX_EPISODE_STEPS = 50

#: What ``train.toy.depth`` takes: "" (no depth observation) or the dtype of ``depth``.
DEPTH_DTYPES = ("", "uint8", "float32")


@dataclass
class ToyConfig:
    """Options of the toy backend, under ``train.toy``."""

    num_tasks: int = 3  # distinct goals (colours); task t has states_per_task fixed initial states
    states_per_task: int = 10  # fixed initial states per task
    step_cost_s: float = 0.0  # busy-wait per env per sub-step, to stand in for a slow simulator
    step_sleep_s: float = 0.0  # sleep once per chunk_step, to stand in for a simulator that waits on a device (no CPU used)
    # Per-env costs that differ from env to env and chunk to chunk (no CPU used, results unchanged):
    # each env still in its episode sleeps env_sleep_s per chunk times a draw from a Pareto
    # distribution of shape step_cost_tail (>= 1, heavy-tailed; 0: no draw, a factor of 1), seeded by
    # (seed, rank, stage, env, the env's chunk count); each env reset sleeps reset_sleep_s.
    env_sleep_s: float = 0.0
    step_cost_tail: float = 0.0
    reset_sleep_s: float = 0.0
    envs_per_process: int = 1  # envs that share one shard process
    raise_on_step: int = -1  # test hook: raise inside the N-th chunk_step (0-based); -1 never
    raise_in_constructor: bool = False  # test hook: raise while building the env
    build_sleep_s: float = 0.0  # test hook: sleep while building, as a simulator whose start waits on a device (no CPU used)
    exit_on_step: int = -1  # test hook: the process exits (code 7, as a crashing simulator) inside the N-th chunk_step; -1 never
    # Test hook: plant a bug the conformance suite must catch: "black_images", "own_spec_differs"
    # (Env.observation_spec() disagrees with the registered one) or "render_last_differs".
    planted_bug: str = ""
    frozen: bool = False  # chunk_step simulates nothing and returns the reset's observations again: a zero-cost env (benchmarks)
    # An extra observation `depth` [H, W]: each pixel's distance to the point; "float32" in
    # world units, "uint8" scaled to 0..255; "" (default) none. A key outside verl's three.
    depth: str = ""
    side_camera: bool = False  # an extra camera `side_image` uint8 [H, W, 3]: the scene from farther away


def observation_spec(cfg: Any, num_envs: int) -> ObservationSpec:
    """``full_image`` (and ``wrist_image`` with two camera names), an 8-dim ``state``, and
    ``side_image`` / ``depth`` when ``train.toy.side_camera`` / ``train.toy.depth`` ask for them."""
    h, w = int(cfg.init_params.camera_heights), int(cfg.init_params.camera_widths)
    spec = {"full_image": ArraySpec((h, w, 3), "uint8")}
    if len(cfg.init_params.camera_names) >= 2:
        spec["wrist_image"] = ArraySpec((h, w, 3), "uint8")
    spec["state"] = ArraySpec((8,), "float32")
    if cfg.toy.side_camera:
        spec["side_image"] = ArraySpec((h, w, 3), "uint8")
    depth = str(cfg.toy.depth)
    if depth not in DEPTH_DTYPES:
        raise ConfigError(f"train.toy.depth is {depth!r}: expected one of {list(DEPTH_DTYPES)} ('' for no depth observation)")
    if depth:
        spec["depth"] = ArraySpec((h, w), depth)
    return spec


@hookimpl
def envfleet_register_backends(registry: BackendRegistry) -> None:
    """Register the ``toy`` backend."""
    registry.register(
        BackendSpec(
            name="toy",
            env_factory="envfleet_toy.env:ToyEnv",
            observation_spec=observation_spec,
            config_schema=ToyConfig,
            defaults={
                "init_params": {"camera_heights": 64, "camera_widths": 64, "camera_names": ["table", "wrist"]},
            },
            envs_per_process=lambda cfg: int(cfg.toy.envs_per_process),
            action_dim=7,
            max_episode_steps=lambda cfg: DEFAULT_MAX_EPISODE_STEPS,
            implements={"auto_reset", "ignore_terminations", "render"},
            api_version="2.0",  # the envfleet plugin API it is written for
            control_fps=10,  # a sub-step stands for 0.1 s
            substep_observations=True,
            package="envfleet-toy",
            description="2-D point mass reaching a coloured goal; pure numpy, deterministic",
        )
    )
