"""Everything that depends on the device, in one place: which sim and renderer, how envs are batched.

- CPU sim (``physx_cpu``): ManiSkill refuses ``num_envs > 1``, so a shard holds several
  single envs (``train.maniskill.envs_per_process``), stepped one after another; only the
  envs still running step. Images render through Vulkan on the CPU (Mesa's lavapipe,
  which ``scripts/bootstrap`` unpacks), chosen before ``import sapien``.
- CUDA sim (``physx_cuda``): one ManiSkill env with ``num_envs = N`` holds every env of
  the shard (the stage), stepped as one batch; a finished env steps with the batch and
  its results are not read. Images render with SAPIEN's CUDA renderer.

Run on this project's machines: the CPU path only (no GPU). The CUDA path is written
to ManiSkill's documented batched API and has not been run (docs/backends/maniskill.md).
"""

from __future__ import annotations

import glob
import json
import os
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from envfleet.diagnostics.physx_library import find_physx_library
from envfleet.diagnostics.vulkan_probe import lavapipe_icd
from envfleet.errors import ConfigError

# Imports inside functions: torch loads only where a CUDA device is asked about: the plugin module and listing
# backends stay light.

__all__ = [
    "Placement",
    "SimBatch",
    "resolve",
    "cuda_gpu_present",
    "cuda_sim_or_fallback",
    "render_backend_arg",
    "default_icd",
    "prepare_rendering",
    "make_batches",
]

_SIM = {"physx_cpu": "physx_cpu", "cpu": "physx_cpu", "physx_cuda": "physx_cuda", "gpu": "physx_cuda", "cuda": "physx_cuda"}
_RENDER = {"cpu": "cpu", "gpu": "gpu", "sapien_cuda": "gpu", "cuda": "gpu"}


@dataclass(frozen=True)
class Placement:
    """Where a shard simulates and renders."""

    sim_backend: str  # physx_cpu or physx_cuda
    render_backend: str  # cpu (Vulkan device, e.g. lavapipe) or gpu (SAPIEN's CUDA renderer)

    @property
    def batched(self) -> bool:
        """One batched env per shard (CUDA) rather than several single envs (CPU)."""
        return self.sim_backend == "physx_cuda"


def cuda_gpu_present() -> bool:
    """An NVIDIA GPU this process may use, judged without importing torch (the parent must stay light)."""
    if os.environ.get("CUDA_VISIBLE_DEVICES", None) in ("", "-1"):
        return False
    return bool(glob.glob("/proc/driver/nvidia/gpus/*")) or os.path.exists("/dev/nvidia0")


def resolve(section: Any) -> Placement:
    """The placement ``train.maniskill`` asks for; ``auto`` picks CUDA where an NVIDIA GPU is, else the CPU."""
    sim = str(section.sim_backend)
    render = str(section.render_backend)
    gpu = cuda_gpu_present()
    if sim == "auto":
        sim = "physx_cuda" if gpu else "physx_cpu"
    if sim not in _SIM:
        raise ConfigError(f"config key 'train.maniskill.sim_backend' must be auto, {', '.join(_SIM)}; got {section.sim_backend!r}")
    if _SIM[sim] == "physx_cuda":
        sim = cuda_sim_or_fallback(str(section.sim_backend))
    if render == "auto":
        render = "gpu" if gpu else "cpu"
    if render not in _RENDER:
        raise ConfigError(
            f"config key 'train.maniskill.render_backend' must be auto, {', '.join(_RENDER)}; got {section.render_backend!r} "
            "(ManiSkill 3.0.1 cannot parse a 'pci:...' device)"
        )
    return Placement(_SIM[sim], _RENDER[render])


def cuda_sim_or_fallback(asked: str) -> str:
    """``physx_cuda`` when SAPIEN's PhysX GPU library is in place; else, for ``auto``, ``physx_cpu``
    with a warning naming the file, and for an explicit CUDA sim a :class:`ConfigError` naming the
    path and how to place it. SAPIEN would download the file at first use, and hang on an offline
    host: envfleet never lets it (:mod:`envfleet.diagnostics.physx_library`)."""
    library = find_physx_library()
    if library.present:
        return "physx_cuda"
    where = library.path or "~/.sapien/physx/<version>/libPhysXGpu_64.so"
    why = f"SAPIEN's PhysX GPU library {where} is absent" + (f" ({library.error})" if library.error else "")
    if asked == "auto":
        warnings.warn(
            f"train.maniskill.sim_backend=auto: {why}, so ManiSkill simulates on physx_cpu. To simulate on CUDA, {library.placement()}",
            stacklevel=2,
        )
        return "physx_cpu"
    raise ConfigError(
        f"config key 'train.maniskill.sim_backend' is {asked!r}, but {why}; envfleet does not let SAPIEN download it at run time. "
        f"To place it: {library.placement()}. Or set train.maniskill.sim_backend=physx_cpu"
    )


