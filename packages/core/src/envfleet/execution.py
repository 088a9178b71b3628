"""Execution: which action runs at which sub-step (``train.execution``), and what ran.

One job: the schedule of actions between the chunks a caller sends and the plain chunks a
backend steps. A backend always receives ``[n, sub-steps, action_dim]`` and keeps render-last;
everything here happens above it, in the manager.

``mode: chunk`` (the default) executes each call's whole chunk while the caller waits.
``mode: realtime`` makes a call overlap with the policy's thinking, as on a robot: the chunk of
a call was computed from the observation the env returned last, and arrives ``delay`` sub-steps
after it. Until then each env goes on with the previous chunk's remaining actions (when none
remain: ``on_empty: hold`` repeats the last applied action, ``zero`` applies zeros); from then
on it executes the new chunk from index ``delay``, aligned to the observation it came from. The
call returns after ``horizon`` sub-steps; what the new chunk holds beyond them stays queued for
the next call. The first chunk after a reset arrives with no delay.

With ``clock: sim`` the delay is a number of sub-steps: fixed, drawn from a seeded distribution
in milliseconds (turned into sub-steps with the backend's ``control_fps``), or given by the
caller per call. An episode is then a pure function of the config, the seed and the calls.
``clock: wall`` measures the delay instead (:mod:`envfleet.shards.realtime`).

Every realtime result reports, per env and sub-step, the applied action
(``infos["applied_action"]``), where it came from (``infos["action_source"]``:
:class:`ActionSource`) and, per env, the delay it saw (``infos["action_delay"]``).

The pure transforms verl-vla's executors apply (:func:`interpolate`, :func:`smooth_overlap`,
:func:`smooth_serial`) are here too, written from verl-vla's description of them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any

import numpy as np
from omegaconf import OmegaConf

from .errors import ConfigError, InvalidInputError
from .options import _Switch
from .validation import check_delays

__all__ = [
    "ExecutionMode",
    "Clock",
    "OnEmpty",
    "LatencyDistribution",
    "LatencyConfig",
    "InterpolationConfig",
    "SerialSmoothingConfig",
    "ExecutionConfig",
    "ActionSource",
    "RESULT_KEYS",
    "check_execution",
    "is_realtime",
    "is_wall_clock",
    "describe",
    "result_shapes",
    "window",
    "Schedule",
    "interpolate",
    "smooth_overlap",
    "smooth_serial",
]


class ExecutionMode(_Switch):
    """``train.execution.mode``."""

    chunk = "chunk"  #: each call executes its whole chunk while the caller waits
    realtime = "realtime"  #: the next chunk takes over some sub-steps after its observation


class Clock(_Switch):
    """``train.execution.clock``: what a realtime delay is measured in."""

    sim = "sim"  #: sub-steps of simulated time: stated, seeded, reproducible
    wall = "wall"  #: the wall clock: the shard steps on while the policy thinks


class OnEmpty(_Switch):
    """``train.execution.on_empty``: what an env applies when its queue ran out before the next chunk arrived."""

    hold = "hold"  #: the last applied action again
    zero = "zero"  #: zeros


class LatencyDistribution(_Switch):
    """``train.execution.latency.distribution``."""

    constant = "constant"  #: ``mean_ms`` every time
    uniform = "uniform"  #: between ``low_ms`` and ``high_ms``
    exponential = "exponential"  #: mean ``mean_ms``
    normal = "normal"  #: ``mean_ms`` and ``std_ms``, cut at 0


class ActionSource(IntEnum):
    """Where an applied action came from (``infos["action_source"]``)."""

    previous = 0  #: the previous chunk's queue
    current = 1  #: this call's chunk
    hold = 2  #: the last applied action again (the queue was empty)
    zero = 3  #: zeros (the queue was empty, ``on_empty: zero``)


#: The infos every realtime result carries.
RESULT_KEYS = ("applied_action", "action_source", "action_delay")


@dataclass
class LatencyConfig:
    """``train.execution.latency``: the policy's inference latency, in ms of simulated time (``delay: latency``)."""

    distribution: LatencyDistribution = LatencyDistribution.constant
    mean_ms: float = 0.0  # constant: the latency; exponential and normal: the mean
    std_ms: float = 0.0  # normal: the standard deviation
    low_ms: float = 0.0  # uniform: the lower bound
    high_ms: float = 0.0  # uniform: the upper bound


