"""Configuration: OmegaConf structured schemas in verl's env-config layout.

One job: user input in, one validated config value out (the schemas and their checks).

A verl env yaml loads as it is (the ``env:`` level of a full verl trainer config is
unwrapped). A backend's own keys live in ``train.<backend>`` and are validated
against the dataclass the backend registers. Every unknown key, wrong type or bad
value is a :class:`~envfleet.errors.ConfigError` naming the dotted key, what was
expected and, for a misspelling, the closest valid key, before any process starts.

>>> cfg = load_config(data={"train": {"simulator_type": "toy"}}, overrides=["train.num_envs=2"])  # doctest: +SKIP
>>> cfg.train.num_envs  # doctest: +SKIP
2
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from copy import deepcopy
from dataclasses import dataclass, field
from typing import Any

from omegaconf import MISSING, DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from .errors import ConfigError
from .execution import ExecutionConfig, check_execution
from .named_protocols import protocol_layers
from .options import OPTIONAL_KEYS, ActionTransform, RenderMode
from .plugins import BackendSpec, get_backend, list_backends
from .plugins.api import check_optional_keys
from .recording.options import RecordConfig
from .render_device import check_render_device
from .schema import check_missing, merge_into, reject_unknown_keys

__all__ = [
    "InitParamsConfig",
    "VideoConfig",
    "RemoteConfig",
    "EnvConfig",
    "RolloutConfig",
    "ModelConfig",
    "ActorConfig",
    "EnvFleetConfig",
    "RenderMode",
    "ActionTransform",
    "OPTIONAL_KEYS",
    "load_config",
    "as_config",
    "is_loaded",
    "with_values",
    "parse_overrides",
]

#: The flag :func:`load_config` sets on what it returns. OmegaConf keeps a node's flags through pickling
#: (Ray), deep copies and child nodes, so a loaded config stays recognisable as one wherever it is
#: passed, and is not validated again.
_LOADED_FLAG = "envfleet_loaded"


@dataclass
class InitParamsConfig:
    """Camera set-up, as in verl's ``train.init_params``."""

    camera_depths: bool = False  # accepted for verl compatibility; depth is not produced
    camera_heights: int = 256  # image height in pixels
    camera_widths: int = 256  # image width in pixels
    # camera names; the first gives full_image, the second (if any) wrist_image
    camera_names: list[str] = field(default_factory=lambda: ["agentview", "robot0_eye_in_hand"])


@dataclass
class VideoConfig:
    """Video recording of a stage's envs, as in verl's ``train.video_cfg``."""

    save_video: bool = False  # record a tiled video of every stage's envs
    video_base_dir: str = "videos"  # videos go to {video_base_dir}/rank_{rank}/{subdir}/{n}.mp4
    fps: int = 10  # frames per second of the written files
    max_frames: int = 600  # frames kept in memory per stage until flush_video(); older ones are dropped
    # Observations drawn side by side in each env's tile: camera images (uint8 [H, W, 3]) of
    # the backend's spec. null: every one, in the spec's order (full_image first where it is).
    image_keys: list[str] | None = None


@dataclass
class RemoteConfig:
    """``train.remote`` (and ``val.remote``): a server started with ``envfleet serve`` (see docs/remote.md)."""

    address: str | None = None  # host:port of an `envfleet serve`; null: run the simulators here, in shard processes
    token_file: str | None = None  # a file holding the server's token (first line); null: no token (a loopback --insecure server)
    tls: bool = False  # connect with TLS (the server was started with --tls-cert/--tls-key)
    ca_file: str | None = None  # the CA (or self-signed certificate) to trust; null: the system's CAs. Implies tls
    timeout_s: float | None = None  # deadline of one call; null: the server's step deadline plus 30 s
    reconnect_s: float = 30.0  # how long a call keeps trying to reach a restarted server before it fails
    take: bool = False  # take the stage even from a holder whose lease runs (one known dead); its next call fails naming this client


