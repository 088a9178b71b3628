"""A property-based fuzzer of the wire's header grammar (hypothesis) against a real ``envfleet serve``.

``test_fuzz.py`` mutates valid frames; this one writes headers from the grammar up: every
message type (and strings that are not one) with fields of every JSON type where each field
is expected (strings for numbers, floats and bools for ints, huge integers, nesting), array
entries with real and hostile dtypes and shapes, and texts no JSON encoder writes: a key twice,
``NaN``, integers past the parser's digit limit, nesting past its recursion limit, lone
surrogates, a BOM, trailing bytes. Each is sent on a connection in one of the session's states
(no hello yet, welcomed, a stage open, started, reset, stopped), and every message type is sent
once, well formed, in every state.

The server must answer every frame within the deadline with a reply or an ``error`` of a
documented code (or close the connection after a fatal one), never log an internal error,
and afterwards serve a well-behaved client bit-identical results. The budget is fixed:
derandomized, :data:`EXAMPLES` examples, no example database.
"""

from __future__ import annotations

import json
import os
import socket
import struct
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from envfleet import ProcessEnvManager
from envfleet.remote import RemoteEnvManager
from envfleet.remote.wire import DTYPES, MAGIC, VERSION, Frame, FrameLimits, encode_frame, read_frame

from .servetools import TOKEN, Served, local_cfg, serve, wait_for
from .test_crash import _rss_kb
from .test_serve import assert_same_results, run_episode

EXAMPLES = 300
STAGES = "rollout.pipeline_stage_num=2"
TYPES = (
    "hello",
    "open",
    "start",
    "stop",
    "state_ids",
    "reset",
    "reset_some",
    "step",
    "renderer_info",
    "protocol",
    "flush_video",
    "ping",
    "bye",
)
STATES = ("fresh", "welcomed", "opened", "started", "reset", "stopped")
FIELDS = ("token", "client", "wire_version", "mode", "stage_id", "rank", "take", "subdir")
ARRAYS = ("actions", "state_ids", "task_ids", "env_ids")
CODES = {
    "auth",
    "version",
    "frame",
    "truncated",
    "busy",
    "header",
    "array",
    "type",
    "input",
    "state",
    "simulator",
    "restart_limit",
    "error",
}
REPLY_WAIT_S = 30.0

#: What the server answered, by the state the frame was sent in: {state: Counter(answer)}.
ANSWERS: dict[str, Counter[str]] = {state: Counter() for state in STATES}


# ---------------------------------------------------------------------- the grammar
def _json_values() -> st.SearchStrategy[object]:
    scalars = st.one_of(
        st.none(),
        st.booleans(),
        st.integers(-(2**70), 2**70),
        st.sampled_from([0, 1, -1, 2**31, 2**63, -(2**63) - 1, 10**300]),
        st.floats(allow_nan=False, allow_infinity=False),  # NaN and Infinity: see _textual
        st.text(max_size=12),
        st.sampled_from(["0", "1", "train", "val", TOKEN, "../../etc", "a/b", ".hidden", ""]),
    )
    return st.recursive(
        scalars, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4), max_leaves=12
    )


#: The arrays each message reads, with a dtype and shape that pass the wire's checks.
EXPECTED = {
    "step": [("actions", "float32", [4, 4, 7])],
    "reset": [("state_ids", "int64", [4]), ("task_ids", "int64", [4])],
    "reset_some": [("env_ids", "int64", [2]), ("state_ids", "int64", [2]), ("task_ids", "int64", [2])],
}


def _values(draw: st.DrawFn, dtype: str, shape: list[int]) -> bytes:
    """Bytes of an array: any bits (NaNs, huge ids, negative env ids), or small numbers that may be valid."""
    n = int(np.prod(shape, dtype=np.int64))
    if draw(st.booleans()):
        return draw(st.binary(min_size=n * DTYPES[dtype].itemsize, max_size=n * DTYPES[dtype].itemsize))
    return np.array(draw(st.lists(st.integers(-1, 40), min_size=n, max_size=n))).astype(DTYPES[dtype]).tobytes()


