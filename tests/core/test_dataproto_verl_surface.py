"""DataProto: the parts of verl's surface beyond the basics, with edge cases, empty batches and non-tensor data."""

from __future__ import annotations

import io
import os
import pathlib
import pickle

import numpy as np
import pytest
import torch
from tensordict import TensorDict

from envfleet.dataproto import (
    AUTO_PADDING_KEY,
    DataProto,
    DataProtoConfig,
    DataProtoItem,
    collate_fn,
    fold_batch_dim,
    list_of_dict_to_dict_of_list,
    pad_dataproto_to_divisor,
    unfold_batch_dim,
    unpad_dataproto,
)
from envfleet.errors import DataProtoError, DataProtoKeyError


def make(n: int = 6, meta: dict | None = None, **kw: object) -> DataProto:
    return DataProto.from_dict(
        {"obs": torch.arange(n * 2, dtype=torch.float32).reshape(n, 2), "id": torch.arange(n)},
        {"label": np.array([f"r{i}" for i in range(n)], dtype=object), "sid": np.arange(n, dtype=np.int32)},
        {"info": "x"} if meta is None else meta,
        **kw,  # type: ignore[arg-type]
    )


def ids(d: DataProto) -> list[int]:
    assert d.batch is not None
    assert d.batch["id"].tolist() == d.non_tensor_batch["sid"].tolist()  # tensors and non-tensors move together
    return d.batch["id"].tolist()


@pytest.fixture
def global_padding():
    before = DataProtoConfig.auto_padding
    DataProtoConfig.auto_padding = True
    yield
    DataProtoConfig.auto_padding = before


# ---------------------------------------------------------------------------------------------- errors


def test_errors_are_both_what_envfleet_and_what_verl_raise() -> None:
    with pytest.raises(ValueError, match="num_batch_dims=2"):
        DataProto.from_dict({"x": torch.zeros(3, 2)}, num_batch_dims=2)
    with pytest.raises(AssertionError, match="num_batch_dims=0"):
        DataProto.from_dict({"x": torch.zeros(3, 2)}, num_batch_dims=0)
    with pytest.raises(KeyError) as err:
        make().pop(batch_keys=["nope"])
    assert isinstance(err.value, AssertionError) and isinstance(err.value, DataProtoKeyError)
    assert str(err.value).startswith("batch has no key(s) ['nope']")  # not wrapped in quotes as KeyError would
    assert issubclass(DataProtoError, ValueError) and issubclass(DataProtoError, AssertionError)


# ---------------------------------------------------------------------------------------------- building


def test_from_dict_lists_become_object_arrays_as_in_verl() -> None:
    d = DataProto.from_dict(
        {"x": torch.zeros(3)},
        {"pairs": [["a1", "a2"], ["b1", "b2"], ["c1", "c2"]], "ragged": [[], [0.5], [0.8, 0.9]], "dicts": [{"a": 1}, {"a": 2}, {}]},
    )
    assert d.non_tensor_batch["pairs"].shape == (3, 2) and d.non_tensor_batch["pairs"].dtype == object
    assert d.non_tensor_batch["ragged"].shape == (3,) and d.non_tensor_batch["ragged"][2] == [0.8, 0.9]
    assert d.non_tensor_batch["dicts"][1] == {"a": 2}


def test_auto_padding_per_dataproto_globally_and_by_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("VERL_AUTO_PADDING", raising=False)
    assert not make().is_padding_enabled()
    d = make(auto_padding=True)
    assert d.meta_info[AUTO_PADDING_KEY] is True and d.is_padding_enabled()
    assert DataProto.from_single_dict({"a": torch.zeros(2)}, auto_padding=True).is_padding_enabled()
    monkeypatch.setenv("VERL_AUTO_PADDING", "true")
    assert make().is_padding_enabled() and DataProtoConfig.auto_padding
    monkeypatch.setenv("VERL_AUTO_PADDING", "0")
    assert not make().is_padding_enabled()
    with pytest.raises(DataProtoError, match="True or False"):
        DataProtoConfig.auto_padding = 1  # type: ignore[assignment]