@dataclass
class EnvConfig:
    """One env section (``train`` or ``val``). Keys verl has stay where verl has them."""

    simulator_type: str = MISSING  # a registered backend name (see `envfleet backends`)
    protocol: str | None = None  # a named evaluation protocol of the backend (see `envfleet protocols`): sets the keys it fixes
    protocol_overrides: list[str] = field(default_factory=list)  # keys set here on purpose over the protocol's values
    task_suite_name: str | None = None  # a LIBERO or LIBERO-PRO suite, e.g. libero_spatial, libero_goal_task
    task_name: str | None = None  # Isaac Lab: a registered gymnasium task id
    env_id: str | None = None  # verl's Isaac key; used as task_name when that is unset
    num_envs: int = 4  # envs per stage, per worker
    max_episode_steps: int | None = None  # null: the backend's (suite's) own horizon
    seed: int = 42  # base seed; each worker and stage derives its own
    reward_coef: float = 1.0  # reward given on success
    # The next six keys are honoured by the backends that declare them (BackendSpec.implements);
    # a value other than the default, for a backend that does not, is an error at load time
    # (for a plugin of plugin API 1 without implements: a deprecation warning, the key passed on).
    auto_reset: bool = False  # reset finished envs at the end of a chunk to the next state id
    ignore_terminations: bool = False  # keep stepping after success (termination still reported)
    render: RenderMode = RenderMode.last  # last: render only the last sub-step of a chunk; all: every sub-step
    device: str = "cpu"  # simulation device, for backends that have one (Isaac)
    # Where each shard renders: auto (its worker's GPU, spread over the node's GPUs when it has none), cpu,
    # a CUDA ordinal (3, cuda:3), an EGL device index (egl:3), or a list of them (see envfleet.render_device).
    render_device: Any = "auto"
    flip_images: bool = False  # rotate images 180 degrees, as VLA pipelines feed LIBERO (LIBERO's default: true)
    action_transform: ActionTransform = ActionTransform.none  # none, or openvla (gripper [0,1] -> [-1,1], sign, flip)
    settle_steps: int = 0  # no-op steps after a reset, before the first observation (LIBERO's default: 10)
    step_timeout_s: float = 120.0  # a shard that takes longer for one call is killed and rebuilt
    start_timeout_s: float = 300.0  # deadline for a shard to build its simulator
    reset_timeout_s: float | None = None  # deadline for a reset or state restore (may build a scene); null: the larger of the two above
    max_restarts: int = 3  # restarts of one shard allowed within restart_window_s
    restart_window_s: float = 600.0  # window over which restarts are counted
    # The Python the stage's shard processes run under: a venv with envfleet core, the backend and its
    # simulator (see `envfleet venv`); null: the worker's own interpreter.
    simulator_python: str | None = None
    # true: every env of the stage runs in the caller's own process, as gymnasium's SyncVectorEnv (a crash of the
    # simulator takes the caller down; no step deadline); false: shard processes; null: the backend's choice.
    in_process: bool | None = None
    remote: RemoteConfig = field(default_factory=RemoteConfig)  # a stage served by `envfleet serve` (docs/remote.md)
    init_params: InitParamsConfig = field(default_factory=InitParamsConfig)
    video_cfg: VideoConfig = field(default_factory=VideoConfig)
    record: RecordConfig = field(default_factory=RecordConfig)  # datasets of the finished episodes (docs/recording.md)
    execution: ExecutionConfig = field(default_factory=ExecutionConfig)  # which action runs at which sub-step (docs/concepts.md)
    # Accepted so that a verl env yaml loads; envfleet does not use them.
    only_eval: bool = False
    isaac_server_mode: bool = False
    server_mode_env_workers: int = 1
    num_isaac_servers: int = 1
    num_tasks: int | None = None
    group_size: int | None = None
    original_env_worker_count: int | None = None
    total_trajs: int | None = None
    profiler: Any = None


@dataclass
class RolloutConfig:
    """Pipelining."""

    pipeline_stage_num: int = 1  # stages per worker; stage s steps while the policy serves the others


@dataclass
class ModelConfig:
    """What the policy emits."""

    # sub-steps per chunk_step; null: any length, set by each call's actions (verl-vla's config has none)
    num_action_chunks: int | None = 8
    action_dim: int = 7  # size of one action; unset, the backend's own (BackendSpec.action_dim) when it declares one


@dataclass
class ActorConfig:
    """verl's ``actor`` section (only ``model`` is read)."""

    model: ModelConfig = field(default_factory=ModelConfig)


@dataclass
class EnvFleetConfig:
    """The whole config. ``val`` defaults to a copy of ``train``."""

    train: EnvConfig = field(default_factory=EnvConfig)
    val: EnvConfig | None = None
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    actor: ActorConfig = field(default_factory=ActorConfig)
    disagg_sim: Any = None  # verl key, accepted and unused