def render_backend_arg(placement: Placement) -> str:
    """ManiSkill's ``render_backend`` argument: ``gpu`` on the GPU that ``train.render_device`` chose for this
    shard (``ENVFLEET_RENDER_DEVICE``, e.g. ``cuda:1``, which ManiSkill 3.0.1 parses), else the placement's."""
    chosen = os.environ.get("ENVFLEET_RENDER_DEVICE", "")
    return chosen if placement.render_backend == "gpu" and chosen.startswith("cuda:") else placement.render_backend


def default_icd() -> str:
    """Where ``scripts/vulkan-lavapipe`` (run by ``scripts/bootstrap``) writes lavapipe's ICD file."""
    return lavapipe_icd()


def prepare_rendering(placement: Placement, icd: str | None) -> str:
    """Point Vulkan at the CPU driver before ``import sapien``; returns the ICD file used ('' for the GPU).

    An explicit ``icd`` wins; then a ``VK_ICD_FILENAMES`` already set; then bootstrap's lavapipe.
    """
    if placement.render_backend != "cpu":
        return ""
    chosen = icd or os.environ.get("VK_ICD_FILENAMES") or default_icd()
    if not os.path.isfile(chosen):
        raise RuntimeError(
            f"no Vulkan driver for CPU rendering: ICD file {chosen} does not exist. Run scripts/bootstrap (it unpacks Mesa's "
            "lavapipe from Debian bookworm-backports), or set train.maniskill.vulkan_icd / VK_ICD_FILENAMES to a Vulkan ICD file"
        )
    with open(chosen) as fh:
        library = json.load(fh).get("ICD", {}).get("library_path", "")
    if os.path.isabs(library) and not os.path.exists(library):
        raise RuntimeError(f"Vulkan ICD file {chosen} names {library}, which does not exist: run scripts/bootstrap again")
    os.environ["VK_ICD_FILENAMES"] = chosen
    return chosen


def _numpy(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _numpy(v) for k, v in value.items()}
    if hasattr(value, "detach"):
        return value.detach().cpu().numpy()
    return value


def _torch(value: Any, like: Any) -> Any:
    import torch

    if isinstance(value, dict):
        return {k: _torch(v, like) for k, v in value.items()}
    if isinstance(value, np.ndarray):
        return torch.from_numpy(value.copy()).to(like.device)
    return value