def test_auto_padding_switch(global_padding: None) -> None:
    assert make().is_padding_enabled()
    assert [len(p) for p in make(5).chunk(2)] == [3, 2]


# ---------------------------------------------------------------------------------------------- concat and metrics


def test_concat_merges_metrics_of_every_part_into_lists() -> None:
    parts = [
        make(2, {"flag": True}),
        make(2, {"flag": True, "metrics": {"loss": 0.6, "acc": 0.8}}),
        make(2, {"flag": True, "metrics": [{"loss": 0.5, "acc": 0.9}, {"loss": 0.4, "acc": 1.0}]}),
        make(2, {"flag": True, "metrics": None}),
    ]
    out = DataProto.concat(parts)
    assert out.meta_info == {"flag": True, "metrics": {"loss": [0.6, 0.5, 0.4], "acc": [0.8, 0.9, 1.0]}}
    assert len(out) == 8
    assert "metrics" not in DataProto.concat([make(2), make(2)]).meta_info


def test_concat_meta_conflicts_name_the_key_and_the_parts() -> None:
    with pytest.raises(AssertionError, match=r"Conflicting values for meta_info key 'stage'.*0 \(part 0\) vs 1 \(part 2\)"):
        DataProto.concat([make(1, {"stage": 0}), make(1, {}), make(1, {"stage": 1})])
    with pytest.raises(DataProtoError, match="list of dicts"):
        DataProto.concat([make(1, {"metrics": [1.0]})])
    with pytest.raises(DataProtoKeyError, match="'acc'"):
        DataProto.concat([make(1, {"metrics": {"loss": 1}}), make(1, {"metrics": {"loss": 2, "acc": 1}})])


def test_concat_meta_equality_is_deep_and_nan_aware() -> None:
    meta = {"arr": np.array([1.0, np.nan]), "nested": {"a": [float("nan"), "s"]}, "t": torch.tensor([1.0, float("nan")])}
    copy_meta = {"arr": np.array([1.0, np.nan]), "nested": {"a": [float("nan"), "s"]}, "t": torch.tensor([1.0, float("nan")])}
    assert DataProto.concat([make(1, meta), make(1, copy_meta)]).meta_info.keys() == meta.keys()
    with pytest.raises(DataProtoError, match="'arr'"):
        DataProto.concat([make(1, {"arr": np.array([1.0, 2.0])}), make(1, {"arr": np.array([1, 2])})])  # dtypes differ


def test_concat_keeps_a_subclass_and_handles_empty_and_non_tensor_parts() -> None:
    class Mine(DataProto):
        pass

    out = DataProto.concat([Mine.from_dict({"x": torch.zeros(0, 2)}), Mine.from_dict({"x": torch.ones(2, 2)})])
    assert type(out) is Mine and len(out) == 2
    nt = DataProto.concat([DataProto.from_dict(non_tensors={"s": ["a"]}), DataProto.from_dict(non_tensors={"s": ["b", "c"]})])
    assert nt.batch is None and nt.non_tensor_batch["s"].tolist() == ["a", "b", "c"]


# ---------------------------------------------------------------------------------------------- chunk and padding


def test_chunk_uneven_needs_padding_enabled() -> None:
    with pytest.raises(AssertionError, match="length 10 cannot be split into 4"):
        make(10).chunk(4)
    with pytest.raises(DataProtoError, match="positive"):
        make(4).chunk(0)


