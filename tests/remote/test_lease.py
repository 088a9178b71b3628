"""Leases and takeover against a real ``envfleet serve``: a stopped client loses its stage within the lease,
a slow one keeps it, a token holder takes a stage from a holder it knows is dead, and the old holder is told."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from envfleet import ProcessEnvManager
from envfleet.remote import RemoteEnvManager, RemoteRefusedError, RemoteStageLostError

from ..conftest import stop_process
from .servetools import TOKEN, local_cfg, serve, wait_for
from .test_serve import _actions, assert_same_results, run_episode

LEASE = 2.0


@pytest.fixture(scope="module")
def reference() -> list:
    with ProcessEnvManager(local_cfg()) as mgr:
        return run_episode(mgr)


def _busy(address: str) -> bool:
    """Whether a second client is refused with ``busy`` (it would get the stage otherwise, and gives it back)."""
    try:
        RemoteEnvManager(address, token=TOKEN).close()
    except RemoteRefusedError as exc:
        assert exc.code == "busy", exc
        return True
    return False


def test_a_stopped_client_loses_its_stage_within_the_lease(tmp_path, reference, no_leaks) -> None:
    served = serve(tmp_path, args=["--lease-s", str(LEASE)])
    code = f"""
import sys, numpy as np
from envfleet.remote import RemoteEnvManager, RemoteStageLostError
m = RemoteEnvManager({served.address!r}, token={TOKEN!r})
m.start_simulator(); m.reset_envs_to_state_ids(np.arange(4))
print("ready", flush=True); sys.stdin.readline()
try:
    m.chunk_step(np.zeros((4, 4, 7), np.float32)); print("stepped", flush=True)
except RemoteStageLostError as exc:
    print("lost", exc.code, exc, flush=True)
"""
    client = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert client.stdout is not None and client.stdin is not None and client.stdout.readline().strip() == "ready"
        stop_process(client.pid)  # a trainer paused in a debugger: the kernel still answers for its socket
        stopped = time.time()
        assert _busy(served.address), "the stage is held while the lease runs"
        wait_for(lambda: "freed: no request for" in served.log(), 3 * LEASE, "the stopped client's stage freed")
        took = time.time() - stopped
        assert took < LEASE + 1.5, f"freed {took:.1f} s after the client stopped, lease {LEASE} s"
        with RemoteEnvManager(served.address, token=TOKEN) as again:  # the next client gets the stage, and fresh envs
            assert_same_results(run_episode(again), reference)
        client.send_signal(signal.SIGCONT)
        client.stdin.write("\n")
        client.stdin.flush()
        said = client.stdout.readline().strip()
        # "lease" when the server had freed the stage before the next client came; "taken" when the next
        # client came while the lapsed stage was being closed, and took it from the lapsed holder.
        assert said.startswith(("lost lease", "lost taken")) and f"lease of {LEASE:g} s" in said, said
        assert client.wait(30) == 0
    finally:
        client.send_signal(signal.SIGCONT)
        client.kill()
        served.stop()


def test_a_client_that_steps_slowly_keeps_its_stage_through_several_leases(tmp_path, reference, no_leaks) -> None:
    lease = 1.5
    served = serve(tmp_path, args=["--lease-s", str(lease)])
    try:
        with RemoteEnvManager(served.address, token=TOKEN) as mgr:
            assert mgr.lease_s == lease
            got = []
            ids = mgr.get_all_state_ids()
            got.append(mgr.reset_envs_to_state_ids(ids[[0, 5, 11, 29]]))
            for t in range(6):
                if t in (1, 3, 4):  # a long policy update between calls: 2 leases with nothing sent by the caller
                    time.sleep(2 * lease)
                    assert _busy(served.address), f"the stage was lost during the gap before step {t}"
                got.append(mgr.chunk_step(_actions(t)))
                if t == 2:
                    got.append(mgr.reset_some_envs(np.array([1, 3]), ids[[7, 20]]))
            assert mgr._keeper.pings >= 6, mgr._keeper.pings  # the keeper spoke for the idle caller
        assert_same_results(got, reference)
        assert "freed: no request for" not in served.log()
    finally:
        served.stop()


def test_a_token_holder_takes_a_stage_from_a_holder_it_knows_is_dead(tmp_path, reference, no_leaks) -> None:
    served = serve(tmp_path)  # the default lease (30 s): the old holder's lease still runs
    old = RemoteEnvManager(served.address, token=TOKEN)
    try:
        old.start_simulator()
        old.reset_envs_to_state_ids(np.arange(4))
        with pytest.raises(RemoteRefusedError, match=r"held by client 127\.0\.0\.1:\d+ .*take=true") as info:
            RemoteEnvManager(served.address, token=TOKEN)
        assert info.value.code == "busy"
        t0 = time.time()
        new = RemoteEnvManager(served.address, token=TOKEN, take=True)
        assert time.time() - t0 < 10
        assert new._conn.sock is not None
        host, port = new._conn.sock.getsockname()[:2]
        try:
            new.start_simulator()
            ids = new.get_all_state_ids()
            got = [new.reset_envs_to_state_ids(ids[[0, 5, 11, 29]])]
            # The old holder's next call is refused, naming who took the stage; it reaches no env:
            # the new holder's episode, stepped around it, stays bit-identical to an undisturbed one.
            for _ in range(2):
                with pytest.raises(RemoteStageLostError, match=f"taken by client {host}:{port}") as lost:
                    old.chunk_step(_actions(0))
                assert lost.value.code == "taken" and lost.value.taken_by == f"{host}:{port}"
            for t in range(6):
                got.append(new.chunk_step(_actions(t)))
                if t == 2:
                    got.append(new.reset_some_envs(np.array([1, 3]), ids[[7, 20]]))
            assert_same_results(got, reference)
        finally:
            new.close()
        assert "took stage ('train', 0, 0) from client" in served.log()
        wait_for(lambda: not served.shard_pids(), 20, "the stage freed after the new holder's bye")
    finally:
        old.close()
        served.stop()


def test_a_version_1_client_is_refused_in_its_own_framing(tmp_path) -> None:
    """A client of wire version 1 (no leases) cannot honour a lease: it is refused, in frames it can read."""
    import json
    import socket
    import struct

    from envfleet.remote.wire import VERSION, Frame, encode_frame

    served = serve(tmp_path)
    try:
        host, _, port = served.address.rpartition(":")
        with socket.create_connection((host, int(port)), timeout=10) as sock:
            sock.sendall(b"".join(bytes(p) for p in encode_frame(Frame("hello", {"token": TOKEN}), version=1)))
            prefix = sock.recv(16, socket.MSG_WAITALL)
            magic, version, _, header_len, payload_len = struct.unpack("!4sHHII", prefix)
            assert magic == b"EFRM" and version == 1 and payload_len == 0
            header = json.loads(sock.recv(header_len, socket.MSG_WAITALL))
        assert header["type"] == "error" and header["code"] == "version" and header["fatal"]
        assert "wire version 1" in header["message"] and f"version {VERSION}" in header["message"], header
        assert header["server_version"] == VERSION
    finally:
        served.stop()
