"""``StageRecorder``: one stage's envs cut into episodes as they run, handed to the writer thread.

A frame is one chunk step of one env: the observation the chunk was chosen from (the reset's,
or the previous step's), the action chunk sent (``[chunk, action_dim]``, flattened), the chunk's
summed reward, whether the episode ended in it and whether it had succeeded by its end. The
observation after an episode's last chunk is not a frame (no action follows it).

Only finished episodes are written. An episode that a reset cuts short before it ended (or
that is still running at close) is not written, and counted as ``unfinished_dropped``. An
episode cut by a simulator restart is written and marked: ``envfleet/sim_restarted`` True in
its row of ``meta/episodes`` and its index in ``meta/envfleet.json``'s ``sim_restarted_episodes``;
its last frame has ``next.done`` True. The replay from the same state id that follows the
restart is a new episode.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from ..errors import ConfigError
from .lerobot import ENVFLEET_META, Episode, LeRobotDatasetFiles, read_json, video_key
from .options import RecordConfig, RecordFormat
from .writer import DatasetWriter, RecordingError

__all__ = [
    "StageRecorder",
    "check_record_config",
    "check_record_dir",
    "is_envfleet_dataset",
    "require_record_deps",
    "dataset_root",
    "MARKER",
]

MARKER = "envfleet-record.json"  # in train.record.dir: says the directory holds envfleet's datasets


def dataset_root(record_dir: str, mode: str, rank: int, stage: int) -> str:
    """Where the dataset of one worker rank and stage goes."""
    return os.path.join(record_dir, mode, f"rank_{rank}_stage_{stage}")


def check_record_dir(record_dir: str, root: str | None) -> None:
    """Refuse a ``train.record.dir`` that holds something other than envfleet's datasets; mark it as envfleet's.

    :raises ConfigError: the path is a file, a non-empty directory without envfleet's marker, or a
        dataset directory without ``meta/envfleet.json``.
    """
    if os.path.exists(record_dir) and not os.path.isdir(record_dir):
        raise ConfigError(f"train.record.dir {record_dir!r} is a file; expected a directory for envfleet's datasets")
    if os.path.isdir(record_dir) and os.listdir(record_dir) and not os.path.exists(os.path.join(record_dir, MARKER)):
        raise ConfigError(
            f"train.record.dir {record_dir!r} exists and is not an envfleet dataset directory (no {MARKER}); "
            "choose a new or empty directory"
        )
    if root is not None and os.path.exists(root) and os.listdir(root) and not os.path.exists(os.path.join(root, ENVFLEET_META)):
        raise ConfigError(f"{root!r} exists and is not an envfleet dataset (no {ENVFLEET_META}); choose another train.record.dir")
    try:
        os.makedirs(record_dir, exist_ok=True)
        _mark(record_dir)
    except OSError as exc:
        raise RecordingError(f"train.record.dir {record_dir!r} cannot be written: {exc}") from exc


def _mark(record_dir: str) -> None:
    """Create ``record_dir``'s marker once, whichever of several workers starting together gets there first.

    The marker is created exclusively and written in one call: no temporary file appears in the directory,
    where another worker's :func:`check_record_dir` would see a non-empty directory without the marker.
    """
    body = json.dumps({"format": "lerobot", "layout": "{mode}/rank_{rank}_stage_{stage}"}).encode()
    try:
        fd = os.open(os.path.join(record_dir, MARKER), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        return
    try:
        os.write(fd, body)
    finally:
        os.close(fd)


def require_record_deps(cfg: RecordConfig) -> None:
    """Raise :class:`~envfleet.errors.ConfigError` with the install command if recording cannot work here."""
    try:
        import av
        import pyarrow  # noqa: F401
    except ImportError as exc:
        raise ConfigError(f"train.record needs PyAV and pyarrow ({exc}): pip install 'envfleet[record]'") from None
    if cfg.video_codec not in av.codecs_available:
        raise ConfigError(f"train.record.video_codec {cfg.video_codec!r} is not an encoder of this PyAV build; e.g. libx264rgb, libx264")


def check_record_config(section: Any) -> None:
    """Check an env section's ``record`` before anything starts: the dependencies, the codec and the directory.

    :raises ConfigError: an unknown format, a missing dependency or codec, a directory that is not envfleet's.
    """
    cfg = section.record
    if cfg.format is None:
        return
    if RecordFormat(cfg.format) is not RecordFormat.lerobot:
        raise ConfigError(f"train.record.format {cfg.format!r}: expected one of {[f.value for f in RecordFormat]} or null")
    require_record_deps(cfg)
    check_record_dir(str(cfg.dir), None)


def _cameras(spec: Mapping[str, Any], chosen: Any) -> list[str]:
    images = [k for k, s in spec.items() if np.dtype(s.dtype) == np.uint8 and len(s.shape) == 3 and s.shape[-1] == 3]
    if chosen is None:
        return images
    keys = [str(k) for k in chosen]
    wrong = [k for k in keys if k not in images]
    if wrong:
        raise ConfigError(f"train.record.image_keys is {keys}: {wrong} not among the backend's camera images {images}")
    return keys


class StageRecorder:
    """Records one stage's finished episodes to ``{record.dir}/{mode}/rank_{rank}_stage_{stage}``.

    Built by :class:`~envfleet.shards.manager.ProcessEnvManager` when ``record.format`` is set;
    checks the directory and the dependencies at once, before any step.

    :param section: the stage's env section (``train`` or ``val``) of the loaded config.
    :param obs_spec: the backend's observation spec.
    :param chunk: the configured chunk length (None: taken from the first step).
    :param task_of: state ids -> their task ids.
    """

    def __init__(
        self,
        section: Any,
        obs_spec: Mapping[str, Any],
        *,
        mode: str,
        rank: int,
        stage: int,
        chunk: int | None,
        action_dim: int,
        task_of: Callable[[np.ndarray], np.ndarray],
    ) -> None:
        cfg: RecordConfig = section.record
        check_record_config(section)
        self.cfg = cfg
        self.section = section
        self.fingerprinted = False  # a fingerprint reached meta/envfleet.json (finish_rollout, or close)
        self.state_ids: set[int] = set()
        self.root = dataset_root(str(cfg.dir), mode, rank, stage)
        check_record_dir(str(cfg.dir), self.root)
        self.cameras = _cameras(obs_spec, cfg.image_keys)
        self.state_key = "state" if "state" in obs_spec else None
        self.spec = obs_spec
        self.n: int | None = None
        self.chunk, self.action_dim, self.task_of = chunk, int(action_dim), task_of
        self.base = {
            "seed": int(section.seed),
            "stage": int(stage),
            "rank": int(rank),
            "mode": mode,
            "backend": str(section.simulator_type),
        }
        self.unfinished_dropped = 0
        self.sim_restarted: list[int] = []
        self._obs: list[dict[str, np.ndarray] | None] = []
        self._episodes: list[Episode | None] = []
        self.writer: DatasetWriter | None = None

    # ------------------------------------------------------------------ dataset
    def _features(self) -> dict[str, dict[str, Any]]:
        feats: dict[str, dict[str, Any]] = {}
        for cam in self.cameras:
            h, w, c = (int(x) for x in self.spec[cam].shape)
            info = {"video.height": h, "video.width": w, "video.codec": "h264" if "264" in self.cfg.video_codec else self.cfg.video_codec}
            info.update({"video.pix_fmt": self.cfg.pix_fmt, "video.fps": int(self.cfg.fps), "video.channels": c, "has_audio": False})
            info["is_depth_map"] = False
            feats[video_key(cam)] = {"dtype": "video", "shape": [h, w, c], "names": ["height", "width", "channels"], "info": info}
        if self.state_key is not None:
            feats["observation.state"] = {"dtype": "float32", "shape": [int(np.prod(self.spec["state"].shape))], "names": None}
        assert self.chunk is not None
        feats["action"] = {"dtype": "float32", "shape": [self.chunk * self.action_dim], "names": None}
        for name, dtype in (("next.reward", "float32"), ("next.done", "bool"), ("next.success", "bool")):
            feats[name] = {"dtype": dtype, "shape": [1], "names": None}
        return feats

    def _start_writer(self) -> DatasetWriter:
        features = self._features()
        meta = {
            **self.base,
            "envfleet_dataset": 1,
            "frame": "one frame per chunk step: the observation the chunk was chosen from, then the chunk sent",
            "action_shape": [self.chunk, self.action_dim],
            "video": {"codec": self.cfg.video_codec, "pix_fmt": self.cfg.pix_fmt, "crf": int(self.cfg.crf)},
        }
        return DatasetWriter(lambda: LeRobotDatasetFiles(self.root, features, int(self.cfg.fps), meta), self.cfg.queue_episodes, self.root)

    # ------------------------------------------------------------------ hooks
    def _copy_obs(self, obs: Mapping[str, np.ndarray], i: int) -> dict[str, np.ndarray]:
        keys = [*self.cameras, *([self.state_key] if self.state_key else [])]
        return {k: np.array(obs[k][i]) for k in keys}

    def _begin(self, obs: Mapping[str, np.ndarray], i: int, state_id: int, task_id: int, task: str) -> None:
        self._obs[i] = self._copy_obs(obs, i)
        self.state_ids.add(int(state_id))
        meta = {**self.base, "state_id": int(state_id), "task_id": int(task_id), "sim_restarted": False}
        self._episodes[i] = Episode({c: [] for c in self.cameras}, [], [], [], [], [], str(task), meta)

    def on_reset(self, result: Any, state_ids: np.ndarray, env_ids: np.ndarray | None = None) -> None:
        """Begin new episodes for the envs reset (every env when ``env_ids`` is None)."""
        n = len(result.task_descriptions)
        if self.n is None:
            self.n = n
            self._obs, self._episodes = [None] * n, [None] * n
        rows = np.arange(n) if env_ids is None else np.asarray(env_ids, dtype=np.int64)
        ids = np.asarray(state_ids, dtype=np.int64)
        tasks = self.task_of(ids)
        for j, i in enumerate(rows):
            if self._episodes[i] is not None and len(self._episodes[i]):  # type: ignore[arg-type]
                self.unfinished_dropped += 1
            self._begin(result.obs, int(i), int(ids[j]), int(tasks[j]), result.task_descriptions[i])

    def on_step(self, actions: np.ndarray, result: Any) -> None:
        """Add the step's frame to each running episode; hand finished episodes to the writer."""
        if self.writer is not None:
            self.writer.raise_error()
        if self.n is None:
            return
        if self.chunk is None:
            self.chunk = int(actions.shape[1])
        if actions.shape[1] != self.chunk:
            raise RecordingError(
                f"recording {self.root}: a chunk of {actions.shape[1]} actions after chunks of {self.chunk}; "
                "recording needs a fixed chunk length (actor.model.num_action_chunks)"
            )
        infos = result.infos
        zeros = np.zeros(self.n, dtype=bool)
        ended = np.asarray(infos.get("episode_ended", zeros), dtype=bool)
        restarted = np.asarray(infos.get("sim_restarted", zeros), dtype=bool)
        success = np.asarray(infos.get("success_once", zeros), dtype=bool)
        reset_to = np.asarray(infos.get("reset_state_id", np.full(self.n, -1)), dtype=np.int64)
        rewards = np.asarray(result.rewards, dtype=np.float32).sum(axis=1)
        for i in range(self.n):
            ep, obs = self._episodes[i], self._obs[i]
            if ep is None or obs is None:
                continue  # finished: stepped on until its next reset, not recorded
            for cam in self.cameras:
                ep.images[cam].append(obs[cam])
            if self.state_key is not None:
                ep.state.append(obs[self.state_key].reshape(-1))
            ep.action.append(np.array(actions[i], dtype=np.float32))
            ep.reward.append(float(rewards[i]))
            ep.done.append(bool(ended[i] or restarted[i]))
            ep.success.append(bool(success[i]))
            if restarted[i]:
                ep.meta["sim_restarted"] = True
                self._finish(ep, infos, i)
                self._begin(result.obs, i, ep.meta["state_id"], ep.meta["task_id"], result.task_descriptions[i])
            elif ended[i]:
                self._finish(ep, infos, i)
                if reset_to[i] >= 0:
                    task = int(self.task_of(reset_to[i : i + 1])[0])
                    self._begin(result.obs, i, int(reset_to[i]), task, result.task_descriptions[i])
                else:
                    self._episodes[i], self._obs[i] = None, None
            else:
                self._obs[i] = self._copy_obs(result.obs, i)

    def _finish(self, ep: Episode, infos: Mapping[str, Any], i: int) -> None:
        for key in ("success_once", "success_at_end", "episode_return"):
            if key in infos:
                value = np.asarray(infos[key])[i]
                ep.meta[key] = float(value) if key == "episode_return" else bool(value)
        if self.writer is None:
            self.writer = self._start_writer()
        restarted = bool(ep.meta["sim_restarted"])

        def write(dataset: LeRobotDatasetFiles) -> None:
            if restarted:
                self.sim_restarted.append(dataset.total_episodes)
            dataset.append(ep)

        self.writer.put(write)

    # ------------------------------------------------------------------ flush and close
    def flush(self, meta: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """Wait for the writer; merge ``meta`` (e.g. ``fingerprint``, ``protocol``) into ``meta/envfleet.json``.

        Returns where the dataset is and what it holds.
        """
        if self.writer is None:
            return {"root": self.root, "episodes": 0, "frames": 0, "unfinished_dropped": self.unfinished_dropped}
        extra = dict(meta or {})
        self.fingerprinted = self.fingerprinted or "fingerprint" in extra

        def write_meta(dataset: LeRobotDatasetFiles) -> None:
            dataset.write_envfleet_meta(
                {**extra, "sim_restarted_episodes": list(self.sim_restarted), "unfinished_dropped": self.unfinished_dropped}
            )

        self.writer.put(write_meta)
        self.writer.flush()
        ds = self.writer.dataset
        return {
            "root": self.root,
            "episodes": ds.total_episodes,
            "frames": ds.total_frames,
            "sim_restarted_episodes": list(self.sim_restarted),
            "unfinished_dropped": self.unfinished_dropped,
            "queue_full": self.writer.queue_full,
            "queue_wait_s": self.writer.queue_wait_s,
        }

    def close(self, renderer: Callable[[], Mapping[str, str]] | None = None) -> None:
        """Write what is queued and stop the writer (episodes still running are dropped). Safe to call twice.

        :param renderer: asks the stage what renders it; used for the fingerprint when no
            ``finish_rollout`` gave one (a face that never calls it, such as the gymnasium face).
        """
        self.unfinished_dropped += sum(1 for ep in self._episodes if ep is not None and len(ep))
        self._episodes = [None] * len(self._episodes)
        if self.writer is not None:
            writer, self.writer = self.writer, None
            if not writer.failed:
                update: dict[str, Any] = {"sim_restarted_episodes": list(self.sim_restarted), "unfinished_dropped": self.unfinished_dropped}
                if not self.fingerprinted:
                    update.update(self._fingerprint(renderer))
                writer.put(lambda ds: ds.write_envfleet_meta(update))
            writer.close()

    def _fingerprint(self, renderer: Callable[[], Mapping[str, str]] | None) -> dict[str, Any]:
        from ..fingerprint import fingerprint, protocol
        from ..plugins import get_backend

        try:
            seen: Mapping[str, str] = renderer() if renderer is not None else {"unknown": "the stage was stopped"}
        except Exception as exc:  # a renderer that cannot be asked is part of the record too
            seen = {"error": f"{type(exc).__name__}: {exc}"}
        parts = protocol(self.section, get_backend(str(self.section.simulator_type)), seen)
        return {"protocol": parts, "fingerprint": fingerprint(parts, self.state_ids)}


def is_envfleet_dataset(root: str) -> bool:
    """Whether ``root`` holds a dataset envfleet recorded."""
    path = os.path.join(root, ENVFLEET_META)
    return os.path.exists(path) and bool(read_json(path).get("envfleet_dataset"))