@dataclass
class InterpolationConfig:
    """``train.execution.interpolation``: each chunk upsampled linearly in time (verl-vla's ``interpolation``)."""

    enable: bool = False
    factor: int = 2  # sub-steps per action of the chunk; at least 2


@dataclass
class SerialSmoothingConfig:
    """``train.execution.serial_smoothing`` (``mode: chunk``): verl-vla's plan smoothing. Each call's plan
    executes only its first ``execution_steps``; the next plan's first ``blend_steps`` are blended with the
    previous plan's unexecuted ones."""

    enable: bool = False
    execution_steps: int = 80  # of each plan, the sub-steps executed
    blend_steps: int = 20  # of the next plan, the sub-steps blended with the previous plan's tail; at least 2


@dataclass
class ExecutionConfig:
    """``train.execution`` (and ``val.execution``): which action runs at which sub-step (docs/concepts.md)."""

    mode: ExecutionMode = ExecutionMode.chunk  # chunk: each call's whole chunk, the caller waiting; realtime: overlapped
    clock: Clock = Clock.sim  # realtime: sim (delays in sub-steps, reproducible) or wall (measured, the robot's way)
    horizon: int | None = None  # realtime: sub-steps a call runs after its observation; null: the chunk length
    # clock sim: sub-steps each chunk arrives after its observation: a number, "latency" (drawn from
    # `latency`, seeded) or "caller" (each call's own, e.g. a measured inference time)
    delay: Any = 0
    latency: LatencyConfig = field(default_factory=LatencyConfig)
    control_fps: float | None = None  # delay latency: sub-steps per second of simulated time; null: the backend's control_fps
    on_empty: OnEmpty = OnEmpty.hold  # realtime: what runs when an env's queue is empty before the next chunk arrives
    seed: int | None = None  # the latency draws' seed; null: the section's seed
    smooth_overlap: bool = False  # realtime: blend the queue still running into the new chunk (verl-vla's smooth_overlapping_actions)
    target_step_hz: float | None = None  # clock wall: sub-steps per second the shard paces to; null: as fast as it runs
    # clock wall: sub-steps the shard's loop runs per backend call while the policy thinks. 1: a chunk takes over at
    # the next sub-step boundary; more: one render per run (render-last), and an arriving chunk waits for the run's end
    wall_tick: int = 1
    interpolation: InterpolationConfig = field(default_factory=InterpolationConfig)
    serial_smoothing: SerialSmoothingConfig = field(default_factory=SerialSmoothingConfig)


def is_realtime(section: Any) -> bool:
    """Whether env section ``section`` runs ``mode: realtime``."""
    execution = section.get("execution") if hasattr(section, "get") else None
    return execution is not None and str(execution.get("mode")) == ExecutionMode.realtime.value


def is_wall_clock(section: Any) -> bool:
    """Whether env section ``section`` runs ``mode: realtime`` on ``clock: wall`` (:mod:`envfleet.shards.realtime`)."""
    return is_realtime(section) and str(section.execution.clock) == Clock.wall.value


def window(execution: Any, chunk: int | None) -> tuple[int, int]:
    """``(interpolation factor, horizon)`` of an ``execution`` section for chunks of ``chunk`` actions: the
    sub-steps per action, and the sub-steps a call runs (``horizon``, or the whole interpolated chunk;
    0 when neither is known)."""
    factor = int(execution.interpolation.factor) if execution.interpolation.enable else 1
    return factor, (chunk or 0) * factor if execution.horizon is None else int(execution.horizon)


def result_shapes(section: Any, chunk: int, action_dim: int) -> dict[str, tuple[tuple[int, ...], np.dtype[Any]]]:
    """The per-env shape and dtype of each of :data:`RESULT_KEYS` for env section ``section`` (``{}`` unless realtime):
    for a face that declares what its steps return."""
    if not is_realtime(section):
        return {}
    horizon = window(section.execution, chunk)[1]
    return {
        "applied_action": ((horizon, action_dim), np.dtype(np.float32)),
        "action_source": ((horizon,), np.dtype(np.int8)),
        "action_delay": ((), np.dtype(np.int64)),
    }


