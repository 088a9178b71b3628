"""``IsaacEnv``: every env of a stage as one batched Isaac Lab task, in the shard process.

One job: Isaac Lab's batched task behind envfleet's ``Env`` contract; the parts below are its steps.

Imported only inside a shard process (``BackendSpec.env_factory`` names it as a
string). The design, in short (the README has the long version):

- **Start-up.** The runtime starts per the installed Isaac Lab version
  (:mod:`envfleet_isaac.launch`), the task modules are imported so that the task id
  registers, the task's env config is built and adjusted (``num_envs``, device,
  seed, camera size, physics step), and the env is made with ``gym.make``.
- **State bank.** State id ``k`` is made by the task's own ``_reset_idx`` on env 0,
  under a seed derived from ``(state_bank_seed, k)``, and captured with
  ``scene.get_state(is_relative=True)`` (plus ``train.isaac.task_buffers``). The bank
  depends on the config only, never on the process, stage or number of envs, so
  every stage of every worker agrees on what an id means. Positions are rounded to
  a 2**-16 m grid so that adding and removing an env origin is exact: the same id
  gives bit-identical observations in every env.
- **Reset** restores bank rows with ``scene.reset_to(..., is_relative=True)``; the
  task's reset randomisation is not run again.
- **Episodes** follow :class:`envfleet.episodes.EpisodeTracker`. Isaac Lab would reset
  a terminated env inside ``step()``; while stepping, the env's ``_reset_idx`` is
  replaced by a recorder that does nothing, so no env is ever reset behind
  envfleet's back. An env whose episode ended is *held* (:mod:`envfleet_isaac.held`):
  it gets zero actions and, after every later sub-step, its scene state from the
  moment it finished is written back; its flags, reward 0 and observation are those
  of the tracker.
- **Rendering.** Cameras are lazy sensors: they render when their data is read.
  ``render: last`` reads them once per chunk, ``render: all`` after every sub-step;
  both return the same images (a held env shows its final frame in both).
"""

from __future__ import annotations

import importlib
import random
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from envfleet.batched_env import BatchedEnv
from envfleet.env import ChunkStepResult, EnvContext, ResetResult
from envfleet.validation import StateTable, check_actions, check_reset_ids

from .held import FrozenObservations, HeldEnvs
from .launch import SimulationRuntime
from .plugin import camera_map, observation_spec, task_name
from .state_bank import POSITION_QUANTUM, build_state_bank, derive_seed, restore_from_bank
from .task_config import load_env_cfg
from .tensors import as_torch, map_arrays

# Imports inside functions: Isaac Lab's task modules (and gymnasium's registry of them) import only after its
# app is launched (launch.py), in the shard.

# build_state_bank, derive_seed, load_env_cfg and POSITION_QUANTUM live in state_bank.py and
# task_config.py; they stay importable from here.
__all__ = ["IsaacEnv", "build_state_bank", "derive_seed", "load_env_cfg", "POSITION_QUANTUM"]