@st.composite
def _arrays(draw: st.DrawFn, kind: str) -> tuple[list[object], bytes]:
    """The ``arrays`` entry and the payload: the message's own arrays (through to its handler), others, or hostile entries."""
    specs: list[object] = []
    payload = b""
    if kind in EXPECTED and draw(st.integers(0, 2)) > 0:
        for name, dtype, shape in EXPECTED[kind][: draw(st.integers(1, len(EXPECTED[kind])))]:
            specs.append([name, dtype, shape])
            payload += _values(draw, dtype, shape)
        return specs, payload
    for _ in range(draw(st.integers(0, 3))):
        name = draw(st.sampled_from(ARRAYS) | st.text(max_size=6))
        if draw(st.booleans()):
            dtype = draw(st.sampled_from(sorted(DTYPES)))
            shape = draw(st.sampled_from([[4, 4, 7], [4], [2], [4, 4, 6], [0, 4, 7], [1]]) | st.lists(st.integers(0, 5), max_size=4))
            specs.append([name, dtype, shape])
            payload += _values(draw, dtype, shape)
        else:
            dtype_s = draw(st.sampled_from(["object", "float128", "<f4", ">i8", "", "U8", "complex64"]) | _json_values())
            shape_s = draw(st.lists(_json_values(), max_size=9) | _json_values() | st.just([2**31, 2**31]) | st.just([-1]))
            specs.append(draw(st.sampled_from([[name, dtype_s, shape_s], [name, dtype_s], [name], name, [name, dtype_s, shape_s, 0]])))
    if payload and draw(st.integers(0, 9)) == 0:
        payload = payload[:-1]  # a payload one byte short of its arrays
    return specs, payload


def _textual(text: str, draw: st.DrawFn) -> str:
    """What no JSON encoder writes, spliced into the header's text."""
    body = text[1:]  # past the opening brace
    kind = draw(
        st.sampled_from(
            ["as is"] * 20 + ["dup-first", "dup-last", "deep", "digits", "nan", "surrogate", "bom", "trailing", "number", "empty"]
        )
    )
    if kind == "as is":
        return text
    if kind == "dup-first":
        return '{"type":' + json.dumps(draw(st.sampled_from(TYPES))) + "," + body
    if kind == "dup-last":
        return text[:-1] + ',"type":' + json.dumps(draw(st.sampled_from(TYPES))) + "}"
    if kind == "deep":
        depth = draw(st.sampled_from([200, 999, 1001, 3000, 20000]))
        return '{"deep":' + "[" * depth + "]" * depth + "," + body
    if kind == "digits":
        return '{"stage_id":' + "9" * draw(st.sampled_from([19, 400, 4300, 4301, 20000])) + "," + body
    if kind == "nan":
        return '{"rank":' + draw(st.sampled_from(["NaN", "Infinity", "-Infinity"])) + "," + body
    if kind == "surrogate":
        return '{"token":"\\ud800","mode":"\\udfff",' + body
    if kind == "bom":
        return "\ufeff" + text
    if kind == "trailing":
        return text + draw(st.sampled_from([" ", "x", "{}", "\x00"]))
    if kind == "number":
        return '{"stage_id":' + draw(st.sampled_from(["1e5", "-0", "1.0", "0x10", "01", "1E400", "-1e-400"])) + "," + body
    return '{"type":null,' + body


@st.composite
def hostile_frames(draw: st.DrawFn) -> bytes:
    """One frame: a valid prefix, a header from the grammar (or just off it), a payload."""
    kind = draw(st.sampled_from(TYPES) | st.text(max_size=10) | st.sampled_from(["step\x00", "STEP", " open", "hello" * 20]))
    fields = draw(st.dictionaries(st.sampled_from(FIELDS) | st.text(max_size=8), _json_values(), max_size=5))
    if kind == "hello" and draw(st.booleans()):
        fields["token"] = TOKEN  # a hello that authenticates, so what follows it runs welcomed
    fields.pop("type", None)
    fields.pop("arrays", None)
    specs, payload = draw(_arrays(kind))
    text = json.dumps({"type": kind, **fields, "arrays": specs}, allow_nan=True)
    header = _textual(text, draw).encode("utf-8", "surrogatepass")
    return struct.pack("!4sHHII", MAGIC, VERSION, 0, len(header), len(payload)) + header + payload


