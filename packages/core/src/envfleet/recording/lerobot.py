"""LeRobot's dataset format v3.0 on disk, as lerobot 0.6.1 reads it, written with pyarrow and PyAV.

Layout (paths as LeRobot's ``meta/info.json`` templates name them)::

    meta/info.json                                  features, fps, totals, path templates
    meta/tasks.parquet                              task string (pandas index) -> task_index
    meta/episodes/chunk-{c:03d}/file-{f:03d}.parquet one row per episode: length, tasks, where its frames are
    data/chunk-{c:03d}/file-{f:03d}.parquet          one row per frame
    videos/{video_key}/chunk-{c:03d}/file-{f:03d}.mp4
    meta/envfleet.json                              envfleet's own record: rank, stage, protocol fingerprint

LeRobot's own writer appends episodes to a file until it reaches a size; this writer gives each
episode its own files (file index = episode index within its chunk of 1000), which LeRobot reads
the same way (each episode row says where its frames are), so that an episode is complete on disk
before the totals in ``info.json`` count it: a run that fails (a full disk) leaves every episode
counted so far loadable. Files are written under a ``.part`` name and renamed when complete.
"""

from __future__ import annotations

import glob
import json
import os
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from . import stats as dstats

# Imports inside functions: PyAV and pyarrow (the record extra) load only where a dataset is read or written.

__all__ = [
    "CODEBASE_VERSION",
    "CHUNKS_SIZE",
    "Episode",
    "LeRobotDatasetFiles",
    "video_key",
    "read_json",
    "write_json_atomic",
    "encode_png",
    "decode_png",
    "counted_episodes",
    "with_index_features",
    "append_refusal",
]

CODEBASE_VERSION = "v3.0"
CHUNKS_SIZE = 1000  # files per chunk directory, LeRobot's default
DATA_PATH = "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"
VIDEO_PATH = "videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4"
EPISODES_PATH = "meta/episodes/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"
ENVFLEET_META = "meta/envfleet.json"
STATS_PATH = "meta/stats.json"
_INDEX_FEATURES = {name: "int64" for name in ("frame_index", "episode_index", "index", "task_index")}


def video_key(camera: str) -> str:
    """The LeRobot feature name of camera observation ``camera``."""
    return f"observation.images.{camera}"


def read_json(path: str) -> Any:
    """A JSON file's content."""
    with open(path) as fh:
        return json.load(fh)


def write_json_atomic(path: str, value: Any) -> None:
    """Write ``value`` to ``path`` through a temporary file and a rename: readers see the old file or the new one.

    The temporary name is the writer's own (pid and a random part), so two processes writing the same
    file never rename each other's temporary file away.
    """
    tmp = f"{path}.{os.getpid()}.{uuid.uuid4().hex[:8]}.part"
    try:
        with open(tmp, "w") as fh:
            json.dump(value, fh, indent=2, default=str)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise


@dataclass
class Episode:
    """One finished episode, frame-major, as the recorder hands it to the writer."""

    images: dict[str, list[np.ndarray]]  # camera -> one uint8 [H, W, 3] per frame
    state: list[np.ndarray]  # float32 [D] per frame (empty when the backend has no state)
    action: list[np.ndarray]  # float32 [chunk, action_dim] per frame: the chunk sent after the frame's observation
    reward: list[float]  # the chunk's summed reward
    done: list[bool]  # the episode ended during the chunk
    success: list[bool]  # success at any sub-step of the episode so far
    task: str  # the instruction
    meta: dict[str, Any] = field(default_factory=dict)  # state_id, task_id, seed, stage, rank, sim_restarted, ...

    def __len__(self) -> int:
        return len(self.action)


def encode_png(image: np.ndarray) -> bytes:
    """A lossless PNG of ``image`` (uint8 ``[H, W, 3]``), encoded by PyAV."""
    import av

    codec: Any = av.CodecContext.create("png", "w")
    codec.width, codec.height, codec.pix_fmt = image.shape[1], image.shape[0], "rgb24"
    frame = av.VideoFrame.from_ndarray(np.ascontiguousarray(image), format="rgb24")
    return b"".join(bytes(p) for p in [*codec.encode(frame), *codec.encode(None)])


def decode_png(data: bytes) -> np.ndarray:
    """The uint8 ``[H, W, 3]`` image of a PNG, decoded by PyAV."""
    import av

    codec: Any = av.CodecContext.create("png", "r")
    return np.asarray(codec.decode(av.Packet(data))[0].to_ndarray(format="rgb24"))