def test_chunk_with_padding_cuts_as_torch_chunk() -> None:
    parts = make(10, auto_padding=True).chunk(4)
    assert [ids(p) for p in parts] == [[0, 1, 2], [3, 4, 5], [6, 7, 8], [9]]  # torch.chunk's sizes, as verl
    assert all(p.meta_info["info"] == "x" for p in parts)
    # torch.chunk would give 3 parts here; there are always as many parts as asked
    assert [len(p) for p in make(5, auto_padding=True).chunk(4)] == [2, 1, 1, 1]
    assert [len(p) for p in make(2, auto_padding=True).chunk(4)] == [1, 1, 0, 0]
    nt = DataProto.from_dict(non_tensors={"s": list("abcde")}, auto_padding=True)
    assert [p.non_tensor_batch["s"].tolist() for p in nt.chunk(2)] == [["a", "b", "c"], ["d", "e"]]


def test_chunk_of_an_empty_dataproto_gives_empty_parts() -> None:
    parts = make(0).chunk(3)
    assert [len(p) for p in parts] == [0, 0, 0]
    assert parts[0].batch is not None and parts[0].batch["obs"].shape == (0, 2)


def test_padding_appends_first_or_last_row_in_place() -> None:
    d = make(3)
    d.padding(2)
    assert ids(d) == [0, 1, 2, 2, 2] and d.meta_info == {"info": "x"}
    d = make(3)
    d.padding(1, "first")
    assert ids(d) == [0, 1, 2, 0]
    d.padding(0)
    assert len(d) == 4
    with pytest.raises(DataProtoError, match="'middle'"):
        d.padding(1, "middle")
    with pytest.raises(DataProtoError, match="length 0"):
        make(0).padding(1)


def test_padding_chunk_concat_unpad_round_trip() -> None:
    d = make(7, auto_padding=True)
    pad = 4 - len(d) % 4
    d.padding(pad)
    parts = d.chunk(4)
    assert [len(p) for p in parts] == [2, 2, 2, 2]
    back = unpad_dataproto(DataProto.concat(parts), pad)
    assert ids(back) == list(range(7))


def test_pad_dataproto_to_divisor_repeats_from_the_start() -> None:
    d = make(3, {"metrics": {"loss": 1.0}})
    padded, pad = pad_dataproto_to_divisor(d, 7)
    assert pad == 4 and ids(padded) == [0, 1, 2, 0, 1, 2, 0]
    assert padded.meta_info == {"metrics": {"loss": 1.0}}  # not doubled into lists
    assert ids(unpad_dataproto(padded, pad)) == [0, 1, 2]
    same, zero = pad_dataproto_to_divisor(d, 3)
    assert zero == 0 and same is d
    empty, zero = pad_dataproto_to_divisor(make(0), 4)
    assert zero == 0 and len(empty) == 0
    with pytest.raises(DataProtoError, match="size_divisor"):
        pad_dataproto_to_divisor(d, 0)
    with pytest.raises(DataProtoError, match="pad_size"):
        unpad_dataproto(d, 4)


# ---------------------------------------------------------------------------------------------- row order


def test_reorder_is_in_place_for_any_index_type() -> None:
    for index in (torch.tensor([2, 0, 1]), np.array([2, 0, 1]), [2, 0, 1]):
        d = make(3)
        assert d.reorder(index) is None  # type: ignore[func-returns-value]
        assert ids(d) == [2, 0, 1] and d.non_tensor_batch["label"].tolist() == ["r2", "r0", "r1"] and d.meta_info == {"info": "x"}
    lazy = DataProto.from_arrays({"id": np.arange(3)}, {"sid": np.arange(3)})
    lazy.reorder(torch.tensor([1, 2, 0]))
    assert ids(lazy) == [1, 2, 0]
    nt = DataProto.from_dict(non_tensors={"s": list("abc")})
    nt.reorder([2, 1, 0])
    assert nt.non_tensor_batch["s"].tolist() == ["c", "b", "a"]
    with pytest.raises(DataProtoError, match="integers or booleans"):
        make(3).reorder(np.array([0.0, 1.0, 2.0]))


