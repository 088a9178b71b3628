"""DataProto: the verl-compatible batch."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
import torch

from envfleet.dataproto import DataProto, DataProtoItem, pad_dataproto_to_divisor, unpad_dataproto


def make(n: int = 4, offset: int = 0, meta: dict | None = None) -> DataProto:
    return DataProto.from_dict(
        {
            "x": torch.arange(offset, offset + n, dtype=torch.float32)[:, None].repeat(1, 3),
            "img": torch.zeros(n, 2, 2, 3, dtype=torch.uint8),
        },
        {"name": np.array([f"s{i + offset}" for i in range(n)], dtype=object), "sid": np.arange(offset, offset + n)},
        meta or {"stage_id": 0},
    )


def test_from_dict_and_len() -> None:
    d = make(4)
    assert len(d) == 4
    assert d.batch["x"].shape == (4, 3)
    assert d.non_tensor_batch["name"].dtype == object


def test_from_single_dict_sorts_tensors_from_arrays() -> None:
    d = DataProto.from_single_dict({"a": torch.ones(2), "b": np.array(["u", "v"], dtype=object), "c": [1, 2]})
    assert list(d.batch.keys()) == ["a"]
    assert set(d.non_tensor_batch) == {"b", "c"}
    assert d.non_tensor_batch["c"].dtype.kind == "i"  # numbers from a list stay numeric


def test_mismatched_batch_sizes_name_the_key_and_sizes() -> None:
    with pytest.raises(ValueError, match=r"'name'.*3.*'x'.*4|'x'.*4.*'name'.*3"):
        DataProto.from_dict({"x": torch.zeros(4)}, {"name": np.array(["a", "b", "c"], dtype=object)})


def test_concat_orders_parts_and_keeps_strings() -> None:
    d = DataProto.concat([make(2, 0), make(3, 2)])
    assert len(d) == 5
    assert d.non_tensor_batch["name"].tolist() == ["s0", "s1", "s2", "s3", "s4"]
    assert d.batch["x"][:, 0].tolist() == [0, 1, 2, 3, 4]


def test_concat_meta_disagreement_names_the_key() -> None:
    with pytest.raises(ValueError, match="stage_id"):
        DataProto.concat([make(2, meta={"stage_id": 0}), make(2, meta={"stage_id": 1})])


def test_concat_of_nothing_is_an_error() -> None:
    with pytest.raises(ValueError, match="at least one"):
        DataProto.concat([])


def test_chunk_and_split() -> None:
    d = make(6)
    parts = d.chunk(3)
    assert [len(p) for p in parts] == [2, 2, 2]
    assert parts[1].non_tensor_batch["sid"].tolist() == [2, 3]
    assert [len(p) for p in d.split(4)] == [4, 2]
    with pytest.raises(ValueError, match="6.*4"):
        d.chunk(4)


def test_select_and_pop() -> None:
    d = make(3)
    s = d.select(batch_keys=["x"], non_tensor_batch_keys=["sid"])
    assert list(s.batch.keys()) == ["x"] and list(s.non_tensor_batch) == ["sid"]
    popped = d.pop(batch_keys=["img"], non_tensor_batch_keys=["name"], meta_info_keys=["stage_id"])
    assert "img" not in d.batch.keys() and "name" not in d.non_tensor_batch and "stage_id" not in d.meta_info
    assert popped.batch["img"].shape == (3, 2, 2, 3) and popped.meta_info == {"stage_id": 0}
    with pytest.raises(KeyError, match="nope"):
        d.select(batch_keys=["nope"])


def test_union_merges_and_rejects_conflicts() -> None:
    a = DataProto.from_dict({"x": torch.zeros(2)}, meta_info={"k": 1})
    b = DataProto.from_dict({"y": torch.ones(2)}, {"s": np.array(["p", "q"], dtype=object)}, {"j": 2})
    u = a.union(b)
    assert set(u.batch.keys()) == {"x", "y"} and u.meta_info == {"k": 1, "j": 2}
    with pytest.raises(ValueError, match="'x'"):
        u.union(DataProto.from_dict({"x": torch.ones(2)}))


def test_repeat_interleave_and_tile() -> None:
    d = make(2)
    assert d.repeat(2, interleave=True).non_tensor_batch["sid"].tolist() == [0, 0, 1, 1]
    assert d.repeat(2, interleave=False).non_tensor_batch["sid"].tolist() == [0, 1, 0, 1]


def test_indexing_int_slice_array_mask() -> None:
    d = make(5)
    item = d[2]
    assert isinstance(item, DataProtoItem) and item.non_tensor_batch["name"] == "s2"
    assert d[1:3].non_tensor_batch["sid"].tolist() == [1, 2]
    assert d[np.array([4, 0])].non_tensor_batch["sid"].tolist() == [4, 0]
    assert d[[True, False, True, False, False]].non_tensor_batch["sid"].tolist() == [0, 2]
    assert d[torch.tensor([3])].batch["x"][0, 0].item() == 3
    with pytest.raises(IndexError):
        d[5]


def test_to_device_and_padding() -> None:
    d = make(5).to("cpu")
    padded, pad = pad_dataproto_to_divisor(d, 4)
    assert pad == 3 and len(padded) == 8
    assert padded.non_tensor_batch["sid"].tolist() == [0, 1, 2, 3, 4, 0, 1, 2]
    assert len(unpad_dataproto(padded, pad)) == 5


def test_pickle_round_trip_is_exact() -> None:
    d = make(4)
    back = pickle.loads(pickle.dumps(d))
    assert torch.equal(back.batch["x"], d.batch["x"])
    assert back.non_tensor_batch["name"].tolist() == d.non_tensor_batch["name"].tolist()
    assert back.meta_info == d.meta_info


def test_pickle_of_images_is_a_memcpy_not_per_element() -> None:
    imgs = torch.zeros(64, 256, 256, 3, dtype=torch.uint8)
    d = DataProto.from_dict({"full_image": imgs, "rews": torch.zeros(64, 8)}, {"sid": np.arange(64)})
    blob = pickle.dumps(d, protocol=5)
    # numeric data is stored as raw buffers: the pickle is barely larger than the bytes
    assert len(blob) < imgs.numel() * 1.01 + 100_000
    assert torch.equal(pickle.loads(blob).batch["full_image"], imgs)


def test_from_verl_duck_typed() -> None:
    class Fake:
        batch = make(2).batch
        non_tensor_batch = {"a": np.array([1, 2])}
        meta_info = {"m": 1}

    d = DataProto.from_verl(Fake())
    assert len(d) == 2 and d.meta_info == {"m": 1}


def test_pickle_keeps_dtypes_including_ones_numpy_lacks() -> None:
    d = DataProto.from_dict(
        {"b": torch.tensor([True, False]), "h": torch.ones(2, 3, dtype=torch.bfloat16), "u": torch.arange(2, dtype=torch.uint8)},
        {"s": np.array(["x", "y"], dtype=object)},
        {"k": 1},
    )
    back = pickle.loads(pickle.dumps(d, protocol=5))
    assert {k: v.dtype for k, v in back.batch.items()} == {"b": torch.bool, "h": torch.bfloat16, "u": torch.uint8}
    assert torch.equal(back.batch["h"], d.batch["h"]) and back.non_tensor_batch["s"].tolist() == ["x", "y"]
    assert len(back) == 2 and back.meta_info == {"k": 1}


def test_unpickled_tensors_are_writable_even_from_read_only_buffers() -> None:
    d = DataProto.from_dict({"img": torch.zeros(8, 256, 256, 3, dtype=torch.uint8)})  # big enough to travel out of band
    state = d.__getstate__()
    assert list(state["tensors"]) == ["img"]
    for value in state["tensors"].values():
        value.flags.writeable = False  # what Ray's zero-copy deserialization hands out
    back = DataProto.__new__(DataProto)
    back.__setstate__(state)
    back.batch["img"] += 1  # a trainer normalizing in place must not fail
    assert int(back.batch["img"].sum()) == 8 * 256 * 256 * 3


def test_small_arrays_travel_in_one_in_band_buffer() -> None:
    # Through Ray (pickle protocol 5 with a buffer callback) every numpy array would be an
    # out-of-band buffer with its own cost; small ones are packed into one byte string.
    small = {f"info{i}": torch.arange(4, dtype=torch.int64) * i for i in range(10)}
    small["flags"] = torch.tensor([[True, False]] * 4)
    small["strided"] = torch.arange(24, dtype=torch.float32).reshape(4, 6)[:, ::2]  # not contiguous
    big = torch.arange(4 * 300_000, dtype=torch.float32).reshape(4, 300_000)  # 4.8 MB: out of band
    d = DataProto.from_dict(
        {**small, "big": big},
        {"actions": np.ones((4, 8, 7), np.float32), "name": np.array(list("abcd"), dtype=object)},
        {"stage_id": 1},
    )
    buffers: list[pickle.PickleBuffer] = []
    blob = pickle.dumps(d, protocol=5, buffer_callback=buffers.append)
    assert len(buffers) == 1  # only "big"
    back = pickle.loads(blob, buffers=buffers)
    assert list(back.batch.keys()) == list(d.batch.keys())
    assert list(back.non_tensor_batch) == ["actions", "name"]
    for key, value in d.batch.items():
        assert back.batch[key].dtype == value.dtype and torch.equal(back.batch[key], value), key
    assert np.array_equal(back.non_tensor_batch["actions"], d.non_tensor_batch["actions"])
    assert back.non_tensor_batch["name"].tolist() == ["a", "b", "c", "d"]
    back.batch["info3"] += 1  # writable
    back.non_tensor_batch["actions"][0, 0, 0] = 5.0
    assert back.batch["info3"].tolist() == [1, 4, 7, 10] and d.batch["info3"].tolist() == [0, 3, 6, 9]


def test_from_arrays_shares_memory_and_builds_the_batch_on_first_use() -> None:
    img = np.zeros((3, 4, 4, 3), np.uint8)
    d = DataProto.from_arrays({"img": img, "r": np.ones((3, 2), np.float32)}, {"s": ["a", "b", "c"]}, {"k": 1})
    assert len(d) == 3 and d._batch is None  # nothing built yet
    back = pickle.loads(pickle.dumps(d, protocol=5))
    assert back._batch is None and len(back) == 3
    assert torch.equal(back.batch["r"], torch.ones(3, 2)) and back.non_tensor_batch["s"].tolist() == ["a", "b", "c"]
    d.batch["img"] += 7  # the tensor is the array's memory
    assert int(img.sum()) == 7 * img.size
    with pytest.raises(ValueError, match="batch size mismatch"):
        DataProto.from_arrays({"a": np.zeros(3), "b": np.zeros(4)})


def test_tensor_keys_are_read_without_building_the_batch() -> None:
    d = DataProto.from_arrays({"img": np.zeros((2, 4, 4, 3), np.uint8), "r": np.ones(2, np.float32)}, {"s": ["a", "b"]})
    back = pickle.loads(pickle.dumps(d, protocol=5))
    assert back.tensor_keys() == {"img", "r"} and back._batch is None  # still the arrays
    assert back.tensor_keys() == frozenset(back.batch.keys())  # the same names once built
    assert DataProto.from_dict(non_tensors={"s": np.array(["a"], dtype=object)}).tensor_keys() == frozenset()


def test_concat_of_unbuilt_parts() -> None:
    parts = [DataProto.from_arrays({"x": np.full((2, 2), i, np.int64)}, {"s": [f"{i}a", f"{i}b"]}, {"m": 0}) for i in range(3)]
    out = DataProto.concat(parts)
    assert len(out) == 6 and out.batch["x"][:, 0].tolist() == [0, 0, 1, 1, 2, 2]
    assert out.non_tensor_batch["s"].tolist() == ["0a", "0b", "1a", "1b", "2a", "2b"]
