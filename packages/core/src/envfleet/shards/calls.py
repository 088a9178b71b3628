"""Calls to one stage's shards: start them, send a command to all and collect the replies, and
restart the ones that died or hung.

:class:`ShardCalls` is the transport and the restart policy of a
:class:`~envfleet.shards.manager.ProcessEnvManager`, apart from its lifecycle and its
``Env`` surface. Every request goes through one path,
:meth:`~envfleet.shards.handle.ShardHandle.send` then
:meth:`~envfleet.shards.handle.ShardHandle.reply_within`, the reset that follows a
restart included. A shard that dies or misses its deadline during a reset or a step is
killed, rebuilt and reset to the state ids its envs last reset to, as often as its
:class:`~envfleet.shards.handle.RestartBudget` allows.
"""

from __future__ import annotations

import dataclasses
import logging
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from omegaconf import OmegaConf

from ..env import EnvContext
from ..errors import EnvFleetSimulatorError, InvalidInputError, RestartLimitError
from ..plugins import BackendSpec
from ..validation import StateTable
from .gpus import Devices, shard_render_environ, stage_devices
from .handle import Deadline, Packed, ShardHandle
from .interpreter import shard_command
from .messages import Argument, Command, ErrorKind, InitRequest, Outcome, RemoteError, Reply, ResetRequest
from .shm import ShmBlock

__all__ = ["ManagerStats", "ShardCalls", "replay_reset"]

log = logging.getLogger("envfleet.shards.manager")


@dataclass
class ManagerStats:
    """Where one stage's time went, and how often shards were restarted."""

    calls: int = 0
    wall_s: float = 0.0  # total time inside chunk_step / reset calls
    sim_s: float = 0.0  # of which the slowest shard spent inside the simulator
    restarts: int = 0
    # One entry per restart, the most recent 100: stage, shard, envs, cause, exit (code or
    # signal), stderr_tail (the simulator's last lines), time, n (this restart's number).
    restart_log: list[dict[str, Any]] = field(default_factory=list)

    @property
    def transfer_s(self) -> float:
        """Time not spent in the simulator: messaging, shared-memory copies, bookkeeping."""
        return max(self.wall_s - self.sim_s, 0.0)


