"""gymnasium's own SyncVectorEnv over a LeRobot env, run in that env's venv: the reference the backend must match.

No envfleet: ``importlib.import_module`` of the id's namespace (as LeRobot's env factory does), then
``SyncVectorEnv([lambda: gymnasium.make(id, render_mode=..., **kwargs)] * n)``, ``reset(seed=seeds)``,
one ``step`` per action. Argument: a JSON object (tests/gymnasium_backend/cases.py writes it); writes an
npz with each chunk end's observation entries (named by path, joined by '.'), frames and every step's rewards.
"""

from __future__ import annotations

import importlib
import json
import os
import sys

import numpy as np


def _flat(obs: object, path: str = "") -> dict[str, np.ndarray]:
    if isinstance(obs, dict):
        out: dict[str, np.ndarray] = {}
        for key, value in obs.items():
            out.update(_flat(value, f"{path}.{key}" if path else str(key)))
        return out
    return {path or "obs": np.asarray(obs)}


def main() -> None:
    args = json.loads(sys.argv[1])
    os.environ.setdefault("MUJOCO_GL", "egl")
    os.environ.setdefault("PYOPENGL_PLATFORM", os.environ["MUJOCO_GL"])
    import gymnasium
    from gymnasium.vector import SyncVectorEnv

    importlib.import_module(args["id"].split("/", 1)[0])
    make = dict(args["kwargs"], **({"render_mode": "rgb_array"} if args["render"] else {}))
    envs = SyncVectorEnv([lambda: gymnasium.make(args["id"], **make) for _ in args["seeds"]])
    actions = np.load(args["actions"])  # [chunks, n, chunk, dim]
    out: dict[str, np.ndarray] = {}
    obs, _ = envs.reset(seed=list(args["seeds"]))
    ends = [(_flat(obs), np.stack(envs.call("render")) if args["render"] else None)]
    rewards = []
    for chunk in actions:
        for k in range(chunk.shape[1]):
            obs, reward, *_ = envs.step(chunk[:, k])
            rewards.append(reward)
        ends.append((_flat(obs), np.stack(envs.call("render")) if args["render"] else None))
    envs.close()
    for j, (entries, frames) in enumerate(ends):
        for key, value in entries.items():
            out[f"{j}/{key}"] = value
        if frames is not None:
            out[f"{j}/render"] = frames
    out["rewards"] = np.stack(rewards, axis=1)
    np.savez(args["out"], **out)


if __name__ == "__main__":
    main()