def describe(section: Any) -> dict[str, Any] | None:
    """Env section ``section``'s ``execution`` as plain values (what a server tells its clients); None for the default."""
    execution = section.get("execution") if hasattr(section, "get") else None
    if execution is None:
        return None
    plain = OmegaConf.to_container(execution, resolve=True, enum_to_str=True)
    assert isinstance(plain, dict)
    default = OmegaConf.to_container(OmegaConf.structured(ExecutionConfig), enum_to_str=True)
    return None if plain == default else {str(k): v for k, v in plain.items()}


def _delay_kind(delay: Any, where: str) -> str:
    if isinstance(delay, bool) or not (isinstance(delay, int) or delay in ("latency", "caller")):
        raise ConfigError(f"config key '{where}delay' must be a whole number of sub-steps >= 0, 'latency' or 'caller', got {delay!r}")
    if isinstance(delay, int) and delay < 0:
        raise ConfigError(f"config key '{where}delay' must be >= 0 sub-steps, got {delay}")
    return "fixed" if isinstance(delay, int) else str(delay)


def check_execution(
    execution: Any, prefix: str, chunk: int | None, control_fps: float | None, backend: str, auto_reset: bool = False
) -> None:
    """Every rule of ``train.execution`` that the schema's types cannot state, once, at load time.

    :param execution: the merged ``execution`` section.
    :param prefix: ``"train."`` or ``"val."``.
    :param chunk: ``actor.model.num_action_chunks`` (None: any length per call).
    :param control_fps: the backend's ``control_fps`` (None: it declares none).
    :param auto_reset: the section's ``auto_reset``.
    :raises ConfigError: naming the key and the allowed range.
    """
    where = f"{prefix}execution."
    realtime = str(execution.mode) == ExecutionMode.realtime.value
    wall = realtime and str(execution.clock) == Clock.wall.value
    interp = execution.interpolation
    if interp.enable and interp.factor < 2:
        raise ConfigError(f"config key '{where}interpolation.factor' must be >= 2 when interpolation is on, got {interp.factor}")
    factor = interp.factor if interp.enable else 1
    sub_steps = None if chunk is None else chunk * factor
    kind = _delay_kind(execution.delay, where)
    if execution.wall_tick < 1:
        raise ConfigError(f"config key '{where}wall_tick' must be >= 1 sub-step, got {execution.wall_tick}")
    if execution.wall_tick > 1 and execution.target_step_hz is not None:
        raise ConfigError(
            f"config keys '{where}wall_tick' and '{where}target_step_hz' do not go together: pacing runs one sub-step at a time"
        )
    if execution.target_step_hz is not None and execution.target_step_hz <= 0:
        raise ConfigError(f"config key '{where}target_step_hz' must be > 0 (sub-steps per second) or null, got {execution.target_step_hz}")
    smoothing = execution.serial_smoothing
    if smoothing.enable:
        if realtime:
            raise ConfigError(
                f"config keys '{where}serial_smoothing.enable' and '{where}mode: realtime' do not go together: serial smoothing "
                "is for mode: chunk (realtime blends with smooth_overlap)"
            )
        if smoothing.execution_steps <= 0 or smoothing.blend_steps < 2:
            raise ConfigError(
                f"config keys '{where}serial_smoothing.execution_steps' (> 0) and 'blend_steps' (>= 2), "
                f"got {smoothing.execution_steps} and {smoothing.blend_steps}"
            )
        if sub_steps is not None and smoothing.execution_steps + smoothing.blend_steps > sub_steps:
            raise ConfigError(
                f"config keys '{where}serial_smoothing.execution_steps' + 'blend_steps' "
                f"({smoothing.execution_steps} + {smoothing.blend_steps}) must not exceed the plan's sub-steps "
                f"({'any' if sub_steps is None else sub_steps}: actor.model.num_action_chunks x the interpolation factor)"
            )
    if not realtime:
        for key, value, default in (
            ("delay", execution.delay, 0),
            ("horizon", execution.horizon, None),
            ("smooth_overlap", execution.smooth_overlap, False),
            ("target_step_hz", execution.target_step_hz, None),
            ("wall_tick", execution.wall_tick, 1),
        ):
            if value != default:
                raise ConfigError(
                    f"config key '{where}{key}' needs '{where}mode: realtime' (it is {execution.mode}); remove it or set the mode"
                )
        return
    if sub_steps is None and execution.horizon is None:
        raise ConfigError(
            f"config key '{where}mode: realtime' needs a fixed chunk length (actor.model.num_action_chunks) or a "
            f"'{where}horizon': with neither, a call's length is unknown"
        )
    horizon = int(execution.horizon) if sub_steps is None or execution.horizon is not None else sub_steps
    if not 1 <= horizon <= (sub_steps or horizon):
        raise ConfigError(f"config key '{where}horizon' must be between 1 and the chunk length ({sub_steps} sub-steps), got {horizon}")
    if wall:
        if auto_reset:
            raise ConfigError(
                f"config keys '{prefix}auto_reset' and '{where}clock: wall' do not go together: the control loop would step a "
                "new episode before the policy saw its first observation; reset finished envs yourself, or use clock: sim"
            )
        if kind != "fixed" or execution.delay != 0:
            raise ConfigError(f"config keys '{where}delay' and '{where}clock: wall' do not go together: the wall clock measures the delay")
        return
    if execution.target_step_hz is not None:
        raise ConfigError(f"config keys '{where}target_step_hz' and '{where}clock: sim' do not go together: pacing is for clock: wall")
    if kind == "fixed" and execution.delay > horizon:
        raise ConfigError(f"config key '{where}delay' must be between 0 and the horizon ({horizon} sub-steps), got {execution.delay}")
    if kind == "latency":
        lat = execution.latency
        if execution.control_fps is not None and execution.control_fps <= 0:
            raise ConfigError(f"config key '{where}control_fps' must be > 0 (sub-steps per second) or null, got {execution.control_fps}")
        if control_fps is None and execution.control_fps is None:
            raise ConfigError(
                f"config key '{where}delay: latency' needs a control rate to turn ms into sub-steps, and backend "
                f"{backend!r} declares no control_fps: set '{where}control_fps' (sub-steps per second of simulated time), "
                f"or give '{where}delay' in sub-steps"
            )
        if min(lat.mean_ms, lat.std_ms, lat.low_ms, lat.high_ms) < 0 or lat.high_ms < lat.low_ms:
            raise ConfigError(f"config keys '{where}latency.*' must be >= 0 ms, with high_ms >= low_ms; got {dict(lat)}")


