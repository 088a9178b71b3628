"""``train.gymnasium``, read and checked: the :class:`Case` a config names (light: no gymnasium import).

>>> case = Case.from_section({"gymnasium": {"id": "CartPole-v1", "seeds": 3}})
>>> case.seeds, case.module, case.render
((0, 1, 2), None, False)
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from envfleet.errors import ConfigError
from envfleet.plugins import backend_section

__all__ = ["AUTO", "per_process_value", "DEFAULT_SEEDS", "GL_PLATFORMS", "GymnasiumConfig", "Case"]

#: How many fixed initial states a config without ``seeds`` has: seeds 0..99.
DEFAULT_SEEDS = 100
#: What ``train.gymnasium.mujoco_gl`` takes.
GL_PLATFORMS = ("egl", "osmesa", "glfw")
#: ``train.gymnasium.envs_per_process``'s default: the layout the probe's step time says is cheaper (:mod:`envfleet_gymnasium.layout`).
AUTO = "auto"
#: ``gymnasium.make`` keywords that have keys of their own here.
_OWN_KEYWORDS = {"render_mode": "train.gymnasium.render: rgb_array", "max_episode_steps": "train.gymnasium.max_episode_steps"}


@dataclass
class GymnasiumConfig:
    """Options of the gymnasium backend, under ``train.gymnasium`` (docs/backends/gymnasium.md)."""

    id: str | None = None  # a registered gymnasium id; 'module:Id' imports module first, as gymnasium.make does
    kwargs: dict[str, Any] = field(default_factory=dict)  # keyword arguments of gymnasium.make (the env's own)
    max_episode_steps: int | None = None  # gymnasium.make's TimeLimit; null: the id's registered limit
    # The fixed initial states: state id k is reset(seed=seeds[k]). A list of distinct seeds >= 0,
    # or a count N for seeds 0..N-1; null: 0..99.
    seeds: Any = None
    # Which observation entries are images (uint8 [H, W, C]): a list of entries, or a mapping key -> entry
    # that renames them; null: every uint8 Box of shape [H, W, 3]. A Dict's entries are named by path ('pixels.top').
    image_keys: Any = None
    state_keys: Any = None  # the other entries carried, alike; null: every entry that is not an image key
    render: str | None = None  # rgb_array: the env is made with render_mode=rgb_array and render() gives full_image
    success_key: str = "is_success"  # the info key that says an episode succeeded
    rescale_actions: bool = False  # map actions in [-1, 1] onto a Box action space's bounds (gymnasium's RescaleAction)
    task_description: str | None = None  # the instruction every episode carries; null: the id
    # envs that share one shard process (gymnasium's AsyncVectorEnv: 1); auto: in the caller's process or one
    # shard process per core, whichever the probe's step time says is cheaper (envfleet_gymnasium.layout)
    envs_per_process: Any = "auto"
    mujoco_gl: str | None = "egl"  # MUJOCO_GL where it is unset (gymnasium's MuJoCo envs, dm_control): egl, osmesa, glfw; null: leave it


def per_process_value(value: Any) -> int | str:
    """``train.gymnasium.envs_per_process`` checked: ``"auto"`` or an integer >= 1.

    :raises ConfigError: anything else.
    """
    if value is None or value == AUTO:
        return AUTO
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"config key 'train.gymnasium.envs_per_process' must be 'auto' or an integer >= 1, got {value!r}")
    return int(value)


def _plain(value: Any) -> Any:
    """``value`` (an OmegaConf node or plain data) as plain Python data."""
    try:
        from omegaconf import DictConfig, ListConfig, OmegaConf

        if isinstance(value, (DictConfig, ListConfig)):
            return OmegaConf.to_container(value, resolve=True)
    except ImportError:  # pragma: no cover - omegaconf is a core dependency
        pass
    return value


def _seeds(value: Any) -> tuple[int, ...]:
    key = "config key 'train.gymnasium.seeds'"
    if value is None:
        return tuple(range(DEFAULT_SEEDS))
    if isinstance(value, bool):
        raise ConfigError(f"{key} must be a list of seeds or a count, got {value!r}")
    if isinstance(value, int):
        if value < 1:
            raise ConfigError(f"{key} is the count {value}: there must be at least one initial state")
        return tuple(range(value))
    if isinstance(value, str) or not isinstance(value, Sequence):
        raise ConfigError(f"{key} must be a list of seeds (integers >= 0) or a count, got {value!r}")
    seeds = list(value)
    if not seeds:
        raise ConfigError(f"{key} is an empty list: there must be at least one initial state")
    bad = [s for s in seeds if isinstance(s, bool) or not isinstance(s, int) or s < 0]
    if bad:
        raise ConfigError(f"{key} holds {bad[0]!r}: a seed of gymnasium's reset(seed=...) is an integer >= 0")
    twice = sorted({s for s in seeds if seeds.count(s) > 1})
    if twice:
        raise ConfigError(f"{key} lists seed {twice[0]} twice: two state ids would be one initial state")
    return tuple(int(s) for s in seeds)


@dataclass(frozen=True)
class Case:
    """One gymnasium env as a config names it: what makes it, and what envfleet carries of it."""

    id: str
    kwargs: Mapping[str, Any]
    max_episode_steps: int | None
    seeds: tuple[int, ...]
    render: bool
    image_keys: Any
    state_keys: Any
    success_key: str
    rescale_actions: bool
    task_description: str | None
    envs_per_process: int | str
    mujoco_gl: str | None

    @property
    def module(self) -> str | None:
        """The module of a ``module:Id`` id, imported before ``gymnasium.make``."""
        module, sep, _ = self.id.partition(":")
        return module if sep else None

    @property
    def name(self) -> str:
        """The id without its module part (what gymnasium registered)."""
        return self.id.partition(":")[2] if ":" in self.id else self.id

    @property
    def description(self) -> str:
        """Every episode's task description."""
        return self.task_description or self.name

    @classmethod
    def from_section(cls, cfg: Any) -> Case:
        """The case of env section ``cfg`` (its ``gymnasium`` section), checked.

        :raises ConfigError: naming the key and what it takes.
        """
        section = backend_section(cfg, "gymnasium")
        get = section.get
        env_id = get("id")
        if not env_id or not isinstance(env_id, str):
            raise ConfigError(
                "config key 'train.gymnasium.id' is required for simulator_type gymnasium: a registered gymnasium id "
                "(CartPole-v1), or 'module:Id' to import the module that registers it first (gym_pusht:gym_pusht/PushT-v0)"
            )
        kwargs = _plain(get("kwargs")) or {}
        if not isinstance(kwargs, Mapping):
            raise ConfigError(
                f"config key 'train.gymnasium.kwargs' must be a mapping of gymnasium.make's keyword arguments, got {kwargs!r}"
            )
        for word, instead in _OWN_KEYWORDS.items():
            if word in kwargs:
                raise ConfigError(f"config key 'train.gymnasium.kwargs.{word}': set {instead} instead")
        steps = get("max_episode_steps")
        if steps is not None and int(steps) < 1:
            raise ConfigError(f"config key 'train.gymnasium.max_episode_steps' must be >= 1 or null, got {steps}")
        render = get("render")
        if render not in (None, "rgb_array"):
            raise ConfigError(
                f"config key 'train.gymnasium.render' must be 'rgb_array' (images from env.render()) or null (images only "
                f"from the observation), got {render!r}"
            )
        per_process = per_process_value(get("envs_per_process", "auto"))
        gl = get("mujoco_gl", "egl")
        if gl is not None and gl not in GL_PLATFORMS:
            raise ConfigError(f"config key 'train.gymnasium.mujoco_gl' must be one of {list(GL_PLATFORMS)} or null, got {gl!r}")
        return cls(
            id=env_id,
            kwargs=dict(kwargs),
            max_episode_steps=None if steps is None else int(steps),
            seeds=_seeds(_plain(get("seeds"))),
            render=render == "rgb_array",
            image_keys=_plain(get("image_keys")),
            state_keys=_plain(get("state_keys")),
            success_key=str(get("success_key", "is_success")),
            rescale_actions=bool(get("rescale_actions", False)),
            task_description=get("task_description"),
            envs_per_process=per_process,
            mujoco_gl=gl,
        )

    def make_request(self) -> dict[str, Any]:
        """What builds the env (the spec probe's question): id, kwargs, time limit, render mode, a first seed."""
        return {
            "id": self.id,
            "kwargs": dict(self.kwargs),
            "max_episode_steps": self.max_episode_steps,
            "render": self.render,
            "seed": self.seeds[0],
        }

    def make_key(self) -> str:
        """:meth:`make_request` as canonical text (without the seed), for cache keys."""
        request = {k: v for k, v in self.make_request().items() if k != "seed"}
        return json.dumps(request, sort_keys=True, default=repr)