class ShardCalls:
    """The transport and restart policy of one stage's shards.

    :param shards: the stage's shard handles.
    :param spec: the stage's backend.
    :param env_cfg: the stage's env section (its timeouts, restart budget and ``simulator_python``).
    :param context: the stage's :class:`~envfleet.env.EnvContext`; each shard gets a copy with its own envs.
    :param stats: where restarts are counted and logged.
    """

    def __init__(self, shards: list[ShardHandle], spec: BackendSpec, env_cfg: Any, context: EnvContext, stats: ManagerStats) -> None:
        self.shards = shards
        self.spec = spec
        self.env_cfg = env_cfg
        container = OmegaConf.to_container(env_cfg, resolve=True)
        assert isinstance(container, dict)
        self.cfg_container: dict[str, Any] = {str(k): v for k, v in container.items()}
        self.context = context
        self.stats = stats
        self.stage_envs = sum(s.num_envs for s in shards)
        self.step_timeout_s = float(env_cfg.step_timeout_s)
        self.start_timeout_s = float(env_cfg.start_timeout_s)
        # A reset may build a new scene (LIBERO does, for another task), which can take as
        # long as a start on a loaded machine: it gets a deadline of its own.
        reset_timeout = env_cfg.reset_timeout_s
        self.reset_timeout_s = float(reset_timeout) if reset_timeout is not None else max(self.step_timeout_s, self.start_timeout_s)
        self.max_restarts = int(env_cfg.max_restarts)
        self.restart_window_s = float(env_cfg.restart_window_s)
        self.supports_state = False  # from the shards' init replies
        self._render_devices: Devices | None = None  # listed at the first launch (train.render_device)
        self._render_listed = False
        self.states: StateTable | None = None

    # ------------------------------------------------------------------ starting
    def launch(self, shard: ShardHandle) -> None:
        """Start ``shard``'s process and send it the init request (its answer: :meth:`await_init`)."""
        if shard.block is None:
            shard.block = ShmBlock(shard.layout, tag=f"s{self.context.stage_id}_{shard.index}_")
        ctx = dataclasses.replace(self.context, num_envs=shard.num_envs, shard_id=shard.index, env_offset=shard.env_slice.start)
        request = InitRequest(self.spec.env_factory, self.cfg_container, ctx.__dict__, shard.block.name, shard.layout.to_wire())
        if getattr(shard, "local", False):  # train.in_process: the env is built here, under this Python and environment
            shard.launch(sys.executable, None, request)
            return
        # train.simulator_python: the worker's own Python, or a venv of the simulator's (checked once).
        python, env = shard_command(self.env_cfg, self.spec)
        env.update(self.render_environ(shard, env, python))
        shard.launch(python, env, request)

    def render_environ(self, shard: ShardHandle, env: dict[str, str], python: str) -> dict[str, str]:
        """What ``train.render_device`` sets in ``shard``'s environment (:mod:`envfleet.render_device`);
        the devices are listed once per stage, and only where there is something to pick."""
        setting = self.env_cfg.get("render_device", "auto")
        if not self._render_listed:
            self._render_devices, self._render_listed = stage_devices(setting, env, python), True
        slot = shard.index + self.context.rank + self.context.stage_id
        out, pick = shard_render_environ(setting, self.spec.renderer, slot, env, self._render_devices)
        if pick is not None:
            log.info("stage %d shard %d renders on EGL device %s (%s)", self.context.stage_id, shard.index, pick.egl, pick.why)
        return out

    def await_init(self, shards: list[ShardHandle]) -> None:
        """Await the init replies of ``shards``; the first failure raises."""
        errors: list[Exception] = []
        for shard, (status, payload) in zip(shards, self.collect(shards, self.start_timeout_s)):
            if status is Outcome.OK:
                self._on_init(payload)
            elif status is Outcome.ERR:
                errors.append(self._remote_error(shard, "building the env", payload))
            else:
                errors.append(
                    EnvFleetSimulatorError(
                        f"stage {self.context.stage_id}, shard {shard.index} (envs {shard.env_range}): the simulator process "
                        f"{payload} while starting. Last lines of its output:\n{shard.stderr_tail()}"
                    )
                )
        if errors:
            raise errors[0]

    def _on_init(self, payload: dict[str, Any]) -> None:
        self.supports_state = bool(payload["supports_state"])
        if self.states is None:
            self.states = StateTable(payload["state_ids"], payload["state_task_ids"])

    def _remote_error(self, shard: ShardHandle, doing: str, error: RemoteError) -> Exception:
        if error.kind is ErrorKind.INVALID:
            return InvalidInputError(error.text)
        return EnvFleetSimulatorError(
            f"backend {self.spec.name!r} raised while {doing} (stage {self.context.stage_id}, shard {shard.index}, envs {shard.env_range}): "
            f"{error.message}",
            error.traceback,
        )

    def collect(self, shards: list[ShardHandle], timeout: float, on_ok: Callable[[ShardHandle], None] | None = None) -> list[Reply]:
        """Await one :class:`~envfleet.shards.messages.Reply` from each shard, within ``timeout`` seconds.

        Replies are read in shard order: all shards work at once, so by the time the
        first has answered the others mostly have too, and a reply that is already
        there costs one read and no poll. ``on_ok(shard)`` runs
        as soon as a shard answers, while the others still work.
        """
        deadline = Deadline.after(timeout)
        replies = []
        for shard in shards:
            reply = shard.reply_within(deadline)
            replies.append(reply)
            if reply.ok and on_ok is not None:
                on_ok(shard)
        return replies

    def broadcast(self, cmd: Command, make: Callable[[ShardHandle], Argument], shards: list[ShardHandle], timeout: float) -> list[Any]:
        """Send ``cmd`` (its argument ``make(shard)``) to ``shards`` and return the payloads; errors raise (no restart)."""
        for shard in shards:
            shard.send(cmd, make(shard))
        out = []
        first_error: Exception | None = None
        for shard, (status, payload) in zip(shards, self.collect(shards, timeout)):
            if status is Outcome.OK:
                out.append(payload)
            elif first_error is None:
                first_error = (
                    self._remote_error(shard, cmd.value, payload)
                    if status is Outcome.ERR
                    else EnvFleetSimulatorError(
                        f"stage {self.context.stage_id}, shard {shard.index}: {cmd.value} failed, the process {payload}"
                    )
                )
        if first_error is not None:
            raise first_error
        return out

    def call_all(
        self, cmd: Command, make: Callable[[ShardHandle], Argument], obs: dict[str, np.ndarray]
    ) -> tuple[list[Packed], set[int], float]:
        """Send a reset or step to all shards, then await all; restart the ones that died or hung.

        Each shard's observations are copied into ``obs`` as soon as it answers, so the copy
        overlaps the other shards' work. Returns each shard's reply (a restarted shard's: its
        fresh reset's), the indices of the restarted shards, and the slowest shard's simulator time.
        """
        shards = self.shards
        for shard in shards:
            shard.send(cmd, make(shard))
        timeout = self.step_timeout_s if cmd in (Command.STEP, Command.EXCHANGE) else self.reset_timeout_s
        # Byte views of the result arrays: a shard's part is then one memcpy per key, far less
        # code than numpy's slice assignment. Released before returning, so that they do not
        # count as holders of the arrays (see envfleet.shards.recycling).
        out = {key: (arr.data.cast("B"), arr.nbytes // self.stage_envs) for key, arr in obs.items()}
        try:
            return self._await_all(cmd, shards, timeout, out)
        finally:
            for view, _ in out.values():
                view.release()

    def _await_all(
        self, cmd: Command, shards: list[ShardHandle], timeout: float, out: dict[str, tuple[memoryview, int]]
    ) -> tuple[list[Packed], set[int], float]:
        outcomes = self.collect(shards, timeout, on_ok=lambda shard: _copy_obs(shard, out))
        replies: list[Packed] = []
        restarted: set[int] = set()
        first_error: Exception | None = None
        sim_s = 0.0
        failed: list[tuple[ShardHandle, str]] = []
        for shard, (status, payload) in zip(shards, outcomes):
            if status is Outcome.OK:
                replies.append(shard.unpack(payload))
                sim_s = max(sim_s, shard.sim_s)
                continue
            if status is Outcome.ERR:
                first_error = first_error or self._remote_error(
                    shard, "stepping" if cmd in (Command.STEP, Command.EXCHANGE) else "resetting", payload
                )
                replies.append(shard.no_reply())
                continue
            replies.append(shard.no_reply())  # replaced by its fresh reset's reply below
            failed.append((shard, f"{payload} during {cmd.value}"))
        # Every shard that died or hung is rebuilt at once: a stage whose shards all hung recovers in
        # one build time, not one per shard.
        for shard, reply in self._restart_all(failed).items():
            replies[shards.index(shard)] = reply
            restarted.add(shard.index)
            _copy_obs(shard, out)
        if first_error is not None:
            raise first_error
        return replies, restarted, sim_s

    # ------------------------------------------------------------------ restarts
    def _restart_all(self, failed: list[tuple[ShardHandle, str]]) -> dict[ShardHandle, Packed]:
        """Kill, rebuild and re-reset the ``failed`` shards (each with how it failed), all at once, as often as
        each one's budget allows; return each one's fresh reset's reply."""
        done: dict[ShardHandle, Packed] = {}
        while failed:
            for shard, how in failed:
                self._retire(shard, how)  # raises RestartLimitError once a budget is spent
            attempts = self._rebuild_all([shard for shard, _ in failed])
            done.update({shard: got for shard, got in attempts.items() if isinstance(got, Packed)})
            failed = [(shard, got) for shard, got in attempts.items() if isinstance(got, str)]
        return done

    def _retire(self, shard: ShardHandle, how: str) -> None:
        """Kill a failed shard, count and log its restart; raise when it failed too often."""
        exit_desc = shard.exit_description() if shard.proc is not None and shard.proc.poll() is not None else how
        tail = shard.stderr_tail()
        shard.kill()
        recent = shard.budget.spend()
        self.stats.restarts += 1
        self.stats.restart_log.append(
            {
                "stage": self.context.stage_id,
                "shard": shard.index,
                "envs": shard.env_range,
                "cause": how,
                "exit": exit_desc,
                "stderr_tail": tail.splitlines()[-5:],
                "time": time.time(),
                "n": self.stats.restarts,
            }
        )
        del self.stats.restart_log[:-100]  # the most recent causes are enough; a long run must not grow
        log.warning("stage %d shard %d (envs %s): %s; restarting", self.context.stage_id, shard.index, shard.env_range, how)
        if shard.budget.exhausted:
            raise RestartLimitError(
                f"stage {self.context.stage_id}, shard {shard.index} (envs {shard.env_range}) failed {recent} times "
                f"within {self.restart_window_s:g} s (train.max_restarts={self.max_restarts}); last failure: {how} "
                f"({exit_desc}). Last lines of the simulator's output:\n{tail}"
            )

    def _rebuild_all(self, shards: list[ShardHandle]) -> dict[ShardHandle, Packed | str]:
        """Start ``shards`` again, together, and replay each one's last reset: each one's reply, or how its attempt failed.

        A backend that raises while rebuilding raises here: another attempt would raise the same.
        """
        result: dict[ShardHandle, Packed | str] = {}
        launched = []
        for shard in shards:
            try:
                self.launch(shard)
                launched.append(shard)
            except OSError as exc:
                result[shard] = f"could not be restarted: {exc}"
        started = []
        for shard, (status, payload) in zip(launched, self.collect(launched, self.start_timeout_s)):
            if status is Outcome.ERR:
                raise self._remote_error(shard, "rebuilding the env after a crash", payload)
            if status is not Outcome.OK:
                result[shard] = f"{payload} while restarting"
                continue
            self._on_init(payload)
            if shard.last_reset is None:
                result[shard] = shard.no_reply()  # never reset: nothing to replay
            else:
                started.append(shard)
        replaying = []
        for shard in started:
            try:
                shard.send(Command.RESET, replay_reset(shard))
                replaying.append(shard)
            except OSError as exc:
                result[shard] = f"could not be restarted: {exc}"
        for shard, (status, payload) in zip(replaying, self.collect(replaying, self.reset_timeout_s)):
            if status is Outcome.ERR:
                raise self._remote_error(shard, "resetting after a restart", payload)
            result[shard] = shard.unpack(payload) if status is Outcome.OK else f"{payload} during the reset after a restart"
        return result


def _copy_obs(shard: ShardHandle, out: dict[str, tuple[memoryview, int]]) -> None:
    """Copy a shard's observations into the result: ``out`` maps each key to (its bytes, bytes per env)."""
    assert shard.block is not None
    start = shard.env_slice.start
    for key, src in shard.block.bytes.items():
        dest, per_env = out[key]
        dest[start * per_env : start * per_env + src.nbytes] = src


def replay_reset(shard: ShardHandle) -> ResetRequest:
    """The reset a shard last got: sent again after a restart, or after a start without saved state."""
    assert shard.last_reset is not None
    return ResetRequest(*shard.last_reset)