# ---------------------------------------------------------------------------------------------- transforms


def interpolate(actions: np.ndarray, factor: int) -> np.ndarray:
    """Linear upsampling in time: ``[n, T, A]`` -> ``[n, T * factor, A]`` (the first and last actions kept)."""
    if factor == 1:
        return actions
    steps = actions.shape[1]
    positions = np.linspace(0.0, steps - 1, steps * factor)
    left = np.floor(positions).astype(np.int64)
    right = np.ceil(positions).astype(np.int64)
    weight = (positions - left).reshape(1, -1, 1)
    return ((1.0 - weight) * actions[:, left] + weight * actions[:, right]).astype(actions.dtype, copy=False)


def _smoothstep(steps: int, dtype: Any) -> np.ndarray:
    ramp = np.linspace(0.0, 1.0, steps, dtype=dtype)
    return (ramp * ramp * (3.0 - 2.0 * ramp)).reshape(1, steps, 1)


def smooth_overlap(queued: np.ndarray, incoming: np.ndarray) -> np.ndarray:
    """The new chunk's aligned actions ``incoming`` ``[n, T, A]`` with the queue still running ``queued``
    ``[n, Q, A]`` blended in over their overlap (a smoothstep from the queue to the new chunk)."""
    overlap = min(queued.shape[1], incoming.shape[1])
    out = incoming.copy()
    if overlap:
        weight = _smoothstep(overlap, incoming.dtype)
        out[:, :overlap] = (1.0 - weight) * queued[:, :overlap] + weight * incoming[:, :overlap]
    return out


def smooth_serial(
    previous: np.ndarray | None, plan: np.ndarray, execution_steps: int, blend_steps: int, valid: np.ndarray | None
) -> np.ndarray:
    """The plan ``[n, T, A]`` whose first ``blend_steps`` are blended with the previous plan's unexecuted
    ``[execution_steps, execution_steps + blend_steps)``, for the envs ``valid`` (all when None)."""
    out = plan.copy()
    if previous is None:
        return out
    valid = np.ones(plan.shape[0], dtype=bool) if valid is None else valid
    if valid.any():
        weight = _smoothstep(blend_steps, plan.dtype)
        tail = previous[valid, execution_steps : execution_steps + blend_steps]
        out[valid, :blend_steps] = (1.0 - weight) * tail + weight * out[valid, :blend_steps]
    return out


# ---------------------------------------------------------------------------------------------- the schedule