# ---------------------------------------------------------------------- connections in each state
def _bytes(frame: Frame) -> bytes:
    return b"".join(bytes(p) for p in encode_frame(frame))


@dataclass
class _Conn:
    sock: socket.socket
    state: str
    rank: int | None = None
    was_reset: bool = False


class _Pool:
    """Live connections, each in a known state; one is built (hello, open, start, ...) when none is in the state asked for."""

    def __init__(self, served: Served) -> None:
        host, _, port = served.address.rpartition(":")
        self.addr = (host, int(port))
        self.live: list[_Conn] = []
        self._next_rank = 0
        self.built = 0

    def _ask(self, conn: _Conn, frame: Frame) -> Frame:
        conn.sock.sendall(_bytes(frame))
        reply = read_frame(conn.sock, FrameLimits(), REPLY_WAIT_S)
        assert reply.type != "error" or reply.get("code") == "busy", (conn.state, frame.type, reply.fields)
        return reply

    def _open(self, conn: _Conn) -> None:
        """Open stage 1 at a rank no live connection holds, in rotation (a closed one's stage takes a moment to free);
        a rank that a fuzzed ``open`` took meanwhile answers ``busy``: the next one, then."""
        for _ in range(60):
            self._next_rank = self._next_rank % 60 + 1
            if self._next_rank in {c.rank for c in self.live}:
                continue
            if self._ask(conn, Frame("open", {"stage_id": 1, "rank": self._next_rank})).type == "opened":
                conn.rank = self._next_rank
                return
        raise AssertionError("no free rank of stage 1")

    def _keep(self, conn: _Conn) -> None:
        if conn not in self.live:
            self.live.append(conn)
        while len(self.live) > 8:  # stay well inside --max-connections
            self.retire(self.live[0])

    def get(self, state: str) -> _Conn:
        for conn in self.live:
            if conn.state == state:
                return conn
        self.built += 1
        conn = _Conn(socket.create_connection(self.addr, timeout=REPLY_WAIT_S), "fresh")
        if state == "fresh":
            return conn  # used once: its first frame decides what it becomes
        self._ask(conn, Frame("hello", {"token": TOKEN}))
        if state != "welcomed":
            self._open(conn)
        if state in ("started", "reset", "stopped"):
            self._ask(conn, Frame("start"))
        if state in ("reset", "stopped"):
            self._ask(conn, Frame("reset", arrays={"state_ids": np.arange(4, dtype=np.int64)}))
            conn.was_reset = True
        if state == "stopped":
            self._ask(conn, Frame("stop"))
        conn.state = state
        self._keep(conn)
        return conn

    def retire(self, conn: _Conn) -> None:
        if conn in self.live:
            self.live.remove(conn)
        conn.sock.close()

    def send(self, conn: _Conn, data: bytes) -> str:
        """Send one frame and read the answer: the reply's type, ``error:<code>``, or ``closed``; moves ``conn``'s state."""
        start = conn.state
        try:
            conn.sock.sendall(data)
            reply = read_frame(conn.sock, FrameLimits(), REPLY_WAIT_S)
        except TimeoutError:
            raise AssertionError(f"no answer within {REPLY_WAIT_S} s in state {start}: {data[16:200]!r}") from None
        except (EOFError, ConnectionError):
            self.retire(conn)
            return "closed"
        if reply.type == "error":
            code, fatal = reply.get("code"), reply.get("fatal")
            assert code in CODES and isinstance(reply.get("message"), str) and isinstance(fatal, bool), reply.fields
            if fatal:
                self.retire(conn)
            return f"error:{code}"
        moves = {"welcome": "welcomed", "opened": "opened", "stopped": "stopped", "result": "reset"}
        if reply.type == "started":
            conn.state = "reset" if conn.was_reset else "started"
        elif reply.type in moves:
            conn.state = moves[reply.type]
            conn.was_reset = conn.was_reset or reply.type == "result"
            if reply.type == "opened" and conn.rank is None:
                conn.rank = -1  # a stage the fuzzer opened: counts against the pool's bound
        if reply.type == "bye":
            self.retire(conn)
        elif conn.state != start:
            self._keep(conn)
        return reply.type

    def close(self) -> None:
        for conn in list(self.live):
            self.retire(conn)


