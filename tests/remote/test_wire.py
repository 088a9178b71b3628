"""The frame codec alone: every dtype round-trips bit for bit, and each broken rule is named."""

from __future__ import annotations

import socket
import struct
import threading

import numpy as np
import pytest

from envfleet.remote.wire import DTYPES, MAGIC, VERSION, Frame, FrameLimits, WireError, decode, encode_frame, read_frame, write_frame
from envfleet.shards.recycling import RecyclingPool


def _pair() -> tuple[socket.socket, socket.socket]:
    a, b = socket.socketpair()
    return a, b


def test_every_dtype_round_trips_bit_for_bit() -> None:
    rng = np.random.default_rng(0)
    arrays = {name: rng.integers(0, 255, (3, 2, 5), dtype=np.uint8).view(np.uint8).astype(name) for name in DTYPES}
    arrays["float32"][0, 0, 0] = np.nan  # the codec carries bytes; NaN is a field check, not a wire one
    arrays["empty"] = np.zeros((0, 4), np.int64)
    a, b = _pair()
    with a, b:
        write_frame(a, Frame("result", {"task_descriptions": ["é", "x"]}, arrays))
        got = read_frame(b, FrameLimits(), 5)
    assert got.type == "result" and got.get("task_descriptions") == ["é", "x"]
    for name, value in arrays.items():
        assert got.arrays[name].dtype == value.dtype and got.arrays[name].shape == value.shape
        assert got.arrays[name].tobytes() == value.tobytes(), name
    got.arrays["uint8"][0, 0, 0] = 1  # the caller owns what it received


def test_partial_sends_and_pooled_reads_keep_every_byte() -> None:
    """Replies larger than the socket's buffer (sendmsg returns part-way) arrive whole; a pooled
    payload buffer is reused only once every array of the frame read into it is dropped."""
    rng = np.random.default_rng(1)
    arrays = {"a": rng.integers(0, 255, (4, 300, 300, 3), dtype=np.uint8), "b": rng.standard_normal((7, 1000)).astype(np.float32)}
    a, b = _pair()
    a.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 16 * 1024)
    pool = RecyclingPool()
    with a, b:

        def send() -> None:
            for _ in range(3):
                write_frame(a, Frame("result", {}, arrays))

        writer = threading.Thread(target=send)
        writer.start()
        first = read_frame(b, FrameLimits(), 10, pool)
        held = first.arrays["a"]
        second = read_frame(b, FrameLimits(), 10, pool)
        assert np.shares_memory(held, second.arrays["a"]) is False, "a held result was overwritten"
        address = second.arrays["a"].ctypes.data
        del first, second
        third = read_frame(b, FrameLimits(), 10, pool)
        writer.join(10)
    assert third.arrays["a"].ctypes.data == address, "a dropped result's buffer was not reused"
    for got in (held, third.arrays["a"]):
        assert got.tobytes() == arrays["a"].tobytes()
    assert third.arrays["b"].tobytes() == arrays["b"].tobytes()


def test_a_big_endian_array_travels_little_endian() -> None:
    value = np.arange(4, dtype=">i4")
    _prefix_and_header, payload = encode_frame(Frame("x", arrays={"a": value}))
    assert bytes(payload) == np.arange(4, dtype="<i4").tobytes()


@pytest.mark.parametrize(
    "header, payload, match",
    [
        (b"[]", b"", "must be a JSON object"),
        (b'{"type": 1}', b"", "'type' must be a non-empty string"),
        (b'{"type": "x", "arrays": [["a", "object", [1]]]}', b"\0" * 8, "dtype 'object' is not one of"),
        (b'{"type": "x", "arrays": [["a", "uint8", [-1]]]}', b"", "shape must be a list"),
        (b'{"type": "x", "arrays": [["a", "uint8", [4]]]}', b"\0" * 3, "runs past the payload"),
        (b'{"type": "x", "arrays": [["a", "uint8", [2]]]}', b"\0" * 3, "the arrays take 2 bytes but the payload has 3"),
        (b'{"type": "x", "arrays": [["a", "uint8", [1]], ["a", "uint8", [1]]]}', b"\0" * 2, "appears twice"),
        (b"\xff", b"", "not UTF-8 JSON"),
    ],
    ids=["not-object", "no-type", "dtype", "shape", "short", "long", "twice", "utf8"],
)
def test_bad_headers_and_arrays_are_named_and_not_fatal(header: bytes, payload: bytes, match: str) -> None:
    with pytest.raises(WireError, match=match) as info:
        decode(header, np.frombuffer(payload, np.uint8).copy())
    assert not info.value.fatal


@pytest.mark.parametrize(
    "prefix, code, match",
    [
        (struct.pack("!4sHHII", b"HTTP", VERSION, 0, 2, 0), "frame", "not an envfleet frame"),
        (struct.pack("!4sHHII", MAGIC, VERSION + 1, 0, 2, 0), "version", f"version {VERSION + 1}; this end speaks version {VERSION}"),
        (struct.pack("!4sHHII", MAGIC, VERSION, 0, 1 << 20, 0), "frame", "header of 1048576 bytes, over the limit"),
        (struct.pack("!4sHHII", MAGIC, VERSION, 0, 2, 1 << 20), "frame", "payload of 1048576 bytes, over the limit"),
    ],
    ids=["magic", "version", "header-limit", "payload-limit"],
)
def test_bad_prefixes_are_fatal_before_anything_is_read(prefix: bytes, code: str, match: str) -> None:
    a, b = _pair()
    with a, b:
        a.sendall(prefix)
        with pytest.raises(WireError, match=match) as info:
            read_frame(b, FrameLimits(header=4096, payload=1024), 5)
    assert info.value.code == code and info.value.fatal


def test_a_cut_frame_and_a_silent_peer() -> None:
    a, b = _pair()
    with b:
        a.sendall(b"".join(bytes(p) for p in encode_frame(Frame("x", arrays={"a": np.zeros(10)})))[:-3])
        a.close()
        with pytest.raises(WireError, match="cut short") as info:
            read_frame(b, FrameLimits(), 5)
        assert info.value.code == "truncated"
    a, b = _pair()
    with a, b:
        with pytest.raises(TimeoutError):
            read_frame(b, FrameLimits(), 0.2)
        a.close()
        with pytest.raises(EOFError):
            read_frame(b, FrameLimits(), 1)