class Schedule:
    """The realtime schedule of one stage's envs in simulated time (and the transforms of ``mode: chunk``).

    :meth:`plan` turns a call's chunk into the sub-steps to execute now; :meth:`done` takes note of
    the envs whose episodes ended (their queues are dropped and their next chunk has no delay);
    :meth:`reset` does the same for envs reset by the caller.

    :param execution: the loaded ``execution`` section.
    :param num_envs: the stage's envs.
    :param action_dim: the action size.
    :param chunk: the configured chunk length.
    :param seed: the section's seed (the latency draws', unless ``execution.seed`` is set).
    :param stream: ``(rank, stage_id, mode index)``: the draws of each stage are their own.
    :param control_fps: the backend's sub-steps per second (for ``delay: latency``).
    """

    def __init__(
        self,
        execution: Any,
        num_envs: int,
        action_dim: int,
        chunk: int,
        seed: int,
        stream: tuple[int, ...],
        control_fps: float | None,
    ) -> None:
        self.realtime = str(execution.mode) == ExecutionMode.realtime.value
        self.factor, self.horizon = window(execution, chunk)
        self.sub_steps = chunk * self.factor
        self.delay = execution.delay
        self.kind = _delay_kind(self.delay, "")
        self.latency = execution.latency
        self.fps = control_fps if execution.control_fps is None else float(execution.control_fps)
        self.hold = str(execution.on_empty) == OnEmpty.hold.value
        self.smooth = bool(execution.smooth_overlap)
        smoothing = execution.serial_smoothing
        self.serial = (int(smoothing.execution_steps), int(smoothing.blend_steps)) if smoothing.enable else None
        base = int(seed if execution.seed is None else execution.seed)
        self.rng = np.random.default_rng([base, *stream, 0x5EED])
        self.num_envs, self.action_dim = int(num_envs), int(action_dim)
        self.queue = np.zeros((num_envs, max(self.sub_steps, self.horizon), action_dim), np.float32)
        self.queued = np.zeros(num_envs, np.int64)  # queue[i, :queued[i]] runs next
        self.last = np.zeros((num_envs, action_dim), np.float32)  # the last applied action
        self.fresh = np.ones(num_envs, dtype=bool)  # reset since the last call: the next chunk has no delay
        self.previous_plan: np.ndarray | None = None  # serial smoothing: the last plan
        self.previous_valid: np.ndarray | None = None

    @property
    def steps_per_call(self) -> int:
        """Sub-steps a call executes."""
        if self.serial is not None:
            return self.serial[0]
        return self.horizon if self.realtime else self.sub_steps

    # .............................................................................................. delays
    def draw(self, given: Any = None) -> np.ndarray:
        """This call's delay per env, in sub-steps (``given``: the caller's, for ``delay: caller``).

        :raises InvalidInputError: a per-call delay given where the config fixes the delay, missing where it
            does not, or outside ``[0, horizon]``.
        """
        n = self.num_envs
        if self.kind == "caller":
            if given is None:
                raise InvalidInputError(f"train.execution.delay is 'caller': give each call's delays, {n} whole numbers of sub-steps")
            delays = check_delays(given, n)
            if delays.min(initial=0) < 0 or delays.max(initial=0) > self.horizon:
                raise InvalidInputError(f"delays must be between 0 and the horizon ({self.horizon} sub-steps), got {delays.tolist()}")
            return delays
        if given is not None:
            raise InvalidInputError(f"a call gave its own delays, but train.execution.delay is {self.delay!r}: set it to 'caller'")
        if self.kind == "fixed":
            return np.full(n, int(self.delay), np.int64)
        ms = self._latency_ms(n)
        assert self.fps is not None
        steps = np.ceil(np.maximum(ms, 0.0) * (float(self.fps) / 1000.0) - 1e-9)
        return np.minimum(steps, self.horizon).astype(np.int64)

    def _latency_ms(self, n: int) -> np.ndarray:
        lat, rng = self.latency, self.rng
        dist = str(lat.distribution)
        if dist == LatencyDistribution.constant.value:
            return np.full(n, float(lat.mean_ms))
        if dist == LatencyDistribution.uniform.value:
            return rng.uniform(float(lat.low_ms), float(lat.high_ms), n)
        if dist == LatencyDistribution.exponential.value:
            return rng.exponential(float(lat.mean_ms), n) if lat.mean_ms > 0 else np.zeros(n)
        return rng.normal(float(lat.mean_ms), float(lat.std_ms), n)

    # .............................................................................................. plan
    def plan(self, actions: np.ndarray, given: Any = None) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """The sub-steps to execute for the chunk ``actions`` ``[n, chunk, A]``, and the infos that say what ran.

        :returns: ``(executed [n, steps_per_call, A] float32, infos)``; ``infos`` is empty in ``mode: chunk``.
        """
        actions = interpolate(actions, self.factor)
        steps_here = actions.shape[1]
        if self.serial is not None:
            executed, blend = self.serial
            if executed + blend > steps_here:
                raise InvalidInputError(
                    f"serial smoothing needs plans of at least execution_steps + blend_steps ({executed} + {blend}) sub-steps, "
                    f"got {steps_here}"
                )
            if self.previous_plan is not None and self.previous_plan.shape != actions.shape:
                raise InvalidInputError(
                    f"consecutive plans must keep their shape under serial smoothing: {list(self.previous_plan.shape)} then "
                    f"{list(actions.shape)}"
                )
            plan = smooth_serial(self.previous_plan, actions, executed, blend, self.previous_valid)
            self.previous_plan = plan.copy()
            self.previous_valid = np.ones(self.num_envs, dtype=bool)
            return np.ascontiguousarray(plan[:, :executed], dtype=np.float32), {}
        if not self.realtime:
            return actions, {}
        if steps_here < self.horizon:
            raise InvalidInputError(f"a chunk must cover the horizon ({self.horizon} sub-steps), got {steps_here} sub-steps")
        delays = self.draw(given)  # drawn every call, fresh envs too: the draws do not depend on the episodes
        delays[self.fresh] = 0
        n, h = self.num_envs, self.horizon
        incoming = actions.astype(np.float32, copy=True)
        if self.smooth:
            # verl-vla's smooth_overlapping_actions: the queue still to run when the chunk arrives (at its
            # delay) is blended into the chunk's actions from that index on.
            for i in np.flatnonzero(self.queued > delays):
                d, q = int(delays[i]), int(self.queued[i])
                incoming[i : i + 1, d:] = smooth_overlap(self.queue[i : i + 1, d:q], incoming[i : i + 1, d:])
        steps = np.arange(h)
        mine = steps[None, :] >= delays[:, None]  # [n, h]: this chunk's sub-steps
        from_queue = ~mine & (steps[None, :] < self.queued[:, None])
        empty = ~mine & ~from_queue
        out = incoming[:, :h].copy()
        out[from_queue] = self.queue[:, :h][from_queue]
        source = np.where(mine, ActionSource.current, ActionSource.previous).astype(np.int8)
        if empty.any():
            if self.hold:
                # The last applied action before an empty sub-step: the queue's last, or the previous call's last.
                last = np.where((self.queued > 0)[:, None], self.queue[np.arange(n), np.maximum(self.queued - 1, 0)], self.last)
                out[empty] = np.broadcast_to(last[:, None, :], out.shape)[empty]
                source[empty] = ActionSource.hold
            else:
                out[empty] = 0.0
                source[empty] = ActionSource.zero
        # What stays queued: this chunk beyond the horizon, aligned to its observation.
        if self.queue.shape[1] < steps_here:
            self.queue = np.zeros((n, steps_here, self.action_dim), np.float32)
        self.queued[:] = steps_here - h
        self.queue[:, : steps_here - h] = incoming[:, h:]
        self.last = out[:, -1].copy()
        self.fresh[:] = False
        return out, {"applied_action": out.copy(), "action_source": source, "action_delay": delays}

    def done(self, ended: np.ndarray) -> None:
        """Envs ``ended`` (a bool mask) finished or restarted their episode: queues dropped, no delay next."""
        self.queued[ended] = 0
        self.fresh |= ended
        if self.previous_valid is not None:
            self.previous_valid &= ~ended

    def reset(self, env_ids: np.ndarray | None = None) -> None:
        """The caller reset ``env_ids`` (all when None)."""
        mask = np.ones(self.num_envs, dtype=bool) if env_ids is None else np.isin(np.arange(self.num_envs), env_ids)
        self.queued[mask] = 0
        self.last[mask] = 0.0
        self.fresh |= mask
        if env_ids is None:
            self.previous_plan = self.previous_valid = None
        elif self.previous_valid is not None:
            self.previous_valid &= ~mask
