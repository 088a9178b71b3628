"""The server killed mid-chunk, stalled, restarted, and a client that stops reading: each bounded in time, nothing leaked."""

from __future__ import annotations

import signal
import socket
import threading
import time

import numpy as np
import pytest

from envfleet import ProcessEnvManager
from envfleet.remote import RemoteConnectionError, RemoteEnvManager
from envfleet.remote.wire import Frame, FrameLimits, read_frame, write_frame

from ..conftest import stop_process
from .servetools import TOKEN, local_cfg, serve, wait_for


def _actions(n: int = 4, chunk: int = 4) -> np.ndarray:
    return np.random.default_rng(3).uniform(-1, 1, (n, chunk, 7)).astype(np.float32)


def _gone(served) -> bool:
    return not served.shard_pids() and not served.segments()


def test_server_killed_mid_chunk_fails_the_call_in_bounded_time(tmp_path, no_leaks) -> None:
    served = serve(tmp_path, "train.toy.step_sleep_s=2")
    shards = served.shard_pids
    mgr = RemoteEnvManager(served.address, token=TOKEN, reconnect_s=3, connect_timeout_s=2)
    try:
        mgr.start_simulator()
        mgr.reset_envs_to_state_ids(np.arange(4))
        pids = shards()
        assert len(pids) == 2
        killer = threading.Timer(0.7, served.proc.send_signal, (signal.SIGKILL,))
        killer.start()
        t0 = time.time()
        with pytest.raises(RemoteConnectionError, match="not back within 3 s"):
            mgr.chunk_step(_actions())
        assert time.time() - t0 < 10
        # The shards notice their server is gone and exit; the janitor unlinks its segments.
        from ..conftest import pid_alive

        wait_for(lambda: not any(pid_alive(p) for p in pids) and not served.segments(), 30, "the dead server's shards and segments")
    finally:
        mgr.close()
        served.stop()


def test_stalled_server_trips_the_client_deadline(tmp_path, no_leaks) -> None:
    served = serve(tmp_path)
    mgr = RemoteEnvManager(served.address, token=TOKEN, timeout_s=2, reconnect_s=2, connect_timeout_s=1)
    try:
        mgr.start_simulator()
        mgr.reset_envs_to_state_ids(np.arange(4))
        stop_process(served.proc.pid)  # every thread stopped, not only the signal queued
        t0 = time.time()
        with pytest.raises(RemoteConnectionError):
            mgr.chunk_step(_actions())
        assert time.time() - t0 < 8, "the deadline (2 s) plus the reconnect window (2 s) bound the call"
    finally:
        served.proc.send_signal(signal.SIGCONT)
        mgr.close()
        served.stop()


def test_restarted_server_reconnects_and_reports_sim_restarted(tmp_path, no_leaks) -> None:
    served = serve(tmp_path)
    mgr = RemoteEnvManager(served.address, token=TOKEN, reconnect_s=60)
    ids = np.array([3, 8, 14, 27])
    try:
        mgr.start_simulator()
        mgr.reset_envs_to_state_ids(ids)
        first = mgr.chunk_step(_actions())
        assert not first.infos["sim_restarted"].any()
        assert served.stop() == 0
        served = serve(tmp_path, port=served.port)
        out = mgr.chunk_step(_actions())
        assert out.infos["sim_restarted"].all()
        assert out.truncations[:, -1].all() and not out.truncations[:, :-1].any() and not out.terminations.any()
        assert not out.rewards.any()
        assert set(out.infos) >= set(first.infos)
        with ProcessEnvManager(local_cfg()) as ref:  # the envs are back at their last reset's states
            fresh = ref.reset_envs_to_state_ids(ids)
        for key in fresh.obs:
            np.testing.assert_array_equal(out.obs[key], fresh.obs[key], err_msg=key)
        assert mgr.stats.restarts == 1 and "connection lost" in mgr.stats.restart_log[-1]["cause"]
        again = mgr.chunk_step(_actions())  # and the stage goes on on the new server
        assert not again.infos["sim_restarted"].any()
    finally:
        mgr.close()
        served.stop()


def _rss_kb(pid: int) -> int:
    with open(f"/proc/{pid}/status") as fh:
        return next(int(line.split()[1]) for line in fh if line.startswith("VmRSS"))


def test_a_client_that_stops_reading_cannot_grow_the_server(tmp_path, no_leaks) -> None:
    big = ("train.init_params.camera_heights=128", "train.init_params.camera_widths=128")
    served = serve(tmp_path, *big, args=["--send-timeout-s", "3"])
    host, _, port = served.address.rpartition(":")
    sock = socket.create_connection((host, int(port)), timeout=30)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
    try:
        for frame in (Frame("hello", {"token": TOKEN}), Frame("open", {}), Frame("start")):
            write_frame(sock, frame)
            assert read_frame(sock, FrameLimits()).type != "error"
        write_frame(sock, Frame("reset", arrays={"state_ids": np.arange(4, dtype=np.int64)}))
        assert read_frame(sock, FrameLimits()).type == "result"
        rss0 = _rss_kb(served.proc.pid)
        step = Frame("step", arrays={"actions": np.zeros((4, 4, 7), np.float32)})
        sent = 0
        sock.settimeout(0.5)
        try:
            for _ in range(400):  # 400 replies of 393 kB each, were they all kept: 157 MB
                write_frame(sock, step)
                sent += 1
        except (TimeoutError, OSError):
            pass  # the server stopped reading: it is blocked on the reply we do not take
        took = wait_for(lambda: not served.shard_pids(), 30, "the server drops the stalled client and frees its stage")
        assert took < 15
        grew_mb = (_rss_kb(served.proc.pid) - rss0) / 1024
        assert grew_mb < 40, f"the server grew {grew_mb:.0f} MB for a client that stopped reading"
        assert "connection ended" in served.log() or "timed out" in served.log()
    finally:
        sock.close()
        served.stop()