def parse_overrides(overrides: Sequence[str]) -> DictConfig:
    """Turn ``["a.b=1", "c=[1,2]"]`` into a DictConfig (values parsed as YAML, never as code)."""
    for item in overrides:
        if "=" not in item or item.startswith("="):
            raise ConfigError(f"override {item!r} is not of the form key=value (for example train.num_envs=2)")
    try:
        return OmegaConf.from_dotlist(list(overrides))
    except OmegaConfBaseException as exc:
        raise ConfigError(f"cannot parse overrides {list(overrides)}: {exc}") from None


def _check_values(section: DictConfig, prefix: str) -> None:
    positive = ("num_envs", "step_timeout_s", "start_timeout_s", "restart_window_s")
    for key in positive:
        if section[key] <= 0:
            raise ConfigError(f"config key '{prefix}{key}' must be > 0, got {section[key]!r}")
    for key in ("settle_steps", "max_restarts"):
        if section[key] < 0:
            raise ConfigError(f"config key '{prefix}{key}' must be >= 0, got {section[key]!r}")
    if section.reset_timeout_s is not None and section.reset_timeout_s <= 0:
        raise ConfigError(f"config key '{prefix}reset_timeout_s' must be > 0 or null, got {section.reset_timeout_s!r}")
    if section.max_episode_steps is not None and section.max_episode_steps <= 0:
        raise ConfigError(f"config key '{prefix}max_episode_steps' must be > 0 or null, got {section.max_episode_steps!r}")
    check_render_device(section.render_device, f"{prefix}render_device")
    ip = section.init_params
    if ip.camera_heights <= 0 or ip.camera_widths <= 0:
        raise ConfigError(
            f"config keys '{prefix}init_params.camera_heights/widths' must be > 0, got {ip.camera_heights}x{ip.camera_widths}"
        )


def _load_section(name: str, user: Any, lookup: Callable[[str], BackendSpec], known_backends: Sequence[str]) -> dict[str, Any]:
    prefix = f"{name}."
    if not isinstance(user, (Mapping, DictConfig)):
        raise ConfigError(f"config section '{name}' must be a mapping, got {type(user).__name__}")
    user = OmegaConf.to_container(user if isinstance(user, DictConfig) else OmegaConf.create(dict(user)), resolve=False)
    assert isinstance(user, dict)
    simulator = user.get("simulator_type")
    if simulator is None or simulator == MISSING or simulator == "???":
        raise ConfigError(f"config key '{prefix}simulator_type' is required: name a backend (see `envfleet backends`)")
    if not isinstance(simulator, str):
        raise ConfigError(f"config key '{prefix}simulator_type' must be a string, got {simulator!r}")
    spec = lookup(simulator)  # raises UnknownBackendError listing what is installed
    backend_section = user.pop(simulator, None)
    for other in known_backends:
        if other != simulator and other in user:
            raise ConfigError(
                f"config section '{prefix}{other}' is for backend {other!r}, but {prefix}simulator_type is {simulator!r}; "
                f"rename it to '{prefix}{simulator}' or remove it"
            )
    named, named_backend = protocol_layers(prefix, user, backend_section, spec)
    defaults = dict(spec.defaults or {})
    core = merge_into(EnvConfig, prefix, defaults, named, user)
    check_missing(core, prefix)
    _check_values(core, prefix)
    check_optional_keys(core, prefix, spec)  # an error, or for a plugin of API 1 a warning
    out = OmegaConf.to_container(core, resolve=False)
    assert isinstance(out, dict)
    schema = spec.config_schema
    if schema is not None:
        section = merge_into(schema, f"{prefix}{simulator}.", named_backend, backend_section or {})
        check_missing(section, f"{prefix}{simulator}.")
        out[simulator] = OmegaConf.to_container(section, resolve=False)
    elif backend_section:
        raise ConfigError(f"config section '{prefix}{simulator}' given, but backend {simulator!r} has no options of its own")
    else:
        out[simulator] = {}
    # The backend's observation spec is computed from the config without the simulator;
    # computing it here lets the backend reject its own bad values before any process starts.
    try:
        spec.checked_observation_spec(OmegaConf.create(out), int(out["num_envs"]))
    except ConfigError as exc:
        raise ConfigError(str(exc).replace("'train.", f"'{prefix}") if prefix != "train." else str(exc)) from None
    except Exception as exc:
        raise ConfigError(f"backend {simulator!r} rejects section '{name}': {type(exc).__name__}: {exc}") from None
    return {str(k): v for k, v in out.items()}