def test_select_idxs_edge_cases() -> None:
    d = make(4)
    assert len(d.select_idxs([])) == 0 and d.select_idxs([]).batch["obs"].shape == (0, 2)  # type: ignore[index]
    assert ids(d.select_idxs(torch.tensor([True, False, False, True]))) == [0, 3]
    with pytest.raises(DataProtoError, match="shape \\(4,\\)"):
        d.select_idxs([True, False])
    with pytest.raises(DataProtoError, match="one-dimensional"):
        d.select_idxs(np.zeros((2, 2), np.int64))


def test_sample_level_repeat_takes_one_count_per_row() -> None:
    d = make(3)
    for counts in ([3, 0, 2], (3, 0, 2), np.array([3, 0, 2]), torch.tensor([3, 0, 2])):
        out = d.sample_level_repeat(counts)
        assert ids(out) == [0, 0, 0, 2, 2] and out.meta_info == {"info": "x"}
    assert len(make(0).sample_level_repeat([])) == 0
    with pytest.raises(DataProtoError, match="one count per row \\(3\\)"):
        d.sample_level_repeat([1, 2])
    with pytest.raises(DataProtoError, match=">= 0"):
        d.sample_level_repeat([1, -1, 1])
    with pytest.raises(DataProtoError, match="list, tuple"):
        d.sample_level_repeat(3)  # type: ignore[arg-type]


def test_repeat_edge_cases() -> None:
    assert len(make(3).repeat(0)) == 0
    assert ids(make(2).repeat(3, interleave=False)) == [0, 1, 0, 1, 0, 1]
    assert len(make(0).repeat(4)) == 0


# ---------------------------------------------------------------------------------------------- shapes


def test_fold_and_unfold_batch_dim_round_trip() -> None:
    d = make(6)
    folded = fold_batch_dim(d, 3)
    assert folded.batch is not None and folded.batch.batch_size == torch.Size([3])
    assert folded.batch["obs"].shape == (3, 2, 2) and folded.non_tensor_batch["label"].tolist() == [
        ["r0", "r1"],
        ["r2", "r3"],
        ["r4", "r5"],
    ]
    assert d.non_tensor_batch["label"].shape == (6,) and d.batch["obs"].shape == (6, 2)  # the input is untouched
    folded.reorder(torch.tensor([2, 0, 1]))
    back = unfold_batch_dim(folded, batch_dims=2)
    assert ids(back) == [4, 5, 0, 1, 2, 3] and back.meta_info == {"info": "x"}
    assert back.batch is not None and back.batch.batch_size == torch.Size([6])
    nt = fold_batch_dim(DataProto.from_dict(non_tensors={"s": list("abcd")}), 2)
    assert nt.batch is None and unfold_batch_dim(nt).non_tensor_batch["s"].tolist() == list("abcd")
    empty = unfold_batch_dim(fold_batch_dim(make(0), 2))
    assert len(empty) == 0
    with pytest.raises(DataProtoError, match="6 rows cannot fold into 4"):
        fold_batch_dim(d, 4)
    with pytest.raises(DataProtoError, match="fewer than batch_dims=2"):
        unfold_batch_dim(make(2))
    with pytest.raises(DataProtoError, match="leading dims"):
        unfold_batch_dim(DataProto.from_dict({"a": torch.zeros(2, 3), "b": torch.zeros(2, 4)}))


def test_unfold_column_chunks_splits_tensors_and_non_tensors() -> None:
    d = DataProto.from_dict(
        {"wide": torch.arange(12).reshape(3, 4), "other": torch.arange(3)},
        {"pairs": [["a1", "a2"], ["b1", "b2"], ["c1", "c2"]], "name": list("abc")},
        {"m": 1},
    )
    out = d.unfold_column_chunks(2, split_keys=["wide", "pairs"])
    assert out.batch is not None and out.batch["wide"].tolist() == [[0, 1], [2, 3], [4, 5], [6, 7], [8, 9], [10, 11]]
    assert out.batch["other"].tolist() == [0, 0, 1, 1, 2, 2]
    assert out.non_tensor_batch["pairs"].tolist() == [["a1"], ["a2"], ["b1"], ["b2"], ["c1"], ["c2"]]
    assert out.non_tensor_batch["name"].tolist() == list("aabbcc") and out.meta_info == {"m": 1}
    assert len(d.unfold_column_chunks(3)) == 9  # no split keys: every row repeated
    with pytest.raises(DataProtoError, match="'wide' has shape \\(3, 4\\)"):
        d.unfold_column_chunks(3, split_keys=["wide"])
    with pytest.raises(DataProtoKeyError, match="'nope'"):
        d.unfold_column_chunks(2, split_keys=["nope"])
    assert len(make(0).unfold_column_chunks(2, split_keys=["obs"])) == 0


