"""``RemoteEnvManager``: one stage served by ``envfleet serve``, with the call surface of ``ProcessEnvManager``.

Everything above a manager (the worker, the faces) runs over it unchanged. It needs only
core: no Ray, no torch, no simulator. While it is open it keeps the stage's lease on its own
(:mod:`envfleet.remote.lease`). A call that loses its connection (the server was
killed or restarted) reconnects within ``reconnect_s``, opens the stage again, resets its
envs to the state ids they last reset to and reports them as a restarted shard is
reported: the fresh reset's observations, zero rewards, a truncation at the last sub-step
and ``infos["sim_restarted"]`` True. A server that does not answer within ``timeout_s``
(stalled) is given up on with :class:`RemoteConnectionError`; a stage another client took, or
whose lease ran out, is a :class:`RemoteStageLostError` for this and every later call.

>>> mgr = RemoteEnvManager("10.0.0.5:7000", token="s3cret", stage_id=0)   # doctest: +SKIP
>>> mgr.start_simulator(); mgr.reset_envs_to_state_ids(np.arange(4))     # doctest: +SKIP
>>> out = mgr.chunk_step(np.zeros((4, 8, 7), np.float32))                # doctest: +SKIP
"""

from __future__ import annotations

import ssl
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..env import ArraySpec, ChunkStepResult, ResetResult
from ..errors import ClosedEnvironmentError, ConfigError, EnvFleetError, SimulatorStoppedError
from ..shards.calls import ManagerStats
from ..validation import StateTable, as_env_ids, check_actions, check_delays, check_reset_ids
from .connection import Connection, RemoteConnectionError, RemoteRefusedError, RemoteStageLostError
from .lease import LeaseKeeper
from .results import reset_result, restarted_step, step_result
from .wire import Frame, parse_address

__all__ = ["RemoteEnvManager", "RemoteBackend", "RemoteConnectionError", "RemoteRefusedError", "RemoteStageLostError"]


@dataclass(frozen=True)
class RemoteBackend:
    """The facts of the server's ``BackendSpec`` that the layers above a manager read."""

    name: str
    package: str | None = None
    implements: frozenset[str] = frozenset()
    action_dim: int | None = None
    result_packages: tuple[str, ...] = ()
    renderer: str | None = None
    description: str = ""


@dataclass
class _Last:
    state_ids: np.ndarray | None = None
    task_ids: np.ndarray | None = None
    step_infos: dict[str, tuple[np.dtype[Any], tuple[int, ...]]] = field(default_factory=dict)


