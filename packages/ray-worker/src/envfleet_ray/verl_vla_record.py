"""verl-vla's ``pop_lerobot_dataset`` over envfleet's recording: one LeRobot dataset per rank.

verl-vla 8a18e3f's env worker, with ``recorder.recorders: [lerobot]``, records every episode it
steps, and ``pop_lerobot_dataset()`` returns each rank's episodes completed since the last call as
one dataset, ``{"root": {lerobot.root}/{repo_id}_rank_{rank}, "repo_id": {repo_id}_rank_{rank}}``
(``None`` when there are none); its ``TrainCluster`` merges the ranks' datasets into one.

envfleet records the same episodes with ``train.record`` (one dataset per mode, rank and stage
under ``{lerobot.root}/{repo_id}_envfleet``, see docs/recording.md). :class:`RankDatasetPopper`
copies the episodes of one rank's datasets not yet handed out into a fresh dataset at verl-vla's
path, in mode, stage and episode order, with envfleet's per-episode columns: frames, actions and
task strings as recorded (videos decoded and encoded again with the recording's codec, lossless
by default).
"""

from __future__ import annotations

import glob
import os
import shutil
from typing import Any

import numpy as np

from envfleet.errors import InvalidInputError
from envfleet.recording import Episode, LeRobotDatasetFiles, read_episodes, read_frames, read_info

# Imports inside functions: pyarrow (the record extra) loads only when a dataset is handed out.

__all__ = ["RankDatasetPopper"]

_DERIVED = ("timestamp", "frame_index", "episode_index", "index", "task_index")  # written by LeRobotDatasetFiles itself
_ENVFLEET_META = os.path.join("meta", "envfleet.json")


def _episode(root: str, row: dict[str, Any], tasks: dict[int, str]) -> Episode:
    """Episode ``row`` of the dataset at ``root`` read back as the writer takes it."""
    frames = read_frames(root, row)
    images = {k.removeprefix("observation.images."): list(v) for k, v in frames.items() if k.startswith("observation.images.")}
    state = list(frames["observation.state"]) if "observation.state" in frames else []
    meta = {k.removeprefix("envfleet/"): v for k, v in row.items() if k.startswith("envfleet/")}
    task_index = int(frames["task_index"][0]) if len(frames["task_index"]) else 0
    return Episode(
        images=images,
        state=state,
        action=list(frames["action"]),
        reward=[float(x) for x in frames["next.reward"]],
        done=[bool(x) for x in frames["next.done"]],
        success=[bool(x) for x in frames["next.success"]],
        task=tasks.get(task_index, row["tasks"][0]),
        meta=meta,
    )


def _tasks(root: str) -> dict[int, str]:
    import pyarrow.parquet as pq

    path = os.path.join(root, "meta", "tasks.parquet")
    if not os.path.exists(path):
        return {}
    table = pq.read_table(path)
    return dict(zip(table.column("task_index").to_pylist(), table.column("task").to_pylist()))


class RankDatasetPopper:
    """Hands out one rank's recorded episodes, each once, as verl-vla's per-rank LeRobot dataset.

    :param record_dir: envfleet's ``train.record.dir``.
    :param rank: the worker's rank.
    :param root: verl-vla's ``recorder.lerobot.root``.
    :param repo_id: verl-vla's ``recorder.lerobot.repo_id``.
    """

    def __init__(self, record_dir: str, rank: int, root: str, repo_id: str) -> None:
        self.record_dir, self.rank = record_dir, int(rank)
        self.repo_id = f"{repo_id}_rank_{self.rank}"
        self.out = os.path.join(root, self.repo_id)
        self.popped: dict[str, int] = {}  # source dataset -> episodes handed out

    def sources(self) -> list[str]:
        """This rank's datasets under the record directory, by mode then stage."""
        pattern = os.path.join(self.record_dir, "*", f"rank_{self.rank}_stage_*", _ENVFLEET_META)
        found = [os.path.dirname(os.path.dirname(p)) for p in glob.glob(pattern)]
        return sorted(found, key=lambda p: (os.path.basename(os.path.dirname(p)), int(p.rsplit("_", 1)[1])))

    def pop(self) -> dict[str, str] | None:
        """The episodes recorded since the last call as one dataset at ``{root}/{repo_id}_rank_{rank}``
        (replacing the one handed out before), or None when there are none.

        :raises InvalidInputError: the output path holds something that is not an envfleet dataset,
            or the rank's datasets have different features.
        """
        fresh = []
        for src in self.sources():
            rows = read_episodes(src)
            fresh += [(src, row) for row in rows[self.popped.get(src, 0) :]]
        if not fresh:
            return None
        if os.path.lexists(self.out):
            if not os.path.isdir(self.out) or not os.path.exists(os.path.join(self.out, _ENVFLEET_META)):
                raise InvalidInputError(
                    f"{self.out} exists and is not a dataset envfleet handed out: move it, or choose another recorder.lerobot.root"
                )
            shutil.rmtree(self.out)
        first = read_info(fresh[0][0])
        features = {k: v for k, v in first["features"].items() if k not in _DERIVED}
        meta = {k: v for k, v in first["envfleet"].items() if k not in ("stage", "fingerprints", "sim_restarted_episodes")}
        dataset = LeRobotDatasetFiles(self.out, features, int(first["fps"]), {**meta, "repo_id": self.repo_id, "sources": []})
        sources: dict[str, list[int]] = {}
        tasks: dict[str, dict[int, str]] = {}
        for src, row in fresh:
            info = read_info(src)
            if {k: v for k, v in info["features"].items() if k not in _DERIVED} != features:
                raise InvalidInputError(f"{src} has other features than {fresh[0][0]}: they cannot go into one dataset for verl-vla")
            tasks.setdefault(src, _tasks(src))
            dataset.append(_episode(src, row, tasks[src]))
            sources.setdefault(src, []).append(int(row["episode_index"]))
            self.popped[src] = int(row["episode_index"]) + 1
        restarted = [i for i, (_, row) in enumerate(fresh) if bool(row.get("envfleet/sim_restarted"))]
        dataset.write_envfleet_meta(
            {
                "sources": [{"root": s, "episodes": list(map(int, np.asarray(ix)))} for s, ix in sources.items()],
                "sim_restarted_episodes": restarted,
                "fingerprints": [f for s in sources for f in read_info(s)["envfleet"].get("fingerprints", [])],
            }
        )
        return {"root": self.out, "repo_id": self.repo_id}
