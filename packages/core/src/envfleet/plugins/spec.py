"""What a backend declares: :class:`BackendSpec`, the one object a plugin hands to the registry.

Where it is registered and how plugins are loaded is :mod:`envfleet.plugins.registry`'s job.
A backend names its env class as ``"module:attr"``; :func:`import_factory` is the one place
such a name is read.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import json
import re
from collections.abc import Callable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from typing import Any

from ..env import ArraySpec, ObservationSpec
from ..errors import ConfigError, PluginContractError
from ..options import OPTIONAL_KEYS
from .api import check_api_version

# Imports inside functions: omegaconf loads only when a config section is keyed: a plugin module imports this
# one when backends are listed.

__all__ = ["BackendSpec", "backend_section", "split_factory", "import_factory"]


#: Observation specs already computed in this process, by (backend, env section, num_envs): a config is
#: checked once where it is loaded, and a manager built from it in the same process reuses that result.
_SPECS: dict[tuple[str, str, int], ObservationSpec] = {}
_SPECS_MAX = 64


def backend_section(cfg: Any, name: str, default: Any = None) -> Any:
    """The backend's own section ``cfg.<name>`` of env section ``cfg``: the one way a backend reads it.

    :param default: what to return when the section is absent (an empty dict when ``None``).

    >>> backend_section({"toy": {"step_cost_s": 0.1}}, "toy")["step_cost_s"]
    0.1
    >>> backend_section({}, "toy")
    {}
    """
    get = getattr(cfg, "get", None)
    section = get(name) if callable(get) else None
    if section is not None:
        return section
    return {} if default is None else default


def _content_key(cfg: Any) -> str:
    """``cfg`` (an env section) as canonical text, for a cache key."""
    from omegaconf import DictConfig, OmegaConf

    data = OmegaConf.to_container(cfg, resolve=True) if isinstance(cfg, DictConfig) else cfg
    return json.dumps(data, sort_keys=True, default=repr)


_DOTTED = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")


def split_factory(path: str) -> tuple[str, str]:
    """``"package.module:attr"`` -> ``("package.module", "attr")``; ``attr`` may be dotted (``Class.method``).

    :raises ValueError: ``path`` is not of that form.
    """
    module, sep, attr = str(path).partition(":")
    if not sep or not _DOTTED.match(module) or not _DOTTED.match(attr):
        raise ValueError(f"{path!r} does not name an object: expected 'package.module:attr', e.g. 'envfleet_toy.env:ToyEnv'")
    return module, attr


def import_factory(path: str) -> Any:
    """The object ``"module:attr"`` names, importing its module (for a backend: the simulator's import).

    :raises ValueError: ``path`` is not of that form.
    :raises ImportError: the module does not import.
    :raises AttributeError: naming the attribute the module lacks.
    """
    module_name, attr = split_factory(path)
    obj: Any = importlib.import_module(module_name)
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise AttributeError(f"{path!r}: module {module_name!r} has no attribute {attr!r}")
        obj = getattr(obj, part)
    return obj


@dataclass(frozen=True)
class BackendSpec:
    """How envfleet builds and runs a backend.

    :param name: the value of ``train.simulator_type`` that selects it.
    :param env_factory: ``"module:attr"`` of a callable ``(cfg, ctx: EnvContext) -> Env``
        (typically the Env class), imported only in the shard process. ``cfg`` is the env
        section (``train`` or ``val``) with the backend's own section at ``cfg[name]``.
    :param observation_spec: ``(cfg, num_envs) -> ObservationSpec``; called in the
        parent to allocate shared memory, so it must not need the simulator.
    :param config_schema: a dataclass for the ``train.<name>`` section, or ``None``.
    :param defaults: values for the core env keys that this backend prefers
        (applied under the user's config), e.g. ``{"init_params": {"camera_heights": 64}}``.
    :param envs_per_process: envs per shard process: an int, ``None`` for all of a
        stage's envs in one process, or ``(cfg) -> int | None``.
    :param in_process: whether the backend's envs can run in the caller's own process
        (``train.in_process``), as gymnasium's ``SyncVectorEnv`` runs its envs: no GL context, no
        process-wide state of the simulator's own. ``False``: a process of its own per shard, always.
    :param default_in_process: ``(cfg, num_envs, chunk) -> bool``: where ``train.in_process`` is unset,
        whether ``num_envs`` envs of env section ``cfg``, stepped ``chunk`` sub-steps a call (``None``: any),
        run in the caller's process (the gymnasium backend's
        ``envs_per_process: auto``, for an env whose step costs less than a process's round trip).
        ``None``: in processes.
    :param spaces: ``(cfg) -> {"observation": space, "action": space} | None``: the env's own
        gymnasium spaces under env section ``cfg``, as plain JSON descriptions
        (:mod:`envfleet.gym.spaces`), which the gymnasium, SB3 and TorchRL faces present instead of
        their own Dict layout with ``step="action"``; ``None`` (or a ``None`` answer): the faces' layout.
    :param protocol_parts: ``(cfg) -> dict``: what of the backend's own section decides its
        results (e.g. which instruction a policy is shown), recorded in every result's protocol
        fingerprint under the backend's name. ``None``: nothing of it does.
    :param protocols: ``() -> {name: protocol}``: the named evaluation protocols the backend ships,
        selected with ``train.protocol`` (format: :mod:`envfleet.named_protocols`). ``None``: none.
    :param task_groups: ``(cfg) -> {task id: group}``: a grouping of the tasks under env section ``cfg``
        that results are also reported by (LIBERO-plus: each task's perturbation dimension), with a
        success rate per group beside the whole. ``None``: none.
    :param action_dim: the action size the backend expects, when fixed (also the default of
        ``actor.model.action_dim``).
    :param action_dim_for: ``(cfg) -> int | None``: the action size under env section ``cfg``, for a
        backend whose size depends on its section and is known before any shard starts (the
        gymnasium backend reads it from the env's action space); used where :attr:`action_dim`
        is ``None``, as the default of ``actor.model.action_dim`` and to check a size given there.
    :param action_check: ``(cfg) -> check``, where ``check(actions)`` raises
        :class:`~envfleet.errors.InvalidInputError` for actions ``[n, chunk, action_dim]`` the backend's
        envs cannot take beyond what core checks (shape, dtype, finiteness): the manager calls it on
        the whole stage's actions before any shard gets them, so a chunk with one bad action steps no
        env (the gymnasium backend: a discrete action space's whole numbers). ``None``: core's checks only.
    :param max_episode_steps: ``(cfg) -> int | None``: the episode length in sub-steps the
        backend's env uses when the config's ``max_episode_steps`` is unset (LIBERO: the suite's
        horizon), for the callers that must know it before an env exists (LeRobot's eval loop);
        ``None``: not known in advance.
    :param implements: the optional core keys this backend honours, from
        :data:`envfleet.options.OPTIONAL_KEYS` (``auto_reset``, ``ignore_terminations``,
        ``render``, ``flip_images``, ``settle_steps``, ``action_transform``). A config that sets
        any other of them to a value that asks something of the backend is rejected at load.
    :param api_version: the envfleet plugin API the backend is written for, ``"MAJOR.MINOR"``
        (this envfleet's is :data:`envfleet.plugins.PLUGIN_API_VERSION`). ``None``: written before
        the field existed, run as ``1.0`` with a deprecation warning (docs: Plugin API versions).
    :param check_config: config sections (``{"train": {...}, "actor": {...}}``) that make the
        smallest config this backend runs with, for ``envfleet backends --check`` (e.g. a suite
        name the backend requires).
    :param result_packages: the distributions whose versions decide this backend's results
        (its simulator, renderer bindings, benchmark assets), recorded in every result's
        protocol fingerprint next to envfleet's and :attr:`package`'s.
    :param renderer: the GL stack its cameras render through, for ``envfleet doctor``: ``"mujoco"``
        (MuJoCo's offscreen renderer on EGL or OSMesa, chosen by ``MUJOCO_GL``), ``"vulkan"`` (SAPIEN's
        renderer: a Vulkan device, lavapipe on a CPU), or ``None`` when it
        needs no OpenGL (it renders without GL, or not at all).
    :param control_fps: the backend's control rate, sub-steps per second of simulated time (LIBERO:
        20); the fps of a dataset recorded per step (``train.record.frames: step``). ``None``: not known.
    :param substep_observations: its env writes every sub-step's observation for a section that
        records per step (:mod:`envfleet.substeps`); without it ``frames: step`` is refused.
    :param config_findings: ``(cfg) -> [(status, what, fix), ...]``: what ``envfleet doctor --config``
        says of env section ``cfg`` beyond the machine's checks (the gymnasium backend: the env the
        section names, and whether ``render: last`` has anything to skip); ``status`` is ``"ok"``,
        ``"warn"`` or ``"FAIL"``. ``None``: nothing.
    :param install_findings: ``() -> [(status, what, fix), ...]``: what plain ``envfleet doctor`` says of
        this install beyond the machine's checks, with no config (LIBERO: which of LIBERO-plus's
        dimensions its installed data and assets run); same shape as ``config_findings``. ``None``: nothing.
    :param package: the distribution that provides it (shown by ``envfleet backends``).
    :param description: one line for listings.
    """

    name: str
    env_factory: str
    observation_spec: Callable[[Any, int], ObservationSpec]
    config_schema: type | None = None
    defaults: dict[str, Any] = field(default_factory=dict)
    envs_per_process: int | Callable[[Any], int | None] | None = 1
    in_process: bool = False
    default_in_process: Callable[[Any, int, int | None], bool] | None = None
    spaces: Callable[[Any], Mapping[str, Any] | None] | None = None
    protocol_parts: Callable[[Any], Mapping[str, Any]] | None = None
    protocols: Callable[[], Mapping[str, Mapping[str, Any]]] | None = None
    task_groups: Callable[[Any], Mapping[int, str]] | None = None
    action_dim: int | None = None
    action_dim_for: Callable[[Any], int | None] | None = None
    action_check: Callable[[Any], Callable[[Any], None]] | None = None
    max_episode_steps: Callable[[Any], int | None] | None = None
    implements: AbstractSet[str] = frozenset()
    api_version: str | None = None
    check_config: dict[str, Any] = field(default_factory=dict)
    result_packages: tuple[str, ...] = ()
    renderer: str | None = None
    control_fps: float | None = None
    substep_observations: bool = False
    config_findings: Callable[[Any], Sequence[tuple[str, str, str]]] | None = None
    install_findings: Callable[[], Sequence[tuple[str, str, str]]] | None = None
    package: str = ""
    description: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.env_factory, str):
            raise TypeError(f"backend {self.name!r}: env_factory must be a 'module:attr' string, got {type(self.env_factory).__name__}")
        split_factory(self.env_factory)
        object.__setattr__(self, "implements", frozenset(self.implements))
        unknown = sorted(self.implements - set(OPTIONAL_KEYS))
        if unknown:
            raise PluginContractError(
                f"backend {self.name!r} (package {self.package or 'unknown'}): BackendSpec.implements {unknown}, which are not "
                f"optional keys; its author declares only keys from {list(OPTIONAL_KEYS)}"
            )
        check_api_version(self)

    def shard_size(self, cfg: Any, num_envs: int) -> int:
        """How many of ``num_envs`` envs share one process."""
        value = self.envs_per_process(cfg) if callable(self.envs_per_process) else self.envs_per_process
        if value is None:
            return max(num_envs, 1)
        if int(value) < 1:
            raise ValueError(f"backend {self.name!r}: envs_per_process must be >= 1, got {value}")
        return min(int(value), max(num_envs, 1))

    def runs_in_process(self, section: Any, mode: str = "train", chunk: int | None = None) -> bool:
        """Whether env section ``section`` runs its envs in the caller's process:
        ``in_process`` when set, else the backend's choice (:attr:`default_in_process`).

        :raises ConfigError: ``in_process: true`` with ``simulator_python`` (another interpreter), with
            ``execution.clock: wall`` (a control loop of the shard's own), or for a backend that needs a
            process of its own.
        """
        asked = section.get("in_process")
        execution = section.get("execution")
        wall = execution is not None and str(execution.get("clock", "sim")) == "wall"
        if asked is None:
            if self.default_in_process is None or not self.in_process or section.get("simulator_python") or wall:
                return False
            return bool(self.default_in_process(section, int(section.num_envs), chunk))
        if not asked:
            return False
        if not self.in_process:
            raise ConfigError(
                f"config key '{mode}.in_process' is true, but {mode}.simulator_type {self.name!r} needs a process of its own "
                "(its renderer's GL context or the simulator's process-wide state): leave in_process unset or false"
            )
        if section.get("simulator_python"):
            raise ConfigError(
                f"config key '{mode}.in_process' is true, but '{mode}.simulator_python' is {section.simulator_python!r}: envs in the "
                "caller's process run under the caller's Python; drop one of the two keys"
            )
        if wall:
            raise ConfigError(
                f"config key '{mode}.in_process' is true, but '{mode}.execution.clock' is wall: the wall clock's control loop runs "
                "in a shard process of its own; use clock: sim, or in_process: false"
            )
        return True

    def checked_observation_spec(self, cfg: Any, num_envs: int) -> ObservationSpec:
        """What :attr:`observation_spec` gives for ``num_envs`` envs, each entry checked to be an ArraySpec.

        Computed once per process for one section and count: :func:`~envfleet.config.load_config`
        computes it (the backend's check of its own values), and a manager built in the same process
        from the loaded config gets that result.
        """
        key = (self.name, _content_key(cfg), int(num_envs))
        cached = _SPECS.get(key)
        if cached is not None:
            return dict(cached)
        spec = self.observation_spec(cfg, num_envs)
        for name, value in spec.items():
            if not isinstance(value, ArraySpec):
                raise TypeError(f"backend {self.name!r}: observation_spec()[{name!r}] must be an ArraySpec, got {value!r}")
        if len(_SPECS) >= _SPECS_MAX:
            _SPECS.pop(next(iter(_SPECS)))
        _SPECS[key] = dict(spec)
        return dict(spec)

    def section_action_dim(self, cfg: Any) -> int | None:
        """The action size this backend takes under env section ``cfg``: :attr:`action_dim`, else
        what :attr:`action_dim_for` says, else ``None`` (not known before a shard starts)."""
        if self.action_dim is not None:
            return int(self.action_dim)
        if self.action_dim_for is None:
            return None
        value = self.action_dim_for(cfg)
        return None if value is None else int(value)

    @property
    def version(self) -> str:
        """The installed version of :attr:`package`, or ``""``."""
        if not self.package:
            return ""
        try:
            return importlib.metadata.version(self.package)
        except importlib.metadata.PackageNotFoundError:
            return ""