class IsaacEnv(BatchedEnv):
    """The ``isaac`` backend's :class:`~envfleet.env.Env`: ``ctx.num_envs`` envs of one Isaac Lab task.

    :param cfg: the env section (``train`` or ``val``) with ``cfg.isaac`` (see :class:`~envfleet_isaac.plugin.IsaacConfig`).
    :param ctx: where this object sits in the fleet.
    """

    supports_state = True

    def __init__(self, cfg: Any, ctx: EnvContext) -> None:
        self.ctx = ctx
        self.num_envs = int(ctx.num_envs)
        self.action_dim = int(ctx.action_dim)
        self.task = task_name(cfg)
        self.isaac_cfg = cfg.isaac
        self._spec = observation_spec(cfg, self.num_envs)
        self._cameras: dict[str, str] = {}
        full, wrist = camera_map(cfg)
        self._cameras["full_image"] = full
        if wrist is not None:
            self._cameras["wrist_image"] = wrist
        self.render_all = str(cfg.render) == "all"
        self.device = str(cfg.device)
        self.seed = int(cfg.seed)
        self.runtime = SimulationRuntime(self.device)
        self._closed = False
        self._gym_env: Any = None
        self.env: Any = None
        self._stepping = False
        self.init_observations(self._spec)
        self._obs_t = {k: torch.from_numpy(v) for k, v in self.obs.items()}
        self._held = HeldEnvs(self.num_envs)
        try:
            self._build(cfg)
        except BaseException:
            self.close()
            raise
        self.init_episodes(cfg, ctx, cfg.max_episode_steps or self._task_horizon())

    # ------------------------------------------------------------------ building
    def _build(self, cfg: Any) -> None:
        self.runtime.before_task_import()
        import gymnasium as gym

        from . import tasks  # noqa: F401  (registers the project's task ids)

        for module in self.isaac_cfg.task_modules:
            importlib.import_module(str(module))
        if self.task not in gym.registry:
            raise RuntimeError(
                f"task {self.task!r} (train.task_name) is not a registered gymnasium id; add the module that registers it to "
                "train.isaac.task_modules (e.g. 'isaaclab_tasks' for Isaac Lab's own tasks)"
            )
        env_cfg = load_env_cfg(self.task)
        self._configure(env_cfg, cfg)
        self.runtime.before_env_build(env_cfg)
        self._gym_env = gym.make(self.task, cfg=env_cfg)
        self.env = self._gym_env.unwrapped
        self._check_env()
        self._install_reset_guard()
        self._build_bank()
        state = self._state_from(self._compute_obs())
        if state.shape[1] != self._spec["state"].shape[0]:
            raise RuntimeError(
                f"task {self.task!r}: the state terms {list(self.isaac_cfg.state_terms)} have {state.shape[1]} values, but "
                f"train.isaac.state_dim (or the task's known size) says {self._spec['state'].shape[0]}"
            )

    def _configure(self, env_cfg: Any, cfg: Any) -> None:
        """Adjust the task's config before the env is built: size, device, seed, cameras, physics step."""
        env_cfg.scene.num_envs = self.num_envs
        env_cfg.sim.device = self.device
        env_cfg.seed = derive_seed(self.seed, self.ctx.rank, self.ctx.stage_id, self.ctx.env_offset)
        if self.isaac_cfg.physics_dt is not None:
            env_cfg.sim.dt = float(self.isaac_cfg.physics_dt)
        if self.isaac_cfg.decimation is not None:
            env_cfg.decimation = int(self.isaac_cfg.decimation)
            # Isaac Lab warns when it would render less often than once per env step.
            env_cfg.sim.render_interval = min(int(env_cfg.sim.render_interval), env_cfg.decimation)
        # Lazy sensors render only when read; that is what makes `render: last` cheap.
        env_cfg.scene.lazy_sensor_update = True
        h, w = (int(x) for x in self._spec["full_image"].shape[:2])
        for key, name in self._cameras.items():
            cam_cfg = getattr(env_cfg.scene, name, None)
            if cam_cfg is None or not hasattr(cam_cfg, "width"):
                raise RuntimeError(
                    f"camera {name!r} (for {key}) is not a camera of task {self.task!r}'s scene config; "
                    "set train.isaac.full_image_camera / wrist_image_camera or train.init_params.camera_names"
                )
            if self.isaac_cfg.resize_cameras:
                cam_cfg.height, cam_cfg.width = h, w
            elif (int(cam_cfg.height), int(cam_cfg.width)) != (h, w):
                raise self._camera_size_error(name, (int(cam_cfg.height), int(cam_cfg.width)))
        # Fail before the (slow) build when the config already tells the action size.
        space = getattr(env_cfg, "action_space", None)
        if isinstance(space, int) and space != self.action_dim:
            raise self._action_size_error(space)

    def _camera_size_error(self, name: str, shape: tuple[int, int]) -> RuntimeError:
        h, w = self._spec["full_image"].shape[:2]
        return RuntimeError(
            f"camera {name!r} of task {self.task!r} renders {shape[0]}x{shape[1]} images, but the observation spec says "
            f"{h}x{w} (train.init_params.camera_heights/widths); set those to the task's size or train.isaac.resize_cameras=true"
        )

    def _action_size_error(self, task_dim: int) -> RuntimeError:
        return RuntimeError(
            f"task {self.task!r} takes actions of size {task_dim}, but actor.model.action_dim is {self.action_dim}; "
            f"set actor.model.action_dim={task_dim}"
        )

    def _check_env(self) -> None:
        env = self.env
        sensors = env.scene.sensors
        h, w = self._spec["full_image"].shape[:2]
        for key, name in self._cameras.items():
            if name not in sensors:
                raise RuntimeError(f"camera {name!r} (for {key}) is not in task {self.task!r}'s scene: its sensors are {sorted(sensors)}")
            height, width = (int(x) for x in sensors[name].image_shape)
            if (height, width) != (h, w):
                raise self._camera_size_error(name, (height, width))
        task_dim = int(np.prod(env.single_action_space.shape))
        if task_dim != self.action_dim:
            raise self._action_size_error(task_dim)
        name = self.isaac_cfg.success_term
        if name is not None and not self._has_termination_term(name) and not hasattr(env, name):
            raise RuntimeError(
                f"train.isaac.success_term {name!r} is neither a method/attribute of task {self.task!r} nor a termination term"
            )
        for buf in self.isaac_cfg.task_buffers:
            value = getattr(env, str(buf), None)
            if not isinstance(value, torch.Tensor) or value.shape[:1] != (self.num_envs,):
                raise RuntimeError(f"train.isaac.task_buffers: {buf!r} is not a tensor [num_envs, ...] attribute of task {self.task!r}")
        self.task_description = str(self.isaac_cfg.task_description or getattr(env.cfg, "task_description", None) or self.task)

    def _task_horizon(self) -> int:
        """The task's own episode length in env steps (used when train.max_episode_steps is null)."""
        return int(self.env.max_episode_length)

    def _has_termination_term(self, name: str) -> bool:
        manager = getattr(self.env, "termination_manager", None)
        return manager is not None and name in getattr(manager, "active_terms", [])

    def _install_reset_guard(self) -> None:
        """Make the env's in-step auto-reset a no-op (see the module doc); resets outside step() still work."""
        original = self.env._reset_idx
        self._task_reset_idx = original

        def guarded(env_ids: Any, *args: Any, **kwargs: Any) -> Any:
            if self._stepping:
                return None  # Isaac Lab's own auto-reset inside step(): envfleet resets instead
            return original(env_ids, *args, **kwargs)

        self.env._reset_idx = guarded

    def _build_bank(self) -> None:
        size = int(self.isaac_cfg.state_bank_size)
        self._bank, self._bank_buffers = build_state_bank(
            self.env, size, int(self.isaac_cfg.state_bank_seed), [str(b) for b in self.isaac_cfg.task_buffers], self._task_reset_idx
        )
        self._bank_size = size
        self.states = StateTable.contiguous(np.zeros(size, dtype=np.int64))  # one task: the task id's

    # ------------------------------------------------------------------ protocol
    def reset_envs_to_state_ids(self, state_ids: np.ndarray, task_ids: np.ndarray | None = None) -> ResetResult:
        n = self.num_envs
        state_ids, _ = check_reset_ids(self.states, state_ids, task_ids, num_envs=n)
        every = np.arange(n)
        self._restore_bank(every, state_ids)
        self.tracker.begin(every, state_ids, np.zeros(n, dtype=np.int64))
        self._held.release()
        # Noise models and other in-step randomness restart from the same point for the same ids.
        self.env.seed(derive_seed(self.seed, self.ctx.rank, self.ctx.stage_id, self.ctx.env_offset, *state_ids.tolist()))
        self._write_rows(None, self._state_from(self._compute_obs()), self._read_cameras())
        return ResetResult(
            obs=self.observations(),
            task_descriptions=self._descriptions(),
            infos={"state_id": state_ids.copy(), "task_id": np.zeros(n, dtype=np.int64)},
        )

    def chunk_step(self, actions: np.ndarray) -> ChunkStepResult:
        n = self.num_envs
        actions = check_actions(actions, n, self.action_dim)
        chunk = actions.shape[1]
        device = self.env.device
        acts = torch.tensor(actions, dtype=torch.float32, device=device)  # one transfer (copy) per chunk
        t = self.tracker
        t.start_chunk(chunk)
        touched = t.active().copy()
        ended = np.zeros(n, dtype=bool)  # envs whose episode ended during this chunk
        frozen = FrozenObservations()
        last_obs: Any = None
        images: dict[str, torch.Tensor] | None = None
        no_success = np.zeros(n, dtype=bool)
        for k in range(chunk):
            live = t.active()
            if not live.any():  # every env has finished: nothing to simulate
                t.record(k, live, no_success)
                continue
            held = self._held.mask.copy()
            action = acts[:, k]
            if held.any():
                action = self._held.mask_actions(action, held)
            obs, terminated = self._step(action)
            t.record(k, live, self._success(terminated))
            newly = live & t.done
            last_obs = obs
            if held.any():
                self._held.restore(self.env.scene, held, device)
            rows = torch.as_tensor(np.nonzero(newly)[0], device=device)
            if newly.any():
                self._held.hold(self.env.scene, newly, device)
                ended |= newly
                frozen.keep_state(rows, self._state_from(obs))
            if self.render_all:
                images = self._read_cameras()
                if newly.any():
                    frozen.keep_images(rows, images)
        flags = t.end_chunk()
        if touched.any() and last_obs is not None:
            state = frozen.apply_state(ended, self._state_from(last_obs))  # the last simulated sub-step's
            if images is None:  # render: last -- the only camera read of the chunk
                images = self._read_cameras()
            else:
                images = frozen.apply_images(ended, images)
            self._write_rows(None if touched.all() else np.nonzero(touched)[0], state, images)
        if self.cycle is not None and flags.ended.any():
            self._auto_reset(np.nonzero(flags.ended)[0], flags.infos)
        return flags.to_result(self.observations(), self._descriptions())

    def bind_observation_buffers(self, buffers: dict[str, np.ndarray]) -> bool:
        # Observations are copied from the simulator straight into the manager's shared memory.
        super().bind_observation_buffers(buffers)
        self._obs_t = {k: torch.from_numpy(v) for k, v in buffers.items()}
        return True

    def get_state(self) -> Any:
        # numpy, not tensors: torch pickles tensors sent over a multiprocessing connection as
        # shared file descriptors, which the manager's socket cannot carry.
        env = self.env
        cpu: Callable[[torch.Tensor], np.ndarray] = lambda x: x.detach().cpu().numpy().copy()  # noqa: E731
        return {
            **self.episode_state(),
            "scene": map_arrays(env.scene.get_state(is_relative=False), cpu),
            **self._held.get_state(cpu),
            "buffers": {name: cpu(getattr(env, name)) for name in self._saved_buffers()},
            "counters": {name: int(getattr(env, name)) for name in ("common_step_counter", "_sim_step_counter") if hasattr(env, name)},
            "rng": {"torch": torch.get_rng_state().numpy(), "numpy": np.random.get_state(), "python": random.getstate()},
        }

    def load_state(self, state: Any) -> None:
        env = self.env
        device = env.device
        to_dev: Callable[[np.ndarray], torch.Tensor] = lambda x: torch.from_numpy(np.asarray(x)).to(device)  # noqa: E731
        env.scene.reset_to(map_arrays(state["scene"], to_dev), None, is_relative=False)
        for name, value in state["buffers"].items():
            getattr(env, name)[...] = to_dev(value)
        for name, value in state["counters"].items():
            setattr(env, name, value)
        env.sim.forward()
        env.scene.update(dt=0.0)
        self._held.load_state(state, to_dev)
        self.load_episode_state(state)
        torch.set_rng_state(torch.from_numpy(np.asarray(state["rng"]["torch"])))
        np.random.set_state(state["rng"]["numpy"])
        random.setstate(state["rng"]["python"])

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            if self._gym_env is not None:
                self._gym_env.close()
        finally:
            self._gym_env = None
            self.env = None
            self.runtime.close()

    # ------------------------------------------------------------------ simulation
    def _step(self, action: torch.Tensor) -> tuple[Any, torch.Tensor]:
        """One env step with Isaac Lab's auto-reset disabled; returns (obs, terminated)."""
        self._stepping = True
        try:
            obs, _reward, terminated, _truncated, _extras = self.env.step(action)
        finally:
            self._stepping = False
        return obs, terminated

    def _success(self, terminated: torch.Tensor) -> np.ndarray:
        """Bool ``[n]`` on the host: the task's success signal after the last step."""
        name = self.isaac_cfg.success_term
        value: Any = terminated
        if name is not None:
            if self._has_termination_term(name):
                value = self.env.termination_manager.get_term(name)
            else:
                attr = getattr(self.env, name)
                value = attr() if callable(attr) else attr
        return as_torch(value).reshape(self.num_envs).to(torch.bool).cpu().numpy().copy()

    def _compute_obs(self) -> Any:
        """The task's observations for the current scene (without stepping)."""
        env = self.env
        manager = getattr(env, "observation_manager", None)
        if manager is not None:
            return manager.compute()
        compute = getattr(env, "_compute_observations", None) or env._get_observations
        return compute()

    def _state_from(self, obs: Any) -> torch.Tensor:
        """``state`` float32 ``[n, D]`` (on the sim device) from the configured observation terms."""
        n = self.num_envs
        parts = []
        for term in self.isaac_cfg.state_terms:
            group, _, sub = str(term).partition(".")
            if group not in obs:
                raise RuntimeError(
                    f"train.isaac.state_terms: {term!r} is not an observation group of task {self.task!r} (groups: {list(obs)})"
                )
            value = obs[group]
            if sub:
                if not isinstance(value, dict) or sub not in value:
                    raise RuntimeError(f"train.isaac.state_terms: group {group!r} of task {self.task!r} has no term {sub!r}")
                value = value[sub]
            if isinstance(value, dict):
                parts += [as_torch(v).reshape(n, -1) for v in value.values()]
            else:
                parts.append(as_torch(value).reshape(n, -1))
        return torch.cat(parts, dim=-1).to(torch.float32)

    def _read_cameras(self) -> dict[str, torch.Tensor]:
        """uint8 ``[n, H, W, 3]`` views of each camera's latest image (this is what renders a lazy camera)."""
        out = {}
        for key, name in self._cameras.items():
            output = self.env.scene.sensors[name].data.output
            rgb = as_torch(output["rgb"] if "rgb" in output else output["rgba"])[..., :3]
            if rgb.dtype != torch.uint8:
                rgb = (rgb.float().clamp(0.0, 1.0) * 255.0).round().to(torch.uint8)
            out[key] = rgb
        return out

    def _restore_bank(self, env_idx: np.ndarray, state_ids: np.ndarray) -> None:
        restore_from_bank(self.env, self._bank, self._bank_buffers, env_idx, state_ids)

    def _auto_reset(self, idx: np.ndarray, infos: dict[str, np.ndarray]) -> None:
        sids = self.next_state_ids(idx)
        self._restore_bank(idx, sids)
        self.tracker.begin(idx, sids, np.zeros(len(idx), dtype=np.int64))
        self._held.release(idx)
        self._write_rows(idx, self._state_from(self._compute_obs()), self._read_cameras())
        infos["reset_state_id"][idx] = sids

    # ------------------------------------------------------------------ observations
    def _write_rows(self, rows: np.ndarray | None, state: torch.Tensor, images: dict[str, torch.Tensor]) -> None:
        """Copy observations of ``rows`` (None: all) to the host buffers: one copy per array."""
        sources = dict(images)
        sources["state"] = state
        for key, src in sources.items():
            if src.device.type == "cpu":
                # numpy copies stay on this thread; a torch copy of an image batch is split over
                # OpenMP threads whose spinning afterwards slows the next (single-threaded) Warp
                # launches by several percent on a small machine.
                host = src.numpy()
                if rows is None:
                    np.copyto(self.obs[key], host)
                else:
                    self.obs[key][rows] = host[rows]
            elif rows is None:
                self._obs_t[key].copy_(src)  # one device-to-host copy into the (shared) buffer
            else:
                self._obs_t[key][torch.as_tensor(rows)] = src[torch.as_tensor(rows, device=src.device)].cpu()

    def _descriptions(self) -> list[str]:
        return self.descriptions(lambda task: self.task_description)

    def _saved_buffers(self) -> list[str]:
        names = [str(b) for b in self.isaac_cfg.task_buffers]
        if isinstance(getattr(self.env, "episode_length_buf", None), torch.Tensor):
            names.append("episode_length_buf")
        return names