# ---------------------------------------------------------------------------------------------- keys


def test_rename_renames_tensor_keys_in_place() -> None:
    d = make(2)
    assert d.rename("obs", "observation") is d
    assert set(d.batch.keys()) == {"observation", "id"}  # type: ignore[union-attr]
    d.rename(["observation", "id"], ["id", "observation"])  # a swap
    assert d.batch["observation"].tolist() == [0, 1]  # type: ignore[index]
    with pytest.raises(ValueError, match="same length"):
        d.rename(["id"], ["a", "b"])
    with pytest.raises(KeyError, match="'nope'"):
        d.rename("nope", "other")
    with pytest.raises(DataProtoError, match="already has key"):
        d.rename("id", "observation")
    with pytest.raises(TypeError, match="list or a string"):
        d.rename(1, "x")  # type: ignore[arg-type]
    with pytest.raises(DataProtoKeyError, match="no tensors"):
        DataProto.from_dict(non_tensors={"s": ["a"]}).rename("s", "t")


def test_select_deepcopy_copies_non_tensors_and_meta_but_shares_tensors() -> None:
    d = make(2, {"cfg": {"lr": 1}})
    s = d.select(deepcopy=True)
    s.non_tensor_batch["label"][0] = "changed"
    s.meta_info["cfg"]["lr"] = 2
    s.batch["obs"] += 100  # type: ignore[index]
    assert d.non_tensor_batch["label"][0] == "r0" and d.meta_info["cfg"]["lr"] == 1
    assert d.batch["obs"][0, 0].item() == 100  # type: ignore[index]
    with pytest.raises(DataProtoKeyError, match="no tensors"):
        DataProto.from_dict(non_tensors={"s": ["a"]}).select(batch_keys=["x"])


def test_union_compares_non_tensors_deeply() -> None:
    a = DataProto.from_dict(non_tensors={"v": np.array([1.0, np.nan]), "o": np.array([{"k": float("nan")}, None], dtype=object)})
    b = DataProto.from_dict(non_tensors={"v": np.array([1.0, np.nan]), "o": np.array([{"k": float("nan")}, None], dtype=object)})
    assert a.union(b) is a
    with pytest.raises(AssertionError, match="'v'"):
        a.union(DataProto.from_dict(non_tensors={"v": np.array([np.nan, 1.0])}))


# ---------------------------------------------------------------------------------------------- iteration


def test_make_iterator_yields_mini_batches_for_each_epoch() -> None:
    d = make(8, {"step": 3})
    parts = list(d.make_iterator(mini_batch_size=4, epochs=2))
    assert [ids(p) for p in parts] == [[0, 1, 2, 3], [4, 5, 6, 7]] * 2
    assert all(p.meta_info == {"step": 3} for p in parts)
    assert parts[0].non_tensor_batch["sid"].dtype == np.int32 and parts[0].non_tensor_batch["label"].dtype == object
    with pytest.raises(DataProtoError, match="mini_batch_size=3 must divide the length 8"):
        d.make_iterator(3, 1)


def test_make_iterator_shuffles_reproducibly_with_a_seed() -> None:
    d = make(32)

    def order(seed: int) -> list[int]:
        return [i for p in d.make_iterator(8, 1, seed=seed, dataloader_kwargs={"shuffle": True}) for i in ids(p)]

    assert order(1) == order(1)
    assert sorted(order(1)) == list(range(32)) and order(1) != list(range(32))
    assert order(1) != order(2)