def counted_episodes(root: str) -> list[dict[str, Any]]:
    """The rows of ``meta/episodes`` that ``info.json`` counts (an episode not counted there is not complete), in order."""
    import pyarrow.parquet as pq

    total = int(read_json(os.path.join(root, "meta", "info.json"))["total_episodes"])
    rows = [r for p in sorted(glob.glob(os.path.join(root, "meta", "episodes", "*", "*.parquet"))) for r in pq.read_table(p).to_pylist()]
    rows.sort(key=lambda r: r["episode_index"])
    return [r for r in rows if r["episode_index"] < total]


def with_index_features(features: Mapping[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """``features`` with the columns every LeRobot dataset has: ``timestamp`` and the indices."""
    out = {**features, "timestamp": {"dtype": "float32", "shape": [1], "names": None}}
    for name, dtype in _INDEX_FEATURES.items():
        out[name] = {"dtype": dtype, "shape": [1], "names": None}
    return out


def append_refusal(root: str, features: Mapping[str, dict[str, Any]], fps: int) -> str | None:
    """Why episodes of ``features`` at ``fps`` cannot be appended to the dataset at ``root`` (None: they can,
    or there is none). ``features`` with the index columns (:func:`with_index_features`)."""
    path = os.path.join(root, "meta", "info.json")
    if not os.path.exists(path):
        return None
    info = read_json(path)
    there = info.get("features", {})
    fix = "choose another train.record.dir, or record as that dataset was recorded"
    if int(info.get("fps", -1)) != int(fps):
        return f"{root} holds a dataset at {info.get('fps')} fps; this run records {fps} fps: {fix}"
    if sorted(there) != sorted(features):
        return f"{root} holds a dataset with the features {sorted(there)}; this run records {sorted(features)}: {fix}"
    for key, feat in features.items():
        if there[key] != feat:
            return f"{root} holds a dataset whose {key!r} is {there[key]}; this run records it as {feat}: {fix}"
    return None


def _png_column(frames: Sequence[np.ndarray]) -> Any:
    """A LeRobot ``image`` column: the struct Hugging Face datasets' ``Image`` reads, one PNG per frame."""
    import pyarrow as pa

    kind = pa.struct([("bytes", pa.binary()), ("path", pa.string())])
    return pa.array([{"bytes": encode_png(f), "path": None} for f in frames], type=kind)


def _vector(values: Sequence[np.ndarray], dtype: Any) -> Any:
    import pyarrow as pa

    arr = np.stack(values).astype(dtype, copy=False).reshape(len(values), -1)
    width = arr.shape[1]
    return pa.FixedSizeListArray.from_arrays(pa.array(arr.reshape(-1)), width)


class LeRobotDatasetFiles:
    """One LeRobot dataset directory: create or reopen it, append finished episodes.

    :param root: the dataset directory.
    :param features: LeRobot's ``features`` of ``info.json`` (without the index columns, added here).
    :param fps: frames per second.
    """

    def __init__(self, root: str, features: Mapping[str, dict[str, Any]], fps: int, envfleet_meta: Mapping[str, Any]) -> None:
        self.root = root
        self.fps = int(fps)
        self.features = with_index_features(features)
        self.tasks: dict[str, int] = {}
        self.total_episodes = 0
        self.total_frames = 0
        self.envfleet = dict(envfleet_meta)
        self.stats: dict[str, dict[str, np.ndarray]] | None = None  # the counted episodes' statistics, aggregated
        info_path = os.path.join(root, "meta", "info.json")
        if os.path.exists(info_path):
            self._reopen(info_path)
        else:
            os.makedirs(os.path.join(root, "meta"), exist_ok=True)
            self._write_info()
            self.write_envfleet_meta({})

    def _reopen(self, info_path: str) -> None:
        import pyarrow.parquet as pq

        info = read_json(info_path)
        why = append_refusal(self.root, self.features, self.fps)
        if why is not None:
            raise ValueError(why)
        self.total_episodes, self.total_frames = int(info["total_episodes"]), int(info["total_frames"])
        tasks_path = os.path.join(self.root, "meta", "tasks.parquet")
        if os.path.exists(tasks_path):
            table = pq.read_table(tasks_path)
            self.tasks = dict(zip(table.column("task").to_pylist(), table.column("task_index").to_pylist()))
        old = read_json(os.path.join(self.root, ENVFLEET_META))
        self.envfleet = {**old, **self.envfleet, "fingerprints": old.get("fingerprints", [])}
        self._restore_stats()

    def _restore_stats(self) -> None:
        """The dataset's statistics again from its counted episodes' rows, in order, as they were folded in.

        ``meta/stats.json`` is written just before ``info.json`` counts an episode; a run killed between
        the two leaves it one episode ahead, and reopening the dataset makes it agree again.
        """
        for row in counted_episodes(self.root):
            ep: dict[str, dict[str, np.ndarray]] = {}
            for column, value in row.items():
                if column.startswith("stats/") and value is not None:
                    feature, name = column[len("stats/") :].rsplit("/", 1)
                    ep.setdefault(feature, {})[name] = np.asarray(value)
            if ep:
                self.stats = ep if self.stats is None else dstats.aggregate([self.stats, ep])
        path = os.path.join(self.root, STATS_PATH)
        if self.stats is not None:
            write_json_atomic(path, dstats.to_json(self.stats))
        elif os.path.exists(path):
            os.remove(path)

    # ------------------------------------------------------------------ metadata
    def _write_info(self) -> None:
        info = {
            "codebase_version": CODEBASE_VERSION,
            "fps": self.fps,
            "features": self.features,
            "total_episodes": self.total_episodes,
            "total_frames": self.total_frames,
            "total_tasks": len(self.tasks),
            "chunks_size": CHUNKS_SIZE,
            "data_files_size_in_mb": 100,
            "video_files_size_in_mb": 200,
            "data_path": DATA_PATH,
            "video_path": VIDEO_PATH if any(f["dtype"] == "video" for f in self.features.values()) else None,
            "robot_type": None,
            "splits": {"train": f"0:{self.total_episodes}"} if self.total_episodes else {},
        }
        write_json_atomic(os.path.join(self.root, "meta", "info.json"), info)

    def write_envfleet_meta(self, update: Mapping[str, Any]) -> None:
        """Merge ``update`` into ``meta/envfleet.json`` (a ``fingerprint`` entry is appended to ``fingerprints``)."""
        update = dict(update)
        if "fingerprint" in update:
            self.envfleet.setdefault("fingerprints", []).append(update["fingerprint"])
        self.envfleet.update(update)
        write_json_atomic(os.path.join(self.root, ENVFLEET_META), self.envfleet)

    def _write_tasks(self, written: list[str]) -> None:
        import pyarrow as pa

        names = sorted(self.tasks, key=self.tasks.__getitem__)
        # LeRobot reads tasks.parquet with pandas, the task string as the frame's index: pandas' own metadata says so.
        pandas_meta = {
            "index_columns": ["task"],
            "column_indexes": [{"name": None, "field_name": None, "pandas_type": "unicode", "numpy_type": "object", "metadata": None}],
            "columns": [
                {"name": "task_index", "field_name": "task_index", "pandas_type": "int64", "numpy_type": "int64", "metadata": None},
                {"name": "task", "field_name": "task", "pandas_type": "unicode", "numpy_type": "object", "metadata": None},
            ],
            "attributes": {},
            "creator": {"library": "pyarrow", "version": pa.__version__},
            "pandas_version": "2.3.3",
        }
        schema = pa.schema([("task_index", pa.int64()), ("task", pa.string())], metadata={"pandas": json.dumps(pandas_meta)})
        table = pa.table({"task_index": [self.tasks[t] for t in names], "task": names}, schema=schema)
        self._write_parquet(table, os.path.join(self.root, "meta", "tasks.parquet"), written)

    # ------------------------------------------------------------------ episodes
    def append(self, episode: Episode) -> None:
        """Write one episode's videos, frames and row, then count it in ``info.json``.

        On an error the episode's files are removed and the dataset stays as it was.
        """
        written: list[str] = []
        try:
            self._append(episode, written)
        except BaseException:
            for path in written:
                for p in (path, path + ".part"):
                    if os.path.exists(p):
                        os.remove(p)
            raise

    def _append(self, ep: Episode, written: list[str]) -> None:
        import pyarrow as pa

        index = self.total_episodes
        where = {"chunk_index": index // CHUNKS_SIZE, "file_index": index % CHUNKS_SIZE}
        n = len(ep)
        row: dict[str, Any] = {"episode_index": index, "tasks": [ep.task], "length": n, "data/chunk_index": where["chunk_index"]}
        row["data/file_index"] = where["file_index"]
        row["dataset_from_index"], row["dataset_to_index"] = self.total_frames, self.total_frames + n
        columns: dict[str, Any] = {}
        for camera, frames in ep.images.items():
            key = video_key(camera)
            if self.features[key]["dtype"] == "image":
                columns[key] = _png_column(frames)
                continue
            path = os.path.join(self.root, VIDEO_PATH.format(video_key=key, **where))
            self._write_video(frames, path, written)
            row[f"videos/{key}/chunk_index"], row[f"videos/{key}/file_index"] = where["chunk_index"], where["file_index"]
            row[f"videos/{key}/from_timestamp"], row[f"videos/{key}/to_timestamp"] = 0.0, n / self.fps
        new_task = ep.task not in self.tasks
        task_index = self.tasks.setdefault(ep.task, len(self.tasks))
        if "observation.state" in self.features:
            columns["observation.state"] = _vector(ep.state, np.float32)
        columns["action"] = _vector(ep.action, np.float32)
        columns["next.reward"] = pa.array(np.asarray(ep.reward, dtype=np.float32))
        columns["next.done"] = pa.array(np.asarray(ep.done, dtype=bool))
        columns["next.success"] = pa.array(np.asarray(ep.success, dtype=bool))
        columns["timestamp"] = pa.array(np.arange(n, dtype=np.float32) / np.float32(self.fps))
        columns["frame_index"] = pa.array(np.arange(n, dtype=np.int64))
        columns["episode_index"] = pa.array(np.full(n, index, dtype=np.int64))
        columns["index"] = pa.array(np.arange(self.total_frames, self.total_frames + n, dtype=np.int64))
        columns["task_index"] = pa.array(np.full(n, task_index, dtype=np.int64))
        self._write_parquet(pa.table(columns), os.path.join(self.root, DATA_PATH.format(**where)), written)
        numeric = {k: c.to_numpy(zero_copy_only=False) for k, c in columns.items() if self.features[k]["dtype"] != "image"}
        numeric = {k: np.stack(list(v)) if v.dtype == object else v for k, v in numeric.items()}  # fixed-size lists: [n, width]
        ep_stats = dstats.episode_stats(numeric, {video_key(c): frames for c, frames in ep.images.items()})
        row.update(dstats.flatten(ep_stats))
        row.update({f"envfleet/{k}": v for k, v in ep.meta.items()})
        row["meta/episodes/chunk_index"], row["meta/episodes/file_index"] = where["chunk_index"], where["file_index"]
        self._write_parquet(pa.Table.from_pylist([row]), os.path.join(self.root, EPISODES_PATH.format(**where)), written)
        if new_task:
            try:
                self._write_tasks(written)
            except BaseException:
                del self.tasks[ep.task]
                raise
        # Its statistics join the dataset's (in the order LeRobot's writer folds them in), then info.json counts it.
        before = self.stats
        self.stats = ep_stats if before is None else dstats.aggregate([before, ep_stats])
        self.total_episodes += 1
        self.total_frames += n
        try:
            write_json_atomic(os.path.join(self.root, STATS_PATH), dstats.to_json(self.stats))
            self._write_info()
        except BaseException:
            self.total_episodes -= 1
            self.total_frames -= n
            self.stats = before
            raise

    @staticmethod
    def _write_parquet(table: Any, path: str, written: list[str]) -> None:
        import pyarrow.parquet as pq

        os.makedirs(os.path.dirname(path), exist_ok=True)
        written.append(path)
        pq.write_table(table, path + ".part", compression="snappy")
        os.replace(path + ".part", path)

    def video_options(self) -> dict[str, Any]:
        """The encoder settings of this dataset's videos (from ``meta/envfleet.json``)."""
        return dict(self.envfleet.get("video", {}))

    def _write_video(self, frames: list[np.ndarray], path: str, written: list[str]) -> None:
        import av

        opts = self.video_options()
        os.makedirs(os.path.dirname(path), exist_ok=True)
        written.append(path)
        height, width = frames[0].shape[:2]
        with av.open(path + ".part", "w", format="mp4") as container:
            stream: Any = container.add_stream(opts["codec"], rate=self.fps, options={"crf": str(opts["crf"])})
            stream.width, stream.height, stream.pix_fmt = width, height, opts["pix_fmt"]
            for image in frames:
                for packet in stream.encode(av.VideoFrame.from_ndarray(np.ascontiguousarray(image), format="rgb24")):
                    container.mux(packet)
            for packet in stream.encode():
                container.mux(packet)
        os.replace(path + ".part", path)
