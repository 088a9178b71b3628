"""The budget for strangers: half-open connections cannot keep a token holder out of a real ``envfleet serve``,
and what is dropped is logged with the peer's address, rate-limited. The budget and the log alone, below."""

from __future__ import annotations

import logging
import socket
import time

import numpy as np
import pytest

from envfleet.remote import RemoteEnvManager
from envfleet.remote.admission import RateLimitedLog, StrangerBudget

from .servetools import TOKEN, serve, wait_for

CROWD = 50


def _half_open(address: str, n: int) -> list[socket.socket]:
    """``n`` connections that each send two bytes of a prefix and then nothing."""
    host, _, port = address.rpartition(":")
    socks = []
    for _ in range(n):
        sock = socket.create_connection((host, int(port)), timeout=10)
        sock.sendall(b"EF")
        socks.append(sock)
    return socks


def test_fifty_half_open_connections_do_not_keep_a_token_holder_out(tmp_path, no_leaks) -> None:
    served = serve(tmp_path)  # the defaults: 16 connections, 8 of them unauthenticated, 5 s to authenticate
    crowds: list[list[socket.socket]] = []
    try:
        waits = []
        for _ in range(2):  # a stranger who opens the crowd again, as one who reopens it every few seconds would
            crowds.append(_half_open(served.address, CROWD))
            t0 = time.time()
            with RemoteEnvManager(served.address, token=TOKEN) as mgr:
                waits.append(time.time() - t0)
                mgr.reset_envs_to_state_ids(np.arange(4))
                mgr.chunk_step(np.zeros((4, 4, 7), np.float32))
                # More strangers while the holder holds its stage: they drop each other, never the holder.
                crowds.append(_half_open(served.address, CROWD))
                mgr.chunk_step(np.zeros((4, 4, 7), np.float32))
        assert max(waits) < 3.0, f"the token holder waited {waits} s behind {CROWD} half-open connections"
        log = served.log()
        drops = [line for line in log.splitlines() if "dropped before authentication" in line]
        assert drops and all("client 127.0.0.1:" in line and "were full when 127.0.0.1:" in line for line in drops), drops[:3]
        assert len(drops) < 3 * (CROWD - 8), "the drops were logged one line each: not rate-limited"
        wait_for(lambda: "more such lines left out" in served.log(), 15, "a line saying how many drops were left out")
        print(f"strangers: token holder in after {', '.join(f'{w * 1000:.0f} ms' for w in waits)}; {len(drops)} drop lines logged")
    finally:
        for crowd in crowds:
            for sock in crowd:
                sock.close()
        served.stop()


def test_the_oldest_stranger_gives_way_and_members_are_never_dropped() -> None:
    budget = StrangerBudget(max_connections=4, max_strangers=2)
    assert budget.arrive("a", 0.0) == (True, None, 0.0)
    assert budget.arrive("b", 1.0) == (True, None, 0.0)
    assert budget.arrive("c", 3.0) == (True, "a", 3.0)  # the strangers' cap: the oldest goes, not the newcomer
    assert budget.authenticated("c") and not budget.authenticated("a")  # a dropped one cannot come in after all
    assert budget.arrive("d", 4.0) == (True, None, 0.0)
    assert budget.authenticated("b") and budget.authenticated("d")
    assert budget.arrive("e", 5.0) == (True, None, 0.0)  # the fourth slot
    assert budget.arrive("f", 6.0) == (True, "e", 1.0)  # the total: a stranger gives way
    assert budget.authenticated("f")
    assert budget.arrive("g", 7.0) == (False, None, 0.0)  # every slot authenticated: the newcomer is turned away
    budget.leave("b")
    assert budget.arrive("g", 8.0) == (True, None, 0.0) and budget.strangers == 1
    with pytest.raises(ValueError, match="below the total"):
        StrangerBudget(max_connections=4, max_strangers=4)


def test_the_strangers_log_is_rate_limited_and_says_what_it_left_out(caplog) -> None:
    log = RateLimitedLog(logging.getLogger("test.strangers"), burst=3, per_s=10.0)
    with caplog.at_level(logging.WARNING, "test.strangers"):
        for i in range(20):
            log.warning("client %s: dropped", i)
        assert [r.getMessage() for r in caplog.records] == ["client 0: dropped", "client 1: dropped", "client 2: dropped"]
        time.sleep(0.15)
        log.warning("client %s: dropped", 20)
    assert caplog.records[-1].getMessage() == "client 20: dropped (17 more such lines left out before this one: over 10 a second)"
