"""Plain MetaWorld with LeRobot's conventions, run in MetaWorld's venv: the reference the backend must match.

It uses MetaWorld's API only (no envfleet): ``MT1(task, seed)``, the task class built
with the corner2 camera, the camera moved to [0.75, 0.075, 0.7], ``set_task`` and
``reset``, optional zero-action settle steps, images rotated 180 degrees, state
``obs[:4]``. Argument: a JSON object (see tests/metaworld/common.py); writes an npz.
"""

from __future__ import annotations

import json
import os
import sys

import numpy as np


def main() -> None:
    args = json.loads(sys.argv[1])
    os.environ.setdefault("MUJOCO_GL", "egl")
    import metaworld

    out = {}
    for k, ep in enumerate(args["episodes"]):
        mt1 = metaworld.MT1(ep["task"], seed=args["seed"])
        env = mt1.train_classes[ep["task"]](render_mode="rgb_array", camera_name="corner2", width=args["size"], height=args["size"])
        env.model.cam_pos[env.model.camera("corner2").id] = [0.75, 0.075, 0.7]
        env.set_task(mt1.train_tasks[ep["variation"]])
        obs, _ = env.reset()
        for _ in range(args["settle"]):
            obs, *_ = env.step(np.zeros(4, dtype=np.float32))
        images, states = [], []
        for chunk in [None, *np.load(ep["actions"])]:
            for action in [] if chunk is None else chunk:
                obs, *_ = env.step(action)
            image = env.render()
            images.append(image[::-1, ::-1] if args["flip"] else image)
            states.append(obs[:4].astype(np.float32))
        env.close()
        out[f"images{k}"] = np.stack(images)
        out[f"states{k}"] = np.stack(states)
    np.savez(args["out"], **out)


if __name__ == "__main__":
    main()
