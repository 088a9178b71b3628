"""Over 1,000 malformed or mutated frames, before and after authentication, beside a well-behaved client.

The server must answer each with an error (or close the connection), never crash or hang,
and the well-behaved client, served at the same time, must get bit-identical results to a
run without the fuzzing.
"""

from __future__ import annotations

import json
import os
import socket
import struct
import threading
import time

import numpy as np

from envfleet import ProcessEnvManager
from envfleet.remote import RemoteEnvManager
from envfleet.remote.wire import MAGIC, VERSION, Frame, FrameLimits, encode_frame, read_frame

from .servetools import TOKEN, local_cfg, serve, wait_for
from .test_crash import _rss_kb
from .test_serve import assert_same_results, run_episode

STAGES = "rollout.pipeline_stage_num=2"
PRE_AUTH = 500
POST_AUTH = 700


def _bytes(frame: Frame, version: int = VERSION) -> bytes:
    return b"".join(bytes(p) for p in encode_frame(frame, version))


def _prefix(header: bytes, payload: bytes = b"", version: int = VERSION, magic: bytes = MAGIC, reserved: int = 0) -> bytes:
    return struct.pack("!4sHHII", magic, version, reserved, len(header), len(payload)) + header + payload


def _mutants(rng: np.random.Generator, valid: list[bytes]) -> list[bytes]:
    """Frames broken every way the wire can be: bit flips, cuts, bad lengths, versions, headers, arrays."""
    out: list[bytes] = []
    base = valid[int(rng.integers(len(valid)))]
    flipped = bytearray(base)
    for _ in range(int(rng.integers(1, 6))):
        flipped[int(rng.integers(len(flipped)))] ^= 1 << int(rng.integers(8))
    out.append(bytes(flipped))
    out.append(base[: int(rng.integers(1, len(base)))])  # truncated
    out.append(bytes(rng.integers(0, 256, int(rng.integers(1, 64)), dtype=np.uint8)))  # noise
    out.append(_prefix(b"{}", version=int(rng.integers(2, 65535))))  # newer version
    out.append(_prefix(b"x" * 8, magic=b"HTTP"))
    out.append(_prefix(b"{}", reserved=1))
    out.append(struct.pack("!4sHHII", MAGIC, VERSION, 0, 1 << 31, 0))  # a header over every limit
    out.append(struct.pack("!4sHHII", MAGIC, VERSION, 0, 2, 1 << 31) + b"{}")  # a payload over every limit
    for header in (b"not json", b"[1,2]", b'{"type": 5}', b'{"type": ""}', b"\xff\xfe", b'{"type":"step","arrays":7}'):
        out.append(_prefix(header))
    specs = [
        [["actions", "float32", [4, 4, 7]]],
        [["actions", "object", [4]]],
        [["actions", "float32", [-1, 4]]],
        [["actions", "float32", [4, 4, 7, 1, 1, 1, 1, 1, 1]]],
        [["actions", "float32", [1 << 30, 1 << 30]]],
        [["a", "uint8", [3]], ["a", "uint8", [3]]],
        [["actions", "float32", "4x4"]],
        "nonsense",
    ]
    spec = specs[int(rng.integers(len(specs)))]
    payload = bytes(int(rng.integers(0, 600)))
    out.append(_prefix(json.dumps({"type": "step", "arrays": spec}).encode(), payload))
    return out


def _semantic(rng: np.random.Generator) -> list[Frame]:
    """Well-formed frames with wrong contents: each must be an error reply, and the connection goes on."""
    nan = np.zeros((4, 4, 7), np.float32)
    nan[1, 2, 3] = np.nan
    return [
        Frame("step", arrays={"actions": nan}),
        Frame("step", arrays={"actions": np.zeros((4, 4, 6), np.float32)}),
        Frame("step", arrays={"actions": np.zeros((3, 4, 7), np.float32)}),
        Frame("step", arrays={"actions": np.zeros((4, 4, 7), np.float64)}),
        Frame("step", arrays={"actions": np.zeros((4, 4, 7), np.int32)}),
        Frame("step", arrays={"actions": np.full((4, 4, 7), np.inf, np.float32)}),
        Frame("step"),
        Frame("reset", arrays={"state_ids": np.array([1, 2], np.int64)}),
        Frame("reset", arrays={"state_ids": np.array([1, 2, 3, 10**9], np.int64)}),
        Frame("reset", arrays={"state_ids": np.arange(4, dtype=np.int32)}),
        Frame("reset_some", arrays={"env_ids": np.array([9], np.int64), "state_ids": np.array([1], np.int64)}),
        Frame("open", {"stage_id": 0}),
        Frame("flush_video", {"subdir": "../../etc"}),
        Frame(f"unknown_{int(rng.integers(1000))}"),
        Frame("hello", {"token": TOKEN}),
    ]


