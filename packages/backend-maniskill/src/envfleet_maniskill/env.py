"""``ManiskillEnv``: ManiSkill3 envs in one shard process, reset to fixed episode seeds.

State id ``k`` of task ``train.task_name`` is ManiSkill's ``reset(seed=episode_seed_offset + k)``:
the same state id gives the same first observation, bit for bit, in any process.
Observations: ``full_image`` from the first of ``train.init_params.camera_names`` (the
task's ``base_camera``), ``wrist_image`` from the second (the ``hand_camera`` of
``panda_wristcam``), ``state`` the robot's joint positions then its TCP pose.

``render: last`` captures the cameras on the chunk's last sub-step only: the sub-steps
before it run with ManiSkill's state observation mode, which steps the same physics
and skips the cameras, so the final images are bit-identical to ``render: all``.

Where envs live (single envs on the CPU sim, one batched env on CUDA) is decided in
:mod:`envfleet_maniskill.device`, the only module that depends on the device.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from envfleet.batched_env import BatchedEnv
from envfleet.env import ChunkStepResult, EnvContext, ResetResult
from envfleet.validation import StateTable, check_actions, check_reset_ids

from . import brdf_lut, device
from .assets import refuse_downloads
from .gym_args import make_kwargs
from .plugin import instruction, observation_spec, task_name

# Imports inside functions: ManiSkill and gymnasium load in the shard only, when the env is built.

__all__ = ["ManiskillEnv", "DEFAULT_MAX_EPISODE_STEPS", "import_maniskill"]

#: Horizon when neither train.max_episode_steps nor the task's registration gives one.
DEFAULT_MAX_EPISODE_STEPS = 50


def import_maniskill() -> Any:
    """``import gymnasium`` and register ManiSkill's tasks; the install command when ManiSkill is missing."""
    try:
        import gymnasium
        import mani_skill.envs  # noqa: F401  (registers the tasks with gymnasium)
    except ModuleNotFoundError as exc:
        if (exc.name or "").split(".")[0] in ("mani_skill", "sapien"):
            raise ImportError("the maniskill backend needs ManiSkill in this interpreter: pip install envfleet-maniskill") from exc
        raise
    return gymnasium