class RemoteEnvManager:
    """One stage of an ``envfleet serve`` server; the call surface of :class:`~envfleet.ProcessEnvManager`.

    :param address: ``host:port`` the server printed.
    :param token: the server's token (``None`` for a loopback server started with ``--insecure``).
    :param stage_id: the stage of the server's config to drive.
    :param rank: the worker rank (seeds and video paths, as for a local manager).
    :param mode: ``"train"`` or ``"val"``.
    :param tls: connect with TLS; ``ca_file`` names the CA to trust (implies ``tls``).
    :param timeout_s: deadline of one call; ``None``: the server's deadline for that call plus 30 s.
    :param connect_timeout_s: deadline to connect and be welcomed.
    :param reconnect_s: how long a call whose connection broke keeps trying to reconnect.
    :param take: take the stage even from a holder whose lease still runs (one you know is dead: a
        restarted trainer's wedged old process); the old holder's next call raises
        :class:`RemoteStageLostError` naming this client. A holder past its lease gives way without it.
    """

    def __init__(
        self,
        address: str,
        token: str | None = None,
        *,
        stage_id: int = 0,
        rank: int = 0,
        mode: str = "train",
        tls: bool = False,
        ca_file: str | None = None,
        server_hostname: str | None = None,
        timeout_s: float | None = None,
        connect_timeout_s: float = 10.0,
        reconnect_s: float = 30.0,
        take: bool = False,
    ) -> None:
        self.address = address
        self.host, self.port = parse_address(address)
        self.stage_id, self.rank, self.mode = int(stage_id), int(rank), str(mode)
        context = ssl.create_default_context(cafile=ca_file) if tls or ca_file is not None else None
        self.connect_timeout_s = float(connect_timeout_s)
        self.reconnect_s = float(reconnect_s)
        self._timeout_s = timeout_s
        self.stats = ManagerStats()
        self._conn = Connection(address, self.host, self.port, token, context, server_hostname or self.host, self.connect_timeout_s)
        self._running = False
        self._closed = False
        self._states: StateTable | None = None
        self._last = _Last()
        self._supports_state = False
        self._sim_s_seen = 0.0
        self._open(take)
        assert self._conn.lease_s is not None
        self._keeper = LeaseKeeper(self._conn, self._conn.lease_s)

    # ------------------------------------------------------------------ connection
    @property
    def lease_s(self) -> float | None:
        """The server's lease: the stage is freed when it hears nothing for this long (the keeper pings)."""
        return self._conn.lease_s

    def _open(self, take: bool = False) -> None:
        """Connect, authenticate and open the stage; sets the stage's facts."""
        opened = self._connect(take)
        self.num_envs = int(opened.get("num_envs"))
        self.action_dim = int(opened.get("action_dim"))
        chunk = opened.get("num_action_chunks")
        self.num_action_chunks = None if chunk is None else int(chunk)
        self.obs_spec = {name: ArraySpec(tuple(shape), dtype) for name, (shape, dtype) in opened.get("obs_spec").items()}
        backend = opened.get("backend")
        self.spec = RemoteBackend(
            name=str(backend["name"]),
            package=backend.get("package"),
            implements=frozenset(backend.get("implements", ())),
            action_dim=backend.get("action_dim"),
            result_packages=tuple(backend.get("result_packages", ())),
            renderer=backend.get("renderer"),
            description=str(backend.get("description", "")),
        )
        #: The server's ``execution`` section as plain values (None: mode chunk): it schedules the actions.
        self.execution = opened.get("execution")
        self.step_timeout_s = float(opened.get("step_timeout_s"))
        self.reset_timeout_s = float(opened.get("reset_timeout_s"))
        self.start_timeout_s = float(opened.get("start_timeout_s"))

    def _connect(self, take: bool = False) -> Frame:
        fields = {"mode": self.mode, "stage_id": self.stage_id, "rank": self.rank}
        if take:
            fields["take"] = True
        return self._conn.dial(fields, float(getattr(self, "start_timeout_s", 60.0)) + 30.0)

    def _call(self, frame: Frame, expect: str, timeout: float) -> Frame:
        self._check_open()
        if self._conn.sock is None and self._conn.lost is None:
            raise RemoteConnectionError(f"envfleet server {self.address}: the connection was lost earlier; make a new manager")
        return self._conn.ask(frame, expect, timeout if self._timeout_s is None else float(self._timeout_s))

    # ------------------------------------------------------------------ lifecycle
    @property
    def running(self) -> bool:
        """Whether the server's shard processes for this stage are up."""
        return self._running

    @property
    def supports_state(self) -> bool:
        """Whether the server's backend saves and restores its state."""
        return self._supports_state

    @property
    def chunk(self) -> int:
        """The configured chunk length (see :attr:`ProcessEnvManager.chunk`)."""
        if self.num_action_chunks is None:
            raise ConfigError("this needs a fixed chunk length: the server's actor.model.num_action_chunks is null")
        return self.num_action_chunks

    @property
    def num_shards(self) -> int:
        """Shards are the server's business: 0 here."""
        return 0

    def shard_pids(self) -> list[int | None]:
        """No shard runs on this machine."""
        return []

    def start_simulator(self) -> None:
        """Start the stage's shard processes on the server."""
        self._check_open()
        if self._running:
            return
        reply = self._call(Frame("start"), "started", self.start_timeout_s + 30.0)
        self._supports_state = bool(reply.get("supports_state"))
        self._running = True

    def stop_simulator(self) -> None:
        """Offload on the server (its state saved there, when the backend can)."""
        if self._running:
            self._call(Frame("stop"), "stopped", self.step_timeout_s + 30.0)
            self._running = False

    def close(self) -> None:
        """Say goodbye; the server frees the stage. Safe to call twice."""
        if self._closed:
            return
        self._closed = True
        self._running = False
        self._keeper.stop()
        if self._conn.sock is not None:
            try:
                self._conn.ask(Frame("bye"), "bye", 10.0)
            except EnvFleetError:
                pass
        self._conn.drop()

    def __enter__(self) -> RemoteEnvManager:
        self.start_simulator()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self._conn.drop()
        except Exception:
            pass

    def _check_open(self) -> None:
        if self._closed:
            raise ClosedEnvironmentError(f"stage {self.stage_id}: the remote manager is closed; make a new one")

    def _check_running(self) -> None:
        self._check_open()
        if not self._running:
            raise SimulatorStoppedError(f"stage {self.stage_id}: the simulator is stopped; call start_simulator() (init_simulator()) first")

    # ------------------------------------------------------------------ Env surface
    def renderer_info(self) -> dict[str, str]:
        """What renders the server's images (its first shard's GL stack)."""
        self._check_running()
        return dict(self._call(Frame("renderer_info"), "renderer", self.step_timeout_s + 30.0).get("info"))

    def protocol(self) -> dict[str, Any]:
        """The stage's protocol as the server computes it (its backend's name and versions, its renderer)."""
        self._check_running()
        return dict(self._call(Frame("protocol"), "protocol", self.step_timeout_s + 30.0).get("protocol"))

    def _states_table(self) -> StateTable:
        self._check_running()
        if self._states is None:
            reply = self._call(Frame("state_ids"), "state_ids", self.step_timeout_s + 30.0)
            self._states = StateTable(reply.arrays["state_ids"], reply.arrays["task_ids"])
        return self._states

    def get_all_state_ids(self) -> np.ndarray:
        """Every state id the server's backend can reset to."""
        return self._states_table().state_ids.copy()

    def get_state_task_ids(self) -> np.ndarray:
        """The task of each id of :meth:`get_all_state_ids`."""
        return self._states_table().tasks_of(self.get_all_state_ids())

    def check_reset_ids(self, state_ids: Any, task_ids: Any = None) -> tuple[np.ndarray, np.ndarray | None]:
        """``reset_envs_to_state_ids``'s arguments checked here, before anything is sent."""
        return check_reset_ids(self._states_table(), state_ids, task_ids, num_envs=self.num_envs, where=f" of stage {self.stage_id}")

    def reset_envs_to_state_ids(self, state_ids: Any, task_ids: Any = None) -> ResetResult:
        """Reset env ``i`` of the stage to ``state_ids[i]``."""
        state_ids, task_ids = self.check_reset_ids(state_ids, task_ids)
        arrays = {"state_ids": state_ids} if task_ids is None else {"state_ids": state_ids, "task_ids": task_ids}
        self._last.state_ids, self._last.task_ids = state_ids.copy(), None if task_ids is None else task_ids.copy()
        reply = self._timed(Frame("reset", arrays=arrays), self.reset_timeout_s)
        if reply is None:
            reply = self._timed(Frame("reset", arrays=arrays), self.reset_timeout_s, restarted=True)
            assert reply is not None
            return reset_result(reply, self.num_envs, restarted=True)
        return reset_result(reply, self.num_envs)

    def reset_some_envs(self, env_ids: Any, state_ids: Any, task_ids: Any = None) -> ResetResult:
        """Reset env ``env_ids[j]`` to ``state_ids[j]``; the others keep their episodes."""
        self._check_running()
        env_ids = as_env_ids(env_ids, self.num_envs)
        state_ids, task_ids = check_reset_ids(
            self._states_table(), state_ids, task_ids, num_envs=len(env_ids), where=f" of the reset list of stage {self.stage_id}"
        )
        if self._last.state_ids is None:
            raise SimulatorStoppedError(f"stage {self.stage_id}: reset every env once (reset_envs_to_state_ids) before resetting some")
        arrays = {"env_ids": env_ids.astype(np.int64), "state_ids": state_ids}
        if task_ids is not None:
            arrays["task_ids"] = task_ids
        self._last.state_ids = self._last.state_ids.copy()
        self._last.state_ids[env_ids] = state_ids
        self._last.task_ids = None
        reply = self._timed(Frame("reset_some", arrays=arrays), self.reset_timeout_s)
        if reply is None:
            return reset_result(self._replay_reset(), self.num_envs, restarted=True)
        return reset_result(reply, self.num_envs)

    def chunk_step(self, actions: Any, delays: Any = None) -> ChunkStepResult:
        """Step every env through ``actions`` ``[num_envs, chunk, action_dim]`` on the server; ``delays``
        (``[num_envs]`` sub-steps) for a server whose ``execution.delay`` is ``caller``."""
        self._check_running()
        actions = check_actions(actions, self.num_envs, self.action_dim, self.num_action_chunks)
        arrays = {"actions": actions}
        if delays is not None:
            arrays["delays"] = check_delays(delays, self.num_envs)
        reply = self._timed(Frame("step", arrays=arrays), self.step_timeout_s)
        if reply is None:
            return restarted_step(self._replay_reset(), self.num_envs, actions.shape[1], self._last.step_infos)
        result = step_result(reply)
        self._last.step_infos = {k: (v.dtype, v.shape[1:]) for k, v in result.infos.items()}
        return result

    def flush_video(self, subdir: str) -> list[str]:
        """Write the stage's video on the server; the paths are the server's."""
        if not self._running:
            return []
        return list(self._call(Frame("flush_video", {"subdir": subdir}), "videos", self.step_timeout_s + 120.0).get("paths"))

    def wait_video(self) -> None:
        """The server waits for its videos before it answers ``flush_video``."""

    def flush_dataset(self, meta: dict[str, Any] | None = None) -> dict[str, Any] | None:
        """None: a remote stage records on the server, where the config it serves sets ``train.record``."""
        return None

    # ------------------------------------------------------------------ results and reconnects
    def _timed(self, frame: Frame, deadline_s: float, restarted: bool = False) -> Frame | None:
        """Send a reset or a step; ``None`` when the connection broke and the stage was opened again."""
        self._check_running()
        t0 = time.perf_counter()
        try:
            reply = self._call(frame, "result", deadline_s + 30.0)
        except RemoteConnectionError as exc:
            if restarted or self._last.state_ids is None or self._conn.sock is not None:
                raise
            self._reconnect(exc)
            return None
        stats = reply.get("stats") or {}
        self.stats.calls += 1
        self.stats.wall_s += time.perf_counter() - t0
        sim_s = float(stats.get("sim_s", 0.0))
        self.stats.sim_s += max(sim_s - self._sim_s_seen, 0.0)
        self._sim_s_seen = sim_s
        for entry in reply.get("restart_log") or []:
            self.stats.restarts += 1
            self.stats.restart_log = [*self.stats.restart_log, {**entry, "n": self.stats.restarts}][-100:]
        return reply

    def _reconnect(self, cause: Exception) -> None:
        """Reach the server again within ``reconnect_s`` and open and start the stage anew."""
        deadline = time.monotonic() + self.reconnect_s
        last: Exception = cause
        while time.monotonic() < deadline:
            try:
                self._connect()
                reply = self._conn.ask(Frame("start"), "started", self.start_timeout_s + 30.0)
                self._supports_state = bool(reply.get("supports_state"))
                self._sim_s_seen = 0.0
                self.stats.restarts += 1
                entry = {"stage": self.stage_id, "shard": "server", "envs": [0, self.num_envs], "cause": f"connection lost: {cause}"}
                self.stats.restart_log = [*self.stats.restart_log, {**entry, "time": time.time(), "n": self.stats.restarts}][-100:]
                return
            except (RemoteConnectionError, RemoteRefusedError) as exc:
                if isinstance(exc, RemoteRefusedError) and exc.code != "busy":
                    raise
                last = exc
                time.sleep(0.2)
        raise RemoteConnectionError(f"envfleet server {self.address}: lost ({cause}) and not back within {self.reconnect_s:.0f} s: {last}")

    def _replay_reset(self) -> Frame:
        assert self._last.state_ids is not None
        arrays = {"state_ids": self._last.state_ids}
        if self._last.task_ids is not None:
            arrays["task_ids"] = self._last.task_ids
        reply = self._timed(Frame("reset", arrays=arrays), self.reset_timeout_s, restarted=True)
        assert reply is not None
        return reply

    def __repr__(self) -> str:
        return f"RemoteEnvManager({self.address!r}, backend={self.spec.name!r}, stage={self.stage_id}, rank={self.rank}, num_envs={self.num_envs}, running={self._running})"
