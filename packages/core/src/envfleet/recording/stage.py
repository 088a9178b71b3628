"""``StageRecorder``: one stage's envs cut into episodes as they run, handed to the writer thread.

With ``frames: chunk`` a frame is one chunk step of one env: the observation the chunk was chosen
from (the reset's, or the previous step's), the action chunk sent (``[chunk, action_dim]``,
flattened), the chunk's summed reward, whether the episode ended in it and whether it had
succeeded by its end. With ``frames: step`` a frame is one sub-step: the observation before it
(the reset's, or the previous sub-step's: :mod:`.substeps`), its action ``[action_dim]``, its
reward, whether the episode ended at it and whether it had succeeded by then. Either way the
observation after an episode's last action is not a frame (no action follows it).

``keep: success`` writes only the episodes that succeeded (``success_once``) and were not cut by
a simulator restart; episodes shorter than ``min_length`` frames are not written. Both are counted
(``not_kept``, ``too_short``).

Only finished episodes are written. An episode that a reset cuts short before it ended (or
that is still running at close) is not written, and counted as ``unfinished_dropped``. An
episode cut by a simulator restart is written and marked: ``envfleet/sim_restarted`` True in
its row of ``meta/episodes`` and its index in ``meta/envfleet.json``'s ``sim_restarted_episodes``;
its last frame has ``next.done`` True. The replay from the same state id that follows the
restart is a new episode.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from ..errors import ConfigError
from ..fingerprint import fingerprint, protocol
from ..plugins import get_backend
from ..substeps import substep_spec
from .checks import MARKER, cameras, check_record_config, check_record_dir, dataset_root, is_envfleet_dataset, require_record_deps
from .lerobot import Episode, LeRobotDatasetFiles, append_refusal, video_key, with_index_features
from .options import RecordConfig, RecordFrames, RecordImages, RecordKeep
from .writer import DatasetWriter, RecordingError

__all__ = [
    "StageRecorder",
    "stage_recorder",
    "check_record_config",
    "check_record_dir",
    "is_envfleet_dataset",
    "require_record_deps",
    "dataset_root",
    "MARKER",
]


class StageRecorder:
    """Records one stage's finished episodes to ``{record.dir}/{mode}/rank_{rank}_stage_{stage}``.

    Built by :class:`~envfleet.shards.manager.ProcessEnvManager` when ``record.format`` is set
    (:meth:`for_stage`); checks the directory and the dependencies at once, before any step.

    :param section: the stage's env section (``train`` or ``val``) of the loaded config.
    :param obs_spec: the backend's observation spec.
    :param chunk: the configured chunk length (None: taken from the first step).
    :param task_of: state ids -> their task ids.
    :param backend: the stage's backend (its control rate, whether it hands out sub-step observations).
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
        backend: Any = None,
    ) -> None:
        cfg: RecordConfig = section.record
        check_record_config(section)
        self.cfg = cfg
        self.section = section
        self.per_step = RecordFrames(cfg.frames) is RecordFrames.step
        self.keep_success = RecordKeep(cfg.keep) is RecordKeep.success
        if int(cfg.min_length) < 1:
            raise ConfigError(f"train.record.min_length is {cfg.min_length}: expected an integer >= 1 (frames)")
        self.fps = self._fps(backend)
        self.fingerprinted = False  # a fingerprint reached meta/envfleet.json (finish_rollout, or close)
        self.state_ids: set[int] = set()
        self.root = dataset_root(str(cfg.dir), mode, rank, stage)
        check_record_dir(str(cfg.dir), self.root)
        self.cameras = cameras(obs_spec, cfg.image_keys)
        self.state_key = "state" if "state" in obs_spec else None
        self.spec = obs_spec
        self.substep_spec: dict[str, Any] = {}
        if self.per_step:
            if chunk is None:
                raise ConfigError("train.record.frames: step needs a fixed chunk length (actor.model.num_action_chunks)")
            self.substep_spec = substep_spec(section, obs_spec, chunk)
        self.n: int | None = None
        self.chunk, self.action_dim, self.task_of = chunk, int(action_dim), task_of
        if chunk is not None:  # a dataset this run cannot append to is refused now, not at its first episode
            why = append_refusal(self.root, with_index_features(self._features()), self.fps)
            if why is not None:
                raise ConfigError(why)
        self.base = {
            "seed": int(section.seed),
            "stage": int(stage),
            "rank": int(rank),
            "mode": mode,
            "backend": str(section.simulator_type),
        }
        self.unfinished_dropped = 0
        self.not_kept = 0  # finished episodes keep: success left out
        self.too_short = 0  # finished episodes under min_length frames
        self.sim_restarted: list[int] = []
        self._obs: list[dict[str, np.ndarray] | None] = []
        self._episodes: list[Episode | None] = []
        self.writer: DatasetWriter | None = None

    @classmethod
    def for_stage(cls, manager: Any) -> StageRecorder:
        """The recorder of a :class:`~envfleet.shards.manager.ProcessEnvManager`'s stage."""
        return cls(
            manager.env_cfg,
            manager.obs_spec,
            mode=manager.mode,
            rank=manager.rank,
            stage=manager.stage_id,
            chunk=manager.num_action_chunks,
            action_dim=manager.action_dim,
            task_of=lambda ids: manager._states_table().tasks_of(ids),
            backend=manager.spec,
        )

    def _fps(self, backend: Any) -> int:
        name = getattr(backend, "name", str(self.section.simulator_type))
        if self.per_step and not getattr(backend, "substep_observations", False):
            raise ConfigError(
                f"train.record.frames: step: backend {name!r} does not hand out its sub-steps' observations "
                "(BackendSpec.substep_observations); record frames: chunk"
            )
        if self.cfg.fps is not None:
            if int(self.cfg.fps) < 1:
                raise ConfigError(f"train.record.fps is {self.cfg.fps}: expected a positive integer, or null")
            return int(self.cfg.fps)
        if not self.per_step:
            return 10
        control = getattr(backend, "control_fps", None)
        if control is None:
            raise ConfigError(f"train.record.fps is null and backend {name!r} declares no control rate (BackendSpec.control_fps): set it")
        return int(round(float(control)))

    def cost(self) -> str:
        """What recording asks of the simulator, for the summary and the fingerprint."""
        if self.per_step:
            return "frames: step: the recorded envs render every sub-step (render: last is off for them)"
        return "frames: chunk: nothing more is rendered (a frame is the observation the chunk was chosen from)"

    # ------------------------------------------------------------------ dataset
    def _features(self) -> dict[str, dict[str, Any]]:
        feats: dict[str, dict[str, Any]] = {}
        as_images = RecordImages(self.cfg.images) is RecordImages.image
        for cam in self.cameras:
            h, w, c = (int(x) for x in self.spec[cam].shape)
            if as_images:
                feats[video_key(cam)] = {"dtype": "image", "shape": [h, w, c], "names": ["height", "width", "channels"]}
                continue
            info = {"video.height": h, "video.width": w, "video.codec": "h264" if "264" in self.cfg.video_codec else self.cfg.video_codec}
            info.update({"video.pix_fmt": self.cfg.pix_fmt, "video.fps": self.fps, "video.channels": c, "has_audio": False})
            info["is_depth_map"] = False
            feats[video_key(cam)] = {"dtype": "video", "shape": [h, w, c], "names": ["height", "width", "channels"], "info": info}
        if self.state_key is not None:
            feats["observation.state"] = {"dtype": "float32", "shape": [int(np.prod(self.spec["state"].shape))], "names": None}
        assert self.chunk is not None
        width = self.action_dim if self.per_step else self.chunk * self.action_dim
        feats["action"] = {"dtype": "float32", "shape": [width], "names": None}
        for name, dtype in (("next.reward", "float32"), ("next.done", "bool"), ("next.success", "bool")):
            feats[name] = {"dtype": dtype, "shape": [1], "names": None}
        return feats

    def _start_writer(self) -> DatasetWriter:
        features = self._features()
        frame = (
            "one frame per sub-step: the observation before it, then its action"
            if self.per_step
            else "one frame per chunk step: the observation the chunk was chosen from, then the chunk sent"
        )
        meta = {
            **self.base,
            "envfleet_dataset": 1,
            "frames": "step" if self.per_step else "chunk",
            "frame": frame,
            "recording_cost": self.cost(),
            "action_shape": [self.action_dim] if self.per_step else [self.chunk, self.action_dim],
            "video": {"codec": self.cfg.video_codec, "pix_fmt": self.cfg.pix_fmt, "crf": int(self.cfg.crf)},
        }
        return DatasetWriter(lambda: LeRobotDatasetFiles(self.root, features, self.fps, meta), self.cfg.queue_episodes, self.root)

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

    def _add(self, ep: Episode, obs: Mapping[str, np.ndarray], action: np.ndarray, reward: float, done: bool, success: bool) -> None:
        for cam in self.cameras:
            ep.images[cam].append(obs[cam])
        if self.state_key is not None:
            ep.state.append(obs[self.state_key].reshape(-1))
        ep.action.append(np.array(action, dtype=np.float32))
        ep.reward.append(float(reward))
        ep.done.append(bool(done))
        ep.success.append(bool(success))

    def _add_substeps(self, ep: Episode, i: int, actions: np.ndarray, result: Any, substeps: Mapping[str, np.ndarray]) -> None:
        """Env ``i``'s frames of one chunk, one per sub-step it simulated (up to the one its episode ended at)."""
        obs = self._obs[i]
        assert obs is not None
        ended = np.asarray(result.truncations[i], dtype=bool)
        if not self.section.ignore_terminations:
            ended = ended | np.asarray(result.terminations[i], dtype=bool)
        success = np.asarray(result.infos.get("success", result.terminations)[i], dtype=bool)
        succeeded = bool(ep.success[-1]) if len(ep) else False
        for k in range(actions.shape[1]):
            succeeded = succeeded or bool(success[k])
            self._add(ep, obs, actions[i, k], float(result.rewards[i, k]), bool(ended[k]), succeeded)
            if ended[k]:
                break
            obs = {key: np.array(substeps[key][i, k]) for key in obs}
        self._obs[i] = obs

    def on_step(self, actions: np.ndarray, result: Any, substeps: Mapping[str, np.ndarray] | None = None) -> None:
        """Add the step's frames to each running episode; hand finished episodes to the writer.

        :param substeps: the sub-step observations (``frames: step``; :mod:`.substeps`).
        """
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
            if restarted[i]:
                # The chunk's sub-steps were lost with the simulator: the episode ends at its last frame.
                if not self.per_step:
                    self._add(ep, obs, actions[i], float(rewards[i]), True, bool(success[i]))
                elif len(ep):
                    ep.done[-1] = True
                ep.meta["sim_restarted"] = True
                self._finish(ep, infos, i)
                self._begin(result.obs, i, ep.meta["state_id"], ep.meta["task_id"], result.task_descriptions[i])
                continue
            if self.per_step:
                assert substeps is not None, "frames: step needs the chunk's sub-step observations"
                self._add_substeps(ep, i, actions, result, substeps)
            else:
                self._add(ep, obs, actions[i], float(rewards[i]), bool(ended[i]), bool(success[i]))
            if ended[i]:
                self._finish(ep, infos, i)
                if reset_to[i] >= 0:
                    task = int(self.task_of(reset_to[i : i + 1])[0])
                    self._begin(result.obs, i, int(reset_to[i]), task, result.task_descriptions[i])
                else:
                    self._episodes[i], self._obs[i] = None, None
            else:
                self._obs[i] = self._copy_obs(result.obs, i)

    def _finish(self, ep: Episode, infos: Mapping[str, Any], i: int) -> None:
        restarted = bool(ep.meta["sim_restarted"])
        for key in ("success_once", "success_at_end", "episode_return"):
            if key in infos and not restarted:  # a restarted row's infos are its fresh reset's
                value = np.asarray(infos[key])[i]
                ep.meta[key] = float(value) if key == "episode_return" else bool(value)
        if restarted:  # what the episode's own frames say, up to the restart
            ep.meta["success_once"] = bool(any(ep.success))
            ep.meta["success_at_end"] = bool(ep.success[-1]) if len(ep) else False
            ep.meta["episode_return"] = float(sum(ep.reward))
        if len(ep) < int(self.cfg.min_length) or not len(ep):
            self.too_short += 1
            return
        if self.keep_success and (restarted or not ep.meta.get("success_once", False)):
            self.not_kept += 1  # a restart cut it: never kept as a success
            return
        if self.writer is None:
            self.writer = self._start_writer()

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
        counts = {"unfinished_dropped": self.unfinished_dropped, "not_kept": self.not_kept, "too_short": self.too_short}
        kind = {"frames_kind": "step" if self.per_step else "chunk", "fps": self.fps, "recording_cost": self.cost()}
        if self.writer is None:
            return {"root": self.root, "episodes": 0, "frames": 0, **counts, **kind}
        extra = dict(meta or {})
        self.fingerprinted = self.fingerprinted or "fingerprint" in extra

        def write_meta(dataset: LeRobotDatasetFiles) -> None:
            dataset.write_envfleet_meta({**extra, "sim_restarted_episodes": list(self.sim_restarted), **counts})

        self.writer.put(write_meta)
        self.writer.flush()
        ds = self.writer.dataset
        return {
            "root": self.root,
            "episodes": ds.total_episodes,
            "frames": ds.total_frames,
            "sim_restarted_episodes": list(self.sim_restarted),
            **counts,
            **kind,
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
                update.update(not_kept=self.not_kept, too_short=self.too_short)
                if not self.fingerprinted:
                    update.update(self._fingerprint(renderer))
                writer.put(lambda ds: ds.write_envfleet_meta(update))
            writer.close()

    def _fingerprint(self, renderer: Callable[[], Mapping[str, str]] | None) -> dict[str, Any]:
        try:
            seen: Mapping[str, str] = renderer() if renderer is not None else {"unknown": "the stage was stopped"}
        except Exception as exc:  # a renderer that cannot be asked is part of the record too
            seen = {"error": f"{type(exc).__name__}: {exc}"}
        parts = protocol(self.section, get_backend(str(self.section.simulator_type)), seen)
        return {"protocol": parts, "fingerprint": fingerprint(parts, self.state_ids)}


def stage_recorder(manager: Any) -> StageRecorder | None:
    """The recorder of a :class:`~envfleet.shards.manager.ProcessEnvManager`'s stage; None when its section records nothing."""
    return None if manager.env_cfg.record.format is None else StageRecorder.for_stage(manager)