class ManiskillEnv(BatchedEnv):
    """The ManiSkill backend's :class:`~envfleet.env.Env`. See the module doc."""

    supports_state = True

    def __init__(self, cfg: Any, ctx: EnvContext) -> None:
        section = cfg.maniskill
        self.num_envs = ctx.num_envs
        self.action_dim = ctx.action_dim
        self.task = task_name(cfg)
        self.placement = device.resolve(section)
        self.icd = device.prepare_rendering(self.placement, section.vulkan_icd)  # before sapien is imported
        refuse_downloads(self.task, section.robot_uids)
        gym = import_maniskill()
        self.brdf_lut = brdf_lut.use_from_env()  # SAPIEN's table computed once elsewhere, if given
        from mani_skill.utils.registration import REGISTERED_ENVS

        self._spec = observation_spec(cfg, ctx.num_envs)
        names = [str(n) for n in cfg.init_params.camera_names]
        self.cameras = {"full_image": names[0], **({"wrist_image": names[1]} if len(names) > 1 else {})}
        self.obs_mode = str(section.obs_mode)
        self.render_all = cfg.render == "all"
        self.flip_gripper = str(section.gripper_sign) == "libero"
        self.seed_offset = int(section.episode_seed_offset)
        self.num_state_ids = int(section.num_state_ids)
        self.description = instruction(cfg)
        registered = REGISTERED_ENVS[self.task].max_episode_steps if self.task in REGISTERED_ENVS else None
        horizon = cfg.max_episode_steps or registered or DEFAULT_MAX_EPISODE_STEPS
        h, w = self._spec["full_image"].shape[:2]
        kwargs = make_kwargs(section, self.placement.sim_backend, device.render_backend_arg(self.placement), h, w)
        kwargs["max_episode_steps"] = None  # envfleet counts the horizon (EpisodeTracker); ManiSkill's wrapper would truncate too
        self.batches = device.make_batches(self.placement, lambda n: gym.make(self.task, num_envs=n, **kwargs), ctx.num_envs)
        self._check_built()
        self.states = StateTable.contiguous(np.zeros(self.num_state_ids, dtype=np.int64))
        self.init_observations(self._spec)
        self.init_episodes(cfg, ctx, max_steps=int(horizon))
        self.fail_once = np.zeros(self.num_envs, dtype=bool)

    def _check_built(self) -> None:
        u = self.batches[0].u
        shape = u.single_action_space.shape if hasattr(u, "single_action_space") else u.action_space.shape
        if int(shape[-1]) != self.action_dim:
            raise ValueError(
                f"ManiSkill task {self.task} with control_mode {u.control_mode!r} takes actions of size {shape[-1]}, but "
                f"actor.model.action_dim is {self.action_dim}: set actor.model.action_dim={shape[-1]} or another train.maniskill.control_mode"
            )
        sensors = sorted(u._sensors)
        for key, camera in self.cameras.items():
            if camera not in sensors:
                raise ValueError(
                    f"train.init_params.camera_names names {camera!r} for {key}, but task {self.task} with robot "
                    f"{u.robot_uids!r} has cameras {sensors} (the hand_camera needs robot_uids panda_wristcam)"
                )
        dim = self.batches[0].proprio().shape[1]
        if dim != self._spec["state"].shape[0]:
            raise ValueError(
                f"the robot's state has {dim} entries, but the spec says {self._spec['state'].shape[0]}: set train.maniskill.state_dim={dim}"
            )

    # ------------------------------------------------------------------ protocol
    def reset_envs_to_state_ids(self, state_ids: np.ndarray, task_ids: np.ndarray | None = None) -> ResetResult:
        state_ids, _ = check_reset_ids(self.states, state_ids, task_ids, num_envs=self.num_envs)
        self._reset(np.arange(self.num_envs), state_ids)
        return ResetResult(
            obs=self.observations(), task_descriptions=self.descriptions(self._describe), infos={"state_id": state_ids.copy()}
        )

    def chunk_step(self, actions: np.ndarray) -> ChunkStepResult:
        actions = check_actions(actions, self.num_envs, self.action_dim)
        if self.flip_gripper:
            actions = actions.copy()
            actions[..., -1] *= -1.0
        chunk = actions.shape[1]
        t = self.tracker
        t.start_chunk(chunk)
        last: dict[int, dict[str, Any]] = {}  # batch -> the raw observation of the last sub-step it ran
        for k in range(chunk):
            live = t.active()
            success = np.zeros(self.num_envs, dtype=bool)
            fail = np.zeros(self.num_envs, dtype=bool)
            reward = np.zeros(self.num_envs, dtype=np.float32)
            for b, batch in enumerate(self.batches):
                if not live[batch.indices].any():
                    continue
                obs, r, s, f = batch.step(actions[batch.indices, k], self.render_all, self.obs_mode)
                reward[batch.indices], success[batch.indices], fail[batch.indices] = r, s, f
                last[b] = obs
            t.record(k, live, success, fail=fail, reward=reward)
            self.fail_once |= fail & live
        for b, obs in last.items():
            batch = self.batches[b]
            # render last: the cameras are captured once, now, at the state of the env's last sub-step.
            self._write(batch, obs if self.render_all else batch.capture(self.obs_mode))
        flags = t.end_chunk()
        flags.infos["fail_once"] = self.fail_once.copy()
        if self.cycle is not None and flags.ended.any():
            ended = np.flatnonzero(flags.ended)
            sids = self.next_state_ids(ended)
            self._reset(ended, sids)
            flags.infos["reset_state_id"][ended] = sids
        return flags.to_result(self.observations(), self.descriptions(self._describe))

    def renderer_info(self) -> dict[str, str]:
        return {
            "platform": "vulkan",
            "render_backend": self.placement.render_backend,
            "vk_icd": self.icd,
            "brdf_lut": self.brdf_lut or "computed",
        }

    def get_state(self) -> Any:
        return {**self.episode_state(), "batches": [b.get_state() for b in self.batches], "fail_once": self.fail_once.copy()}

    def load_state(self, state: Any) -> None:
        self.load_episode_state(state)
        for batch, saved in zip(self.batches, state["batches"]):
            batch.set_state(saved, self.obs_mode)
        self.fail_once = np.array(state["fail_once"], copy=True)

    def close(self) -> None:
        for batch in getattr(self, "batches", []):
            batch.close()
        self.batches = []

    # ------------------------------------------------------------------ internals
    def _describe(self, task: int) -> str:
        return self.description

    def _reset(self, envs: np.ndarray, state_ids: np.ndarray) -> None:
        by_env = dict(zip(envs.tolist(), state_ids.tolist()))
        for batch in self.batches:
            local = np.flatnonzero(np.isin(batch.indices, envs))
            if not local.size:
                continue
            seeds = np.array([self.seed_offset + by_env[int(i)] for i in batch.indices[local]], dtype=np.int64)
            self._write(batch, batch.reset(local, seeds), rows=local)
        self.tracker.begin(envs, state_ids, np.zeros(len(envs), dtype=np.int64))
        self.fail_once[envs] = False

    def _write(self, batch: device.SimBatch, raw: dict[str, Any] | None, rows: np.ndarray | None = None) -> None:
        """Copy a batch's images (``raw``; None: none were rendered) and state into the observation arrays."""
        local = np.arange(len(batch.indices)) if rows is None else rows
        envs = batch.indices[local]
        if raw is not None:
            for key, camera in self.cameras.items():
                self.obs[key][envs] = batch.images(raw, camera)[local]
        self.obs["state"][envs] = batch.proprio()[local]
