"""One peer stack over LIBERO, run alone in its own venv for the faces section (bench/faces_peers.py).

``python bench/peer_libero.py torchrl_libero_env`` or ``... lerobot_libero_env`` builds the stack on
2 libero_spatial envs (task 0, initial states 0 and 1), 128x128, the agentview and wrist cameras,
resets it, steps one warm-up chunk, prints ``ready`` and then answers one line per command on
stdin: ``chunk`` steps a chunk of 8 random actions one action per ``step``, as the stack's users
step it, and answers the seconds it took; ``close`` closes the stack and exits. The section
alternates these chunks with its other variants', so that the machine's load hits all alike.

Imports neither envfleet nor anything of bench/: these venvs hold the peer stack only.

- ``torchrl_libero_env``: TorchRL's own ``LiberoEnv`` (``torchrl.envs.libs.libero``) with
  ``num_workers=2``, which is a ``ParallelEnv`` of 2 LIBERO processes;
- ``lerobot_libero_env``: LeRobot's ``make_env`` for its ``libero`` env config, with
  ``use_async_envs=True`` and ``n_envs=2``, as ``lerobot-eval`` builds it (LeRobot's own
  ``AsyncVectorEnv``, forkserver, shared memory).
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

import numpy as np

N, HW, CHUNK, SUITE, TASK = 2, 128, 8, "libero_spatial", 0

__all__ = ["main"]


class _TorchRLLiberoEnv:
    def __init__(self) -> None:
        import torch
        from torchrl.envs import LiberoEnv
        from torchrl.envs.utils import step_mdp

        self.torch, self.step_mdp = torch, step_mdp
        # fixed: worker i resets to initial state i, as envfleet's rows reset to state ids 0 and 1.
        self.env = LiberoEnv(
            SUITE,
            TASK,
            num_workers=N,
            camera_height=HW,
            camera_width=HW,
            wrist_camera="robot0_eye_in_hand",
            init_state_mode="fixed",
            init_state_id=list(range(N)),
        )
        self.td = self.env.reset()

    def step(self, action: np.ndarray) -> None:
        self.td["action"] = self.torch.from_numpy(action)
        self.td = self.step_mdp(self.env.step(self.td))

    def close(self) -> None:
        self.env.close()


class _LeRobotLiberoEnv:
    def __init__(self) -> None:
        from lerobot.envs.configs import LiberoEnv
        from lerobot.envs.factory import make_env

        # LeRobot's default cameras are agentview_image and robot0_eye_in_hand_image.
        cfg = LiberoEnv(task=SUITE, task_ids=[TASK], observation_height=HW, observation_width=HW)
        self.env = make_env(cfg, n_envs=N, use_async_envs=True)[SUITE][TASK]
        # episode_index i resets to initial state i (LeRobot ties each sub-env to one).
        self.env.reset(seed=0)

    def step(self, action: np.ndarray) -> None:
        self.env.step(action)

    def close(self) -> None:
        self.env.close()


STACKS: dict[str, Any] = {"torchrl_libero_env": _TorchRLLiberoEnv, "lerobot_libero_env": _LeRobotLiberoEnv}


def _versions(stack: str) -> dict[str, str]:
    from importlib.metadata import version

    names = ["hf-libero", "robosuite", "mujoco", "torch"] + (
        ["torchrl", "tensordict"] if stack.startswith("torchrl") else ["lerobot", "gymnasium"]
    )
    return {name: version(name) for name in names}


def main(stack: str) -> None:
    """Build ``stack``, then serve ``chunk`` and ``close`` commands on stdin (answers on stdout)."""
    if stack not in STACKS:
        raise SystemExit(f"peer_libero.py: unknown stack {stack!r}; expected one of {sorted(STACKS)}")
    # The protocol keeps stdout to itself: the stacks print progress, and so do the worker processes
    # they start, which inherit file descriptor 1, so that descriptor is pointed at stderr too.
    out = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    env = STACKS[stack]()
    rng = np.random.default_rng(1)  # the EnvWorker path's seed (sections.libero.WorkerStage)

    def chunk() -> float:
        # the same actions as the section's other variants: uniform in [-0.3, 0.3]
        actions = (rng.uniform(-1, 1, (N, CHUNK, 7)) * 0.3).astype(np.float32)
        t0 = time.perf_counter()
        for k in range(CHUNK):
            env.step(actions[:, k])
        return time.perf_counter() - t0

    try:
        chunk()
        print("ready " + json.dumps({"versions": _versions(stack), "python": sys.executable}), file=out, flush=True)
        for line in sys.stdin:
            command = line.strip()
            if command == "chunk":
                print(f"{chunk():.6f}", file=out, flush=True)
            elif command == "close":
                break
            else:
                raise SystemExit(f"peer_libero.py: unknown command {command!r}; expected chunk or close")
    finally:
        env.close()


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "")