def load_config(
    path: str | os.PathLike[str] | None = None,
    overrides: Sequence[str] = (),
    *,
    data: Mapping[str, Any] | DictConfig | None = None,
    backend_lookup: Callable[[str], BackendSpec] | None = None,
) -> DictConfig:
    """Load, merge and validate a config.

    :param path: a YAML file in verl's env layout (``train:``, ``val:``, ``rollout:``, ``actor:``),
        or a whole verl trainer config with those under ``env:``.
    :param overrides: ``key=value`` strings applied last (``train.num_envs=2``).
    :param data: a dict used as the base instead of (or before) ``path``.
    :param backend_lookup: name -> BackendSpec; defaults to the plugin registry.
    :returns: a read-only DictConfig; ``cfg.train[cfg.train.simulator_type]`` holds the backend's section.
    :raises ConfigError: naming the key, what was expected and, for a typo, the closest key.
    """
    lookup = backend_lookup or get_backend
    known = list(list_backends()) if backend_lookup is None else []
    user = _read_user_config(path, overrides, data)
    others = _load_other_sections(user)  # first: a misspelt top-level key ("trian") is named as such
    result = {**_load_env_sections(user, lookup, known), **others}
    _check_model(result, user, lookup)
    cfg = OmegaConf.create(result)
    cfg._set_flag(_LOADED_FLAG, True)
    OmegaConf.set_readonly(cfg, True)
    OmegaConf.set_struct(cfg, True)
    return cfg


def is_loaded(config: Any) -> bool:
    """Whether ``config`` is what :func:`load_config` returned (or a section of it): validated, passed on as it is."""
    return isinstance(config, DictConfig) and bool(config._get_flag(_LOADED_FLAG))


def as_config(config: Any, overrides: Sequence[str] = ()) -> DictConfig:
    """A loaded config from whatever a caller passes: a loaded config as it is, anything else through :func:`load_config`.

    The one door of every layer that takes a config (the worker, the group, the faces): a config loaded
    once at the edge is passed on, across Ray too, and never loaded or checked again. A YAML path, a
    dict or a DictConfig of the user's is user input, loaded here.

    :param overrides: ``key=value`` strings; given, even a loaded config is loaded again with them on top.
    :raises ConfigError: ``config`` is none of those, or does not validate.
    """
    overrides = list(overrides)
    if is_loaded(config) and not overrides:
        return config  # type: ignore[no-any-return]
    if isinstance(config, (str, os.PathLike)):
        return load_config(config, overrides)
    if isinstance(config, (Mapping, DictConfig)):
        return load_config(None, overrides, data=config)
    raise ConfigError(
        f"config must be a YAML path, a dict or a DictConfig (anything envfleet.load_config accepts), got {type(config).__name__}"
    )


def with_values(config: DictConfig, values: Mapping[str, Any]) -> DictConfig:
    """A copy of loaded ``config`` with the dotted keys of ``values`` replaced, still loaded and read-only.

    For values a caller derives from validated ones (``envfleet rollout`` puts a relative video
    directory under ``--out``): each key must exist and keep its type, so nothing is checked again.

    :raises ConfigError: ``config`` is not loaded, a key does not exist, or a value changes a key's type.
    """
    if not is_loaded(config):
        raise ConfigError("with_values() takes a config from envfleet.load_config; load it first")
    copy = deepcopy(config)
    OmegaConf.set_readonly(copy, False)
    for key, value in values.items():
        old = OmegaConf.select(copy, key, default=MISSING)
        if old is MISSING or old == MISSING:
            raise ConfigError(f"config key {key!r} does not exist, so it cannot be replaced")
        if old is not None and type(old) is not type(value):
            raise ConfigError(f"config key {key!r} is a {type(old).__name__}, got {type(value).__name__} {value!r}")
        OmegaConf.update(copy, key, value, merge=False)
    OmegaConf.set_readonly(copy, True)
    return copy