def test_make_iterator_over_non_tensors_only() -> None:
    d = DataProto.from_dict(non_tensors={"s": list("abcd")})
    assert [p.non_tensor_batch["s"].tolist() for p in d.make_iterator(2, 1)] == [["a", "b"], ["c", "d"]]


def test_collate_fn_stacks_rows_and_keeps_numeric_dtypes() -> None:
    d = DataProto.from_dict(
        {"x": torch.arange(6).reshape(3, 2)},
        {"n": np.arange(3, dtype=np.float32), "pairs": [["a", "b"], ["c", "d"], ["e", "f"]], "s": list("xyz")},
    )
    out = collate_fn([d[i] for i in (2, 0)])
    assert out.batch is not None and out.batch["x"].tolist() == [[4, 5], [0, 1]]
    assert out.non_tensor_batch["n"].dtype == np.float32 and out.non_tensor_batch["n"].tolist() == [2.0, 0.0]
    assert out.non_tensor_batch["pairs"].tolist() == [["e", "f"], ["a", "b"]]
    assert out.non_tensor_batch["s"].tolist() == ["z", "x"] and out.non_tensor_batch["s"].dtype == object
    assert len(collate_fn([])) == 0
    with pytest.raises(DataProtoError, match="some items have tensors"):
        collate_fn([d[0], DataProtoItem(non_tensor_batch={"n": 1.0})])


def test_list_of_dict_to_dict_of_list() -> None:
    assert list_of_dict_to_dict_of_list([]) == {}
    assert list_of_dict_to_dict_of_list([{"a": 1, "b": 2}, {"a": 3}]) == {"a": [1, 3], "b": [2]}
    with pytest.raises(DataProtoKeyError, match="dict 1 has key 'c'"):
        list_of_dict_to_dict_of_list([{"a": 1}, {"c": 2}])


# ---------------------------------------------------------------------------------------------- tensordict


def test_to_tensordict_and_back_keeps_everything() -> None:
    d = DataProto.from_dict(
        {"obs": torch.arange(3)},
        {
            "label": list("abc"),
            "scores": [[], [0.5], [0.8, 0.9]],
            "info": [{"acc": 1.0}, {"acc": 0.0}, {}],
            "n": np.array([2, 4, 6], dtype=np.int32),
        },
        {"step": 42, "cfg": {"lr": 0.1}},
    )
    td = d.to_tensordict()
    assert isinstance(td, TensorDict) and td.batch_size == torch.Size([3])
    assert td["label"] == ["a", "b", "c"] and td["step"] == 42 and list(td["scores"][2]) == [0.8, 0.9]
    back = DataProto.from_tensordict(td)
    assert back.batch is not None and back.batch["obs"].tolist() == [0, 1, 2]
    assert back.non_tensor_batch["label"].tolist() == ["a", "b", "c"]
    assert [list(x) for x in back.non_tensor_batch["scores"]] == [[], [0.5], [0.8, 0.9]]
    assert [dict(x) for x in back.non_tensor_batch["info"]] == [{"acc": 1.0}, {"acc": 0.0}, {}]
    assert back.non_tensor_batch["n"].dtype == np.int32 and back.non_tensor_batch["n"].tolist() == [2, 4, 6]
    assert back.meta_info == {"step": 42, "cfg": {"lr": 0.1}}