def _talk(address: str, data: bytes, hello: bytes | None = None) -> str:
    """Send ``data`` (after ``hello``), half-close, and read what comes back: an error frame's code, or 'closed'."""
    host, _, port = address.rpartition(":")
    with socket.create_connection((host, int(port)), timeout=20) as sock:
        if hello is not None:
            sock.sendall(hello)
            read_frame(sock, FrameLimits(), 20)
        try:
            sock.sendall(data)
            sock.shutdown(socket.SHUT_WR)
        except OSError:
            return "closed"
        try:
            reply = read_frame(sock, FrameLimits(), 20)
        except (EOFError, ConnectionError):
            return "closed"
        return str(reply.get("code") or reply.type)


def test_fuzzed_frames_leave_the_server_serving_bit_identical_results(tmp_path, no_leaks) -> None:
    with ProcessEnvManager(local_cfg(STAGES)) as ref:
        want = run_episode(ref)
    served = serve(tmp_path, STAGES)
    rng = np.random.default_rng(38)
    hello = _bytes(Frame("hello", {"token": TOKEN}))
    valid = [hello, _bytes(Frame("step", arrays={"actions": np.zeros((4, 4, 7), np.float32)})), _bytes(Frame("open", {"stage_id": 1}))]
    got: dict[str, object] = {}

    def well_behaved() -> None:
        try:
            with RemoteEnvManager(served.address, token=TOKEN, stage_id=0) as mgr:
                results = []
                for _ in range(3):  # the episode three times over, spread over the fuzzing
                    results = run_episode(mgr)
                    time.sleep(1.0)
                got["results"] = results
        except BaseException as exc:  # reported by the main thread
            got["error"] = exc

    client = threading.Thread(target=well_behaved)
    client.start()
    rss0, fds0 = _rss_kb(served.proc.pid), len(os.listdir(f"/proc/{served.proc.pid}/fd"))
    answers: dict[str, int] = {}
    sent = 0
    try:
        # Before authentication: every frame on a fresh connection, in place of the hello.
        while sent < PRE_AUTH:
            for data in _mutants(rng, valid):
                code = _talk(served.address, data)
                answers[code] = answers.get(code, 0) + 1
                sent += 1
        assert set(answers) <= {"auth", "version", "closed"}, answers
        assert answers.get("auth", 0) > PRE_AUTH // 2
        # After authentication, on one connection holding stage 1: semantic errors keep it open.
        host, _, port = served.address.rpartition(":")
        post = 0
        with socket.create_connection((host, int(port)), timeout=30) as sock:
            for frame in (Frame("hello", {"token": TOKEN}), Frame("open", {"stage_id": 1}), Frame("start")):
                sock.sendall(_bytes(frame))
                assert read_frame(sock, FrameLimits(), 30).type in ("welcome", "opened", "started")
            sock.sendall(_bytes(Frame("reset", arrays={"state_ids": np.arange(4, dtype=np.int64)})))
            assert read_frame(sock, FrameLimits(), 30).type == "result"
            while post < POST_AUTH - 200:
                for frame in _semantic(rng):
                    sock.sendall(_bytes(frame))
                    reply = read_frame(sock, FrameLimits(), 30)
                    assert reply.type == "error" and not reply.get("fatal"), (frame.type, reply.fields)
                    post += 1
            sock.sendall(_bytes(Frame("step", arrays={"actions": np.zeros((4, 4, 7), np.float32)})))
            assert read_frame(sock, FrameLimits(), 30).type == "result", "the fuzzed session still steps"
        # Frames that break the stream, each on a connection of its own after a good hello.
        for _ in range(20):
            for data in _mutants(rng, valid)[:10]:
                code = _talk(served.address, data, hello=hello)
                answers[f"after-auth:{code}"] = answers.get(f"after-auth:{code}", 0) + 1
                post += 1
        client.join(120)
        assert not client.is_alive(), "the well-behaved client hung"
        assert "error" not in got, got.get("error")
        assert_same_results(got["results"], want)  # type: ignore[arg-type]
        assert served.proc.poll() is None, "the server died"
        assert sent + post >= 1000
        grew_mb = (_rss_kb(served.proc.pid) - rss0) / 1024
        assert grew_mb < 30, f"the server grew {grew_mb:.0f} MB under the fuzzing"
        # Over a thousand connections came and went: none of their descriptors may stay (the
        # few allowed are opened once, with the first stage: the janitor's pipe, the tracker's).
        wait_for(lambda: len(os.listdir(f"/proc/{served.proc.pid}/fd")) <= fds0 + 4, 10, f"descriptors back near {fds0}")
        print(f"fuzz: {sent} frames before authentication, {post} after; answers {answers}")
    finally:
        client.join(60)
        assert served.stop() == 0