class SimBatch:
    """One ManiSkill env object and the envs of the shard it holds (``indices``): 1 on the CPU, all on CUDA."""

    def __init__(self, env: Any, indices: Sequence[int], placement: Placement) -> None:
        self.env = env
        self.u = env.unwrapped
        self.indices = np.asarray(indices, dtype=np.int64)
        self.placement = placement
        self.seed: int | None = None  # CPU: the episode seed of the last reset
        self.log: list[np.ndarray] = []  # CPU: the actions stepped since that reset, for an exact restore

    def reset(self, local: np.ndarray, seeds: np.ndarray) -> dict[str, Any]:
        """Reset local envs ``local`` with episode seeds ``seeds``; the raw observation (all envs of the object)."""
        if not self.placement.batched:
            self.seed, self.log = int(seeds[0]), []
            obs, _ = self.u.reset(seed=self.seed)
            return obs
        import torch

        # ManiSkill 3.0.1's reset(seed=list, env_idx) replaces its whole episode-seed array with the
        # list (its entry k seeds env k's batched RNG, not env_idx[k]'s) and seeds torch with the
        # list's first entry, from which the task draws one value per env of env_idx. So an env's
        # first state would depend on which envs were reset with it, and in what order. Each env is
        # reset alone, with its own seed in every entry: what it draws depends on its seed only.
        out: dict[str, Any] = {}
        for env, seed in zip(local, seeds):
            options = {"env_idx": torch.as_tensor([int(env)], device=self.u.device)}
            out, _ = self.u.reset(seed=[int(seed)] * int(self.u.num_envs), options=options)
        return out

    def step(self, actions: np.ndarray, render: bool, obs_mode: str) -> tuple[dict[str, Any], np.ndarray, np.ndarray, np.ndarray]:
        """Step every env of the object: observation (images only if ``render``), reward, success, fail (numpy)."""
        import torch

        # Off-render sub-steps compute ManiSkill's state observation only: no camera is captured.
        self.u._obs_mode = obs_mode if render else "state_dict"
        try:
            act = torch.as_tensor(actions, device=self.u.device)
            obs, reward, _, _, info = self.u.step(act)
            if not self.placement.batched:
                self.log.append(np.array(actions, dtype=np.float32, copy=True))
        finally:
            self.u._obs_mode = obs_mode
        success = _numpy(info.get("success", torch.zeros(len(self.indices), dtype=torch.bool))).reshape(-1)
        fail = _numpy(info.get("fail", torch.zeros(len(self.indices), dtype=torch.bool))).reshape(-1)
        return obs, np.asarray(_numpy(reward), dtype=np.float32).reshape(-1), success.astype(bool), fail.astype(bool)

    def capture(self, obs_mode: str) -> dict[str, Any]:
        """The raw observation of the current state, cameras included (what ``step`` returns when rendering)."""
        self.u._obs_mode = obs_mode
        return self.u.get_obs(unflattened=True)

    def images(self, obs: dict[str, Any], camera: str) -> np.ndarray:
        """``[b,H,W,3]`` uint8 of one camera from a raw observation."""
        return np.asarray(_numpy(obs["sensor_data"][camera]["rgb"]), dtype=np.uint8)

    def proprio(self) -> np.ndarray:
        """``[b, D]``: joint positions, then the TCP pose, float32."""
        agent = self.u.agent
        parts = [_numpy(agent.robot.get_qpos())]
        tcp = getattr(agent, "tcp", None)
        if tcp is not None:
            parts.append(_numpy(tcp.pose.raw_pose))
        return np.concatenate([np.asarray(p, dtype=np.float32).reshape(len(self.indices), -1) for p in parts], axis=1)

    def get_state(self) -> dict[str, Any]:
        """A snapshot to continue from.

        CPU: the episode seed and the actions since the reset. ManiSkill's ``set_state_dict``
        restores poses and velocities but not PhysX's contact caches, so an episode continued
        from it drifts (joint positions 2e-6 apart after 8 sub-steps on PushCube-v1, and pixels
        one level off); replaying the actions from the seed is exact, and costs physics only.
        CUDA: ManiSkill's ``get_state_dict()``, one batched restore (not run here).
        """
        if not self.placement.batched:
            actions = np.stack(self.log) if self.log else np.zeros((0, 1, *self.u.single_action_space.shape), np.float32)
            return {"seed": self.seed, "actions": actions}
        return {"sim": _numpy(self.u.get_state_dict()), "elapsed": _numpy(self.u._elapsed_steps)}

    def set_state(self, state: dict[str, Any], obs_mode: str) -> None:
        """Restore :meth:`get_state`."""
        if not self.placement.batched:
            if state["seed"] is None:
                return
            self.reset(np.array([0]), np.array([state["seed"]]))
            for action in state["actions"]:
                self.step(action, False, obs_mode)
            return
        like = self.u._elapsed_steps
        self.u.set_state_dict(_torch(state["sim"], like))
        self.u._elapsed_steps = _torch(np.asarray(state["elapsed"]), like)

    def close(self) -> None:
        """Close the ManiSkill env."""
        self.env.close()


def make_batches(placement: Placement, make: Any, num_envs: int) -> list[SimBatch]:
    """The shard's env objects: ``num_envs`` single envs on the CPU, one env of ``num_envs`` on CUDA.

    :param make: ``(num_envs) -> gym env``, ManiSkill's ``gym.make`` with the config's arguments.
    """
    if placement.batched:
        return [SimBatch(make(num_envs), range(num_envs), placement)]
    return [SimBatch(make(1), [i], placement) for i in range(num_envs)]