def test_tensordict_conversion_edge_cases() -> None:
    nt = DataProto.from_dict(non_tensors={"s": list("ab")}, meta_info={"m": 1})
    back = DataProto.from_tensordict(nt.to_tensordict())
    assert back.batch is None and back.non_tensor_batch["s"].tolist() == ["a", "b"] and back.meta_info == {"m": 1}
    only_tensors = DataProto.from_tensordict(make(0).select(non_tensor_batch_keys=[]).to_tensordict())
    assert len(only_tensors) == 0 and only_tensors.meta_info == {"info": "x"}
    try:
        empty = DataProto.from_tensordict(make(0).to_tensordict())
    except DataProtoError as exc:  # tensordict 0.10 cannot hold an empty non-tensor column
        assert "length 0" in str(exc)
    else:
        assert len(empty) == 0 and set(empty.non_tensor_batch) == {"label", "sid"}
    with pytest.raises(DataProtoError, match="also tensor keys"):
        DataProto.from_dict({"a": torch.zeros(1)}, meta_info={"a": 1}).to_tensordict()
    nested = TensorDict({"inner": TensorDict({"x": torch.zeros(2)}, batch_size=[2])}, batch_size=[2])
    with pytest.raises(DataProtoError, match="'inner'"):
        DataProto.from_tensordict(nested)


# ---------------------------------------------------------------------------------------------- saving


def big_mixed() -> DataProto:
    return DataProto.from_dict(
        {
            "img": torch.randint(0, 255, (4, 300, 300, 3), dtype=torch.uint8),  # out of band in the pickle
            "h": torch.ones(4, 3, dtype=torch.bfloat16),
            "r": torch.arange(4.0),
        },
        {"s": list("abcd"), "n": np.arange(4)},
        {"stage_id": 2, "metrics": [{"x": 1}]},
    )


def test_save_to_disk_and_load_from_disk(tmp_path: pathlib.Path) -> None:
    d = big_mixed()
    path = tmp_path / "d.pkl"
    d.save_to_disk(path)
    back = DataProto.load_from_disk(str(path))
    assert all(torch.equal(back.batch[k], d.batch[k]) for k in ("img", "h", "r"))  # type: ignore[index]
    assert back.non_tensor_batch["s"].tolist() == list("abcd") and back.meta_info == d.meta_info
    back.batch["img"] += 1  # type: ignore[index]  # writable
    (tmp_path / "other.pkl").write_bytes(pickle.dumps({"not": "a DataProto"}))
    with pytest.raises(TypeError, match="not a DataProto"):
        DataProto.load_from_disk(tmp_path / "other.pkl")


def test_torch_save_and_load_round_trip(tmp_path: pathlib.Path) -> None:
    d = big_mixed()
    buf = io.BytesIO()
    torch.save(d, buf)
    buf.seek(0)
    back = torch.load(buf, weights_only=False)
    assert isinstance(back, DataProto) and len(back) == 4
    assert all(torch.equal(back.batch[k], d.batch[k]) for k in ("img", "h", "r"))
    assert back.non_tensor_batch["n"].tolist() == [0, 1, 2, 3] and back.meta_info == d.meta_info
    path = tmp_path / "d.pt"
    torch.save(make(0), path)
    assert len(torch.load(path, weights_only=False)) == 0
    assert os.path.getsize(path) > 0


def test_a_subclass_survives_pickling() -> None:
    back = pickle.loads(pickle.dumps(Sub.from_dict({"x": torch.zeros(2)})))
    assert type(back) is Sub and len(back) == 2


class Sub(DataProto):
    """A module-level subclass (a pickle names its class)."""


# ---------------------------------------------------------------------------------------------- reporting


def test_print_size_and_get_data_info(capsys: pytest.CaptureFixture[str]) -> None:
    d = DataProto.from_dict({"x": torch.zeros(4, 256, dtype=torch.float32)}, {"s": list("abcd")}, {"l": [1, 2], "d": {"a": 1.0}})
    d.print_size("step 1")
    printed = capsys.readouterr().out
    assert printed.startswith("step 1, Size of tensordict: ") and f"{4 * 256 * 4 / 1024**3} GB" in printed
    info = d.get_data_info()
    assert "  x: (4, 256) (torch.float32) cpu" in info and "  s: ndarray(4,) (object)" in info
    assert "  l: list[int]" in info and "  d: dict[str: float]" in info
    assert DataProto().get_data_info() == "batch\nnon_tensor_batch\nmeta_info"
