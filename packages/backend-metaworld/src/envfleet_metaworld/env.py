"""``MetaworldEnv``: one MetaWorld env in one shard process, reset to exact task variations.

State id ``t * 50 + i`` is variation ``i`` of task ``t`` of the suite: entry ``i`` of
``metaworld.MT1(task, seed=train.seed).train_tasks``, applied with ``set_task``
before ``reset``. MetaWorld ignores gymnasium's ``reset(seed=...)``, and an env from
``gym.make`` draws a new variation on every reset, so the env class is built
directly and its task set each time.

The env is rebuilt when a reset moves it to another task (each task is its own
class); the old env, and with it its renderer, is freed first. One env lives in a
process: freeing a second env's renderer in the same process makes the first one's
frames black.

MetaWorld's ``observation_space`` has all-zero bounds on the goal entries, so
observations are never checked against it; ``state`` is ``obs[:4]``. MetaWorld
raises on a step past its 500-step limit: the horizon plus the settle steps are
kept within it (see :func:`envfleet_metaworld.plugin.horizon`).
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from envfleet.batched_env import BatchedEnv
from envfleet.env import ChunkStepResult, EnvContext, ResetResult
from envfleet.validation import StateTable, check_actions, check_reset_ids

from .plugin import ACTION_DIM, STATE_DIM, horizon, observation_spec, suite_tasks
from .tasks import INSTRUCTIONS

# Imports inside functions: MetaWorld and MuJoCo load in the shard only, under the simulator's own venv.

__all__ = ["MetaworldEnv", "VARIATIONS_PER_TASK", "import_metaworld"]

#: ``MT1(task).train_tasks`` holds 50 variations of each task.
VARIATIONS_PER_TASK = 50


def import_metaworld() -> Any:
    """``import metaworld``, with the missing package named when it fails.

    MetaWorld 3.1.1 imports ``packaging`` without declaring it, so a clean venv fails here.
    """
    try:
        import metaworld
    except ModuleNotFoundError as exc:
        missing = (exc.name or "").split(".")[0]
        if missing == "packaging":
            raise ImportError("metaworld 3.1.1 needs the 'packaging' package, which it does not declare: pip install packaging") from exc
        if missing in ("metaworld", "mujoco"):
            raise ImportError(
                f"the metaworld backend needs {missing!r} in this interpreter: build its venv with `envfleet venv metaworld` "
                "and set train.simulator_python to the path it prints"
            ) from exc
        raise
    return metaworld


class MetaworldEnv(BatchedEnv):
    """The MetaWorld backend's :class:`~envfleet.env.Env` (a :class:`~envfleet.batched_env.BatchedEnv`). See the module doc."""

    supports_state = True

    def __init__(self, cfg: Any, ctx: EnvContext) -> None:
        if ctx.num_envs != 1:
            raise ValueError(f"MetaworldEnv holds one env per process, got num_envs={ctx.num_envs}")
        section = cfg.metaworld
        os.environ.setdefault("MUJOCO_GL", str(section.mujoco_gl))
        os.environ.setdefault("PYOPENGL_PLATFORM", os.environ["MUJOCO_GL"])
        self._metaworld = import_metaworld()
        self.num_envs = 1
        self.action_dim = ACTION_DIM
        self.ctx = ctx
        self.tasks = suite_tasks(cfg)
        self.seed = int(cfg.seed)
        self.settle_steps = int(cfg.settle_steps)
        self.flip = bool(cfg.flip_images)
        self.render_all = cfg.render == "all"
        self.camera = str(cfg.init_params.camera_names[0])
        self.corner2_pos = None if section.corner2_pos is None else np.asarray(list(section.corner2_pos), dtype=np.float64)
        self.reward_version = str(section.reward_function_version)
        spec = observation_spec(cfg, 1)
        self._h, self._w = spec["full_image"].shape[:2]
        self.states = StateTable.contiguous(np.arange(len(self.tasks) * VARIATIONS_PER_TASK, dtype=np.int64) // VARIATIONS_PER_TASK)
        self.init_episodes(cfg, ctx, horizon(cfg))
        self.init_observations(spec)
        self._mt1: dict[str, Any] = {}
        self._env: Any = None
        self._task: str | None = None
        self._sid = -1
        self._raw = np.zeros(STATE_DIM)

    # ------------------------------------------------------------------ the Env contract
    def reset_envs_to_state_ids(self, state_ids: np.ndarray, task_ids: np.ndarray | None = None) -> ResetResult:
        state_ids, _ = check_reset_ids(self.states, state_ids, task_ids, num_envs=1)
        self._reset_to(int(state_ids[0]))
        return ResetResult(obs=self.observations(), task_descriptions=self._descriptions(), infos={"state_id": state_ids.copy()})

    def chunk_step(self, actions: np.ndarray) -> ChunkStepResult:
        check_actions(actions, 1, ACTION_DIM)
        chunk = actions.shape[1]
        t = self.tracker
        t.start_chunk(chunk)
        moved = False
        for k in range(chunk):
            live = t.active()
            success = np.zeros(1, dtype=bool)
            if live[0]:
                raw, _, _, _, info = self._env.step(np.asarray(actions[0, k], dtype=np.float32))
                success[0] = bool(info["success"])
                self._raw = raw
                moved = True
                if self.render_all:
                    self._render()
            t.record(k, live, success)
        if moved and not self.render_all:
            self._render()
        flags = t.end_chunk()
        if self.cycle is not None and flags.ended[0]:
            sid = int(self.next_state_ids(np.array([0]))[0])
            self._reset_to(sid)
            flags.infos["reset_state_id"][0] = sid
        return flags.to_result(self.observations(), self._descriptions())

    def renderer_info(self) -> dict[str, str]:
        return {"platform": os.environ.get("MUJOCO_GL", "")}

    def get_state(self) -> Any:
        import mujoco

        env = self._env
        if env is None:
            return {"sid": None, **self.episode_state()}
        what = mujoco.mjtState.mjSTATE_INTEGRATION
        physics = np.empty(mujoco.mj_stateSize(env.model, what), dtype=np.float64)
        mujoco.mj_getState(env.model, env.data, physics, what)
        return {
            "sid": self._sid,
            "physics": physics,
            "path_length": int(env.curr_path_length),
            "prev_obs": np.array(env._prev_obs, copy=True),
            "raw": np.array(self._raw, copy=True),
            **self.episode_state(),
        }

    def load_state(self, state: Any) -> None:
        import mujoco

        if state["sid"] is not None:
            # A reset to the same variation rebuilds what MetaWorld derives at reset (targets, initial poses);
            # the physics state and the step counters then continue the episode.
            self._reset_to(int(state["sid"]))
            env = self._env
            mujoco.mj_setState(env.model, env.data, state["physics"], mujoco.mjtState.mjSTATE_INTEGRATION)
            mujoco.mj_forward(env.model, env.data)
            env.curr_path_length = int(state["path_length"])
            env._prev_obs = np.array(state["prev_obs"], copy=True)
            self._raw = np.array(state["raw"], copy=True)
        self.load_episode_state(state)

    def close(self) -> None:
        if self._env is not None:
            self._env.close()
            self._env = None
            self._task = None

    # ------------------------------------------------------------------ internals
    def _build(self, task: str) -> Any:
        if task not in self._mt1:
            self._mt1[task] = self._metaworld.MT1(task, seed=self.seed)
        mt1 = self._mt1[task]
        env = mt1.train_classes[task](
            render_mode="rgb_array", camera_name=self.camera, width=self._w, height=self._h, reward_function_version=self.reward_version
        )
        if self.camera == "corner2" and self.corner2_pos is not None:
            env.model.cam_pos[env.model.camera("corner2").id] = self.corner2_pos
        return env

    def _reset_to(self, sid: int) -> None:
        task_index, variation = divmod(sid, VARIATIONS_PER_TASK)
        task = self.tasks[task_index]
        if task != self._task:
            self.close()  # free the old renderer before the new env makes its own
            self._env = self._build(task)
            self._task = task
        env = self._env
        env.set_task(self._mt1[task].train_tasks[variation])
        raw, _ = env.reset()
        for _ in range(self.settle_steps):
            raw, _, _, _, _ = env.step(np.zeros(ACTION_DIM, dtype=np.float32))
        self._raw = raw
        self._sid = sid
        self.tracker.begin(np.array([0]), np.array([sid]), np.array([task_index]))
        self._render()

    def _render(self) -> None:
        image = self._env.render()
        self.obs["full_image"][0] = image[::-1, ::-1] if self.flip else image
        self.obs["state"][0] = np.asarray(self._raw[:STATE_DIM], dtype=np.float32)

    def _descriptions(self) -> list[str]:
        return self.descriptions(lambda task: INSTRUCTIONS[self.tasks[task]])