def _read_user_config(
    path: str | os.PathLike[str] | None, overrides: Sequence[str], data: Mapping[str, Any] | DictConfig | None
) -> DictConfig:
    """``data``, then the file at ``path``, then ``overrides``, merged (a whole verl trainer config unwrapped)."""
    layers: list[Any] = []
    if isinstance(data, DictConfig):  # its values, not its flags (read-only, loaded)
        layers.append(OmegaConf.create(OmegaConf.to_container(data, resolve=False)))
    elif data is not None:
        layers.append(OmegaConf.create(dict(data)))
    if path is not None:
        layers.append(_read_yaml(path))
    layers.append(parse_overrides(overrides))
    for i, layer in enumerate(layers):
        if "env" in layer and "train" not in layer:  # a whole verl trainer config
            layers[i] = layer.env
    try:
        user = OmegaConf.merge(*layers) if layers else OmegaConf.create({})
    except OmegaConfBaseException as exc:
        raise ConfigError(f"cannot merge config: {exc}") from None
    assert isinstance(user, DictConfig)
    return user


def _read_yaml(path: str | os.PathLike[str]) -> DictConfig:
    if not os.path.isfile(path):
        raise ConfigError(f"config file not found: {os.fspath(path)!r} (expected a YAML file in verl's env layout)")
    try:
        loaded = OmegaConf.load(os.fspath(path))
    except Exception as exc:
        raise ConfigError(f"config file {os.fspath(path)!r} is not valid YAML: {exc}") from None
    if not isinstance(loaded, DictConfig):
        raise ConfigError(f"config file {os.fspath(path)!r} must hold a mapping at the top level")
    return loaded


def _load_env_sections(user: DictConfig, lookup: Callable[[str], BackendSpec], known: Sequence[str]) -> dict[str, Any]:
    """``train`` and ``val`` (a copy of ``train``, with what ``val`` sets on top), each checked against its backend."""
    if "train" not in user:
        raise ConfigError("config section 'train' is required (at least train.simulator_type)")
    result: dict[str, Any] = {"train": _load_section("train", user.train, lookup, known)}
    if user.get("val") is not None:
        val_user = OmegaConf.merge(OmegaConf.create({k: v for k, v in user.train.items()}), user.val)
        result["val"] = _load_section("val", val_user, lookup, known)
    else:
        result["val"] = result["train"]
    return result


def _load_other_sections(user: DictConfig) -> dict[str, Any]:
    """``rollout``, ``actor`` and ``disagg_sim``, checked against :class:`EnvFleetConfig`."""
    top = {k: v for k, v in user.items() if k not in ("train", "val")}
    reject_unknown_keys(top, EnvFleetConfig, "")
    rest = OmegaConf.to_container(merge_into(EnvFleetConfig, "", top), resolve=False)
    assert isinstance(rest, dict)
    return {key: rest[key] for key in ("rollout", "actor", "disagg_sim")}


def _check_model(result: dict[str, Any], user: DictConfig, lookup: Callable[[str], BackendSpec]) -> None:
    """``rollout.pipeline_stage_num``, and ``actor.model``: the backend's action size unless the user
    gives one, and every section's backend agreeing with it."""
    if result["rollout"]["pipeline_stage_num"] < 1:
        raise ConfigError(f"config key 'rollout.pipeline_stage_num' must be >= 1, got {result['rollout']['pipeline_stage_num']}")
    model = result["actor"]["model"]
    dims = {
        section: lookup(result[section]["simulator_type"]).section_action_dim(OmegaConf.create(result[section]))
        for section in ("train", "val")
    }
    if OmegaConf.select(user, "actor.model.action_dim") is None and dims["train"] is not None:
        model["action_dim"] = int(dims["train"])
    if (model["num_action_chunks"] is not None and model["num_action_chunks"] < 1) or model["action_dim"] < 1:
        raise ConfigError(f"config keys 'actor.model.num_action_chunks' and 'actor.model.action_dim' must be >= 1, got {model}")
    for section in ("train", "val"):
        spec = lookup(result[section]["simulator_type"])
        execution = OmegaConf.create(result[section]["execution"])
        check_execution(execution, f"{section}.", model["num_action_chunks"], spec.control_fps, spec.name, result[section]["auto_reset"])
        if result[section].get("in_process"):  # refused here, before any process starts, when it cannot be
            spec.runs_in_process(OmegaConf.create(result[section]), section)
        dim = dims[section]
        if dim is not None and dim != model["action_dim"]:
            raise ConfigError(
                f"config key 'actor.model.action_dim' is {model['action_dim']}, but backend {spec.name!r} takes actions of size {dim}"
                + ("" if spec.action_dim is not None else f" under section '{section}'")
            )
