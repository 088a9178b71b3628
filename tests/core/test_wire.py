"""The manager's wire: framed pickles on a socket, per-env arrays as one byte string."""

from __future__ import annotations

import socket
import threading

import numpy as np
import pytest

from envfleet.shards.wire import ArrayPacker, Channel, layout_of, split_reply


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


def test_split_reply_gives_flags_and_infos_by_their_own_names() -> None:
    # An info may share a flag's name: the two stay apart.
    infos = {"rewards": np.array([7, 8]), "task_id": np.array([1, 2])}
    fields, raw, _ = ArrayPacker().pack(2, infos, (np.ones((2, 3), np.float32), np.zeros((2, 3), bool), np.zeros((2, 3), bool)))
    flags, back = split_reply(layout_of(fields, 2).unpack(raw))
    assert sorted(flags) == ["rewards", "terminations", "truncations"] and flags["rewards"].shape == (2, 3)
    assert sorted(back) == ["rewards", "task_id"] and back["rewards"].tolist() == [7, 8]


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


def test_join_gives_aligned_fields_whatever_their_order() -> None:
    # A bool first would leave the int64 and float32 behind it misaligned in a shard's bytes.
    packer = ArrayPacker()
    shards = [{"flag": np.array([True, False, True]), "i8": np.arange(3) * (s + 1), "f4": np.full((3, 2), s, np.float32)} for s in range(5)]
    packed = [packer.pack(3, arrays) for arrays in shards]
    layout = layout_of(packed[0][0], 3)
    joined = layout.join([raw for _, raw, _ in packed])
    for key in ("flag", "i8", "f4"):
        value = joined["i." + key]
        assert np.array_equal(value, np.concatenate([s[key] for s in shards]))
        assert value.flags.aligned and value.flags.c_contiguous and value.flags.writeable
    joined["i.i8"][0] = 99  # fields are separate memory ranges: writing one leaves the others alone
    assert joined["i.flag"].tolist() == [True, False, True] * 5


def test_packer_fast_path_notices_every_change() -> None:
    packer = ArrayPacker()
    flags = (np.zeros((2, 1), np.float32), np.zeros((2, 1), bool), np.zeros((2, 1), bool))
    infos = {"a": np.array([1, 2]), "b": np.array([0.5, 1.5], np.float32)}
    first = packer.pack(2, infos, flags)
    layout = layout_of(first[0], 2)
    again = packer.pack(2, {"a": np.array([3, 4]), "b": np.array([2.5, 3.5], np.float32)}, flags)
    assert again[0] is None and layout.unpack(again[1])["i.a"].tolist() == [3, 4]
    assert packer.pack(2, {"b": infos["b"], "a": infos["a"]}, flags)[0] is not None  # order changed
    assert packer.pack(2, {**infos, "c": np.array([True, False])}, flags)[0] is not None  # a new info
    assert packer.pack(2, {**infos, "c": np.array([True, False])}, flags)[0] is None
    changed = packer.pack(2, {**infos, "c": [True, False]}, flags)  # a list where an array was: same layout, slow path
    assert changed[0] is None and layout_of(packer.pack(2, infos, flags)[0], 2) is layout
    assert packer.pack(2, {"a": infos["a"], "b": np.array([1.0, 2.0])}, flags)[0] is not None  # dtype changed
    assert packer.pack(2, {"a": infos["a"], "b": "text"}, flags)[2] == {"b": "text"}
    assert packer.pack(2, {"a": infos["a"], "b": np.ones((2, 2), np.float32)}, flags)[0] is not None  # shape changed


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


def test_shard_obs_writer_copies_any_layout_and_checks_the_spec() -> None:
    from envfleet.shards.server import ObsWriter
    from envfleet.shards.shm import byte_views

    buffers = {"img": np.zeros((2, 4, 4, 3), np.uint8), "state": np.zeros((2, 5), np.float32)}
    writer = ObsWriter(buffers, byte_views(buffers))
    img = np.random.default_rng(0).integers(0, 255, (2, 4, 4, 3), dtype=np.uint8)
    state = np.asfortranarray(np.arange(10, dtype=np.float32).reshape(2, 5))  # not C-contiguous: numpy's copy
    writer.write({"img": img, "state": state})
    assert np.array_equal(buffers["img"], img) and np.array_equal(buffers["state"], state)
    writer.write({"img": img[:, ::-1], "state": state})  # a reversed view
    assert np.array_equal(buffers["img"], img[:, ::-1])
    with pytest.raises(
        RuntimeError, match=r"observation 'state': the env returned float64\[2, 5\], the observation_spec promised float32\[2, 5\]"
    ):
        writer.write({"img": img, "state": state.astype(np.float64)})
    with pytest.raises(RuntimeError, match="the env returned observations \\['img'\\]"):
        writer.write({"img": img})