@pytest.fixture(scope="module")
def fuzzed() -> Iterator[tuple[Served, _Pool]]:
    import tempfile
    from pathlib import Path

    served = serve(Path(tempfile.mkdtemp(prefix="envfleet-fuzz-grammar-")), STAGES)
    pool = _Pool(served)
    try:
        yield served, pool
    finally:
        pool.close()
        assert served.stop() == 0


# ---------------------------------------------------------------------- the tests (in this order)
def test_every_message_type_in_every_state(fuzzed) -> None:
    _, pool = fuzzed
    well_formed = {
        "hello": Frame("hello", {"token": TOKEN}),
        "open": Frame("open", {"stage_id": 1, "rank": 61}),
        "reset": Frame("reset", arrays={"state_ids": np.arange(4, dtype=np.int64)}),
        "reset_some": Frame("reset_some", arrays={"env_ids": np.array([1], np.int64), "state_ids": np.array([3], np.int64)}),
        "step": Frame("step", arrays={"actions": np.zeros((4, 4, 7), np.float32)}),
        "flush_video": Frame("flush_video", {"subdir": "fuzz"}),
    }
    for state in STATES:
        for kind in TYPES:
            conn = pool.get(state)
            answer = pool.send(conn, _bytes(well_formed.get(kind, Frame(kind))))
            ANSWERS[state][answer] += 1
            if conn.rank == -1:  # the open above: give rank 61 back at once
                pool.retire(conn)
    assert ANSWERS["fresh"]["welcome"] == 1 and ANSWERS["fresh"]["error:auth"] == len(TYPES) - 1
    assert ANSWERS["reset"]["result"] >= 3  # reset, reset_some and step went through where they should


@settings(
    max_examples=EXAMPLES,
    derandomize=True,
    database=None,
    deadline=None,
    phases=[Phase.explicit, Phase.generate, Phase.shrink],
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.function_scoped_fixture],
)
@given(state=st.sampled_from(STATES), frames=st.lists(hostile_frames(), min_size=1, max_size=3))
def test_hostile_headers_in_every_state(fuzzed, state: str, frames: list[bytes]) -> None:
    served, pool = fuzzed
    conn = pool.get(state)
    for data in frames:
        at = conn.state
        ANSWERS[at][pool.send(conn, data)] += 1
        if conn.sock.fileno() == -1:  # closed: by the server after a fatal error or a bye
            break
    assert served.proc.poll() is None, "the server died"


def test_after_the_fuzzing_the_server_serves_bit_identical_results(fuzzed) -> None:
    served, pool = fuzzed
    pool.close()
    rss0 = _rss_kb(served.proc.pid)
    with ProcessEnvManager(local_cfg(STAGES)) as ref:
        want = run_episode(ref)
    with RemoteEnvManager(served.address, token=TOKEN, stage_id=0) as mgr:
        assert_same_results(run_episode(mgr), want)
    log = served.log()
    assert "internal error" not in log and "Traceback" not in log, log[-4000:]
    wait_for(lambda: len(os.listdir(f"/proc/{served.proc.pid}/fd")) < 64, 10, "the fuzzed connections' descriptors closed")
    frames = sum(sum(c.values()) for c in ANSWERS.values())
    print(f"\nfuzz grammar: {frames} frames, {pool.built} connections built; rss {rss0 // 1024} MB")
    for state, answers in ANSWERS.items():
        print(f"  {state}: {dict(sorted(answers.items(), key=lambda kv: -kv[1]))}")
    assert frames >= EXAMPLES
