"""The manager's wire: framed pickles on a socket, per-env arrays as one byte string."""

from __future__ import annotations

import socket
import threading

import numpy as np
import pytest

from envfleet.wire import ArrayPacker, Channel, layout_of


@pytest.fixture
def pair():
    a, b = socket.socketpair()
    left, right = Channel(a.detach()), Channel(b.detach())
    yield left, right
    left.close()
    right.close()


def test_small_and_large_messages_in_order(pair) -> None:
    left, right = pair
    big = np.arange(3_000_000, dtype=np.int64)  # 24 MB: many reads, and the writer blocks until they happen
    sender = threading.Thread(target=lambda: [left.send(m) for m in ("a", {"big": big}, ("step", (b"x", (1, 1, 7))))])
    sender.start()
    assert right.recv() == "a"
    assert np.array_equal(right.recv()["big"], big)
    assert right.recv() == ("step", (b"x", (1, 1, 7)))
    sender.join()
    assert not right.poll(0.0)


def test_eof_is_reported(pair) -> None:
    left, right = pair
    left.close()
    assert right.poll(1.0)  # EOF is readable
    with pytest.raises(EOFError):
        right.recv()


def test_packer_sends_the_layout_only_when_it_changes() -> None:
    packer = ArrayPacker()
    flags = (np.zeros((2, 3), np.float32), np.zeros((2, 3), bool), np.ones((2, 3), bool))
    infos = {"task_id": np.array([4, 5]), "note": "text", "scalar": np.float32(1)}
    fields, raw, others = packer.pack(2, infos, flags)
    assert fields == (
        ("f.rewards", "<f4", (3,)),
        ("f.terminations", "|b1", (3,)),
        ("f.truncations", "|b1", (3,)),
        ("i.task_id", "<i8", ()),
    )
    assert others == {"note": "text", "scalar": np.float32(1)}
    assert packer.pack(2, infos, flags)[0] is None  # same layout: not sent again
    assert packer.pack(2, {**infos, "task_id": np.array([4.0, 5.0])}, flags)[0] is not None  # dtype changed
    assert packer.pack(2, infos)[0] == (("i.task_id", "<i8", ()),)  # a reset: no flags
    layout = layout_of(fields, 2)
    assert layout is layout_of(fields, 2)
    back = layout.unpack(raw)
    assert back["i.task_id"].tolist() == [4, 5] and back["f.rewards"].shape == (2, 3) and back["f.truncations"].all()


def test_join_equals_concatenating_each_shard() -> None:
    packer = ArrayPacker()
    parts = []
    raws = []
    for shard in range(3):
        arrays = {
            "a": np.arange(6, dtype=np.float32).reshape(2, 3) + 10 * shard,
            "b": np.array([shard, -shard]),
            "c": np.array([True, False]),
        }
        fields, raw, _ = packer.pack(2, arrays)
        if fields is not None:
            layout = layout_of(fields, 2)
        raws.append(raw)
        parts.append(arrays)
    joined = layout.join(raws)
    for key in ("a", "b", "c"):
        assert np.array_equal(joined["i." + key], np.concatenate([p[key] for p in parts]))
        assert joined["i." + key].flags.writeable and joined["i." + key].flags.c_contiguous
    single = layout.join(raws[:1])
    assert single["i.b"].flags.writeable  # a one-shard join is a copy too, not a view of the bytes


def test_recv_within_times_out_returns_ready_messages_and_reports_eof(pair) -> None:
    left, right = pair
    assert right.recv_within(0.05) is Channel.TIMEOUT
    left.send(("ok", 1))
    left.send(("ok", 2))  # two messages may arrive in one read: the second is kept for later
    assert right.recv_within(1.0) == ("ok", 1)
    assert right.recv_within(1.0) == ("ok", 2)
    left.close()
    with pytest.raises(EOFError):
        right.recv_within(1.0)
