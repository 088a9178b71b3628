"""Env steps per second through envfleet against a direct Isaac Lab loop, same task, device and num_envs.

    python bench/isaac_vs_direct.py [--num-envs 4] [--chunk 8] [--chunks 5] [--rounds 4]
        [--device cpu] [--render last] [--size 64]

Both run in the same invocation, alive side by side and measured in alternating rounds, so
that a load change on the machine hits both alike:

- **envfleet**: a :class:`~envfleet.shards.manager.ProcessEnvManager` (one shard process) doing
  ``chunk_step`` on random actions, observations through shared memory.
- **direct**: the same registered task made with ``gym.make`` in this process; per chunk,
  the actions go to the device once, ``env.step`` runs ``chunk`` times, and then both
  cameras and the state are copied to host memory once (what ``render: last`` does).

Both sides start from the same initial states (the backend's state bank, built the same
way on the direct env) and get the same actions, so they simulate the same trajectories:
the contacts, and with them MuJoCo-Warp's cost, are the same on both sides, and the
observations must come out identical (``identical_observations``). Episodes are made long
enough that none ends during the run. Prints one JSON object; ``ratio`` is envfleet's
rate over the direct loop's (1.0: no overhead).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any

import numpy as np

BANK_SIZE = 8


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--num-envs", type=int, default=4)
    p.add_argument("--chunk", type=int, default=8, help="sub-steps per chunk_step")
    p.add_argument("--chunks", type=int, default=5, help="chunks per round and side")
    p.add_argument("--rounds", type=int, default=4, help="alternating rounds (after one warm-up chunk each)")
    p.add_argument("--device", default="cpu")
    p.add_argument("--render", default="last", choices=["last", "all"])
    p.add_argument("--size", type=int, default=64, help="camera height and width")
    p.add_argument("--task", default="Envfleet-Pusher-v0")
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args(argv)


def build_manager(a: argparse.Namespace) -> Any:
    from envfleet import ProcessEnvManager
    from envfleet.config import load_config

    cfg = load_config(
        data={
            "train": {
                "simulator_type": "isaac",
                "task_name": a.task,
                "num_envs": a.num_envs,
                "device": a.device,
                "render": a.render,
                "max_episode_steps": 10**6,
                "start_timeout_s": 900.0,
                "step_timeout_s": 600.0,
                "init_params": {"camera_heights": a.size, "camera_widths": a.size},
                "isaac": {"state_bank_size": BANK_SIZE},
            }
        },
        overrides=[f"actor.model.num_action_chunks={a.chunk}", "actor.model.action_dim=2"],
    )
    mgr = ProcessEnvManager(cfg)
    mgr.start_simulator()
    return mgr


class DirectLoop:
    """The task made with gym.make, stepped the way a hand-written Isaac Lab rollout would."""

    def __init__(self, a: argparse.Namespace) -> None:
        import gymnasium as gym

        import envfleet_isaac.tasks  # noqa: F401  (registers the task ids)
        from envfleet_isaac.env import load_env_cfg
        from envfleet_isaac.launch import SimulationRuntime

        self.runtime = SimulationRuntime(a.device)
        self.runtime.before_task_import()
        cfg = load_env_cfg(a.task)
        cfg.scene.num_envs = a.num_envs
        cfg.sim.device = a.device
        cfg.seed = a.seed
        cfg.episode_length_s = 1e6  # no time-out resets during the run
        for name in ("table_cam", "pusher_cam"):
            cam = getattr(cfg.scene, name)
            cam.height = cam.width = a.size
        self.runtime.before_env_build(cfg)
        self.gym_env = gym.make(a.task, cfg=cfg)
        self.env: Any = self.gym_env.unwrapped
        self.env.reset(seed=a.seed)
        self.render_all = a.render == "all"
        # The same initial states as the backend's (state_bank_seed 0), to run the same trajectories.
        from envfleet_isaac.env import build_state_bank

        self.bank, _ = build_state_bank(self.env, BANK_SIZE, seed=0)

    def reset(self, state_ids: np.ndarray) -> None:
        import torch

        env = self.env
        ids = torch.arange(env.num_envs, dtype=torch.int32, device=env.device)
        sids = torch.as_tensor(state_ids, dtype=torch.long, device=env.device)
        rows = {kind: {name: {k: t[sids] for k, t in ent.items()} for name, ent in ents.items()} for kind, ents in self.bank.items()}
        env.scene.reset(ids)
        env.scene.reset_to(rows, ids, is_relative=True)
        env.sim.forward()
        env.scene.update(dt=0.0)

    def chunk(self, actions: np.ndarray) -> dict[str, np.ndarray]:
        import torch

        env = self.env
        acts = torch.from_numpy(actions).to(env.device)
        for k in range(actions.shape[1]):
            obs, *_ = env.step(acts[:, k])
            if self.render_all:
                self.images()
        out = {name: img.cpu().numpy().copy() for name, img in self.images().items()}
        out["state"] = obs["policy"].float().cpu().numpy().copy()
        return out

    def images(self) -> dict[str, Any]:
        return {name: self.env.scene.sensors[name].data.output["rgb"].torch[..., :3] for name in ("table_cam", "pusher_cam")}

    def close(self) -> None:
        self.gym_env.close()
        self.runtime.close()


def main(argv: list[str] | None = None) -> int:
    a = parse_args(argv)
    # Isaac Lab, Warp and the compiler print to stdout; keep stdout for the JSON alone.
    stdout = os.dup(1)
    os.dup2(2, 1)
    try:
        result = run(a)
    finally:
        sys.stdout.flush()
        os.dup2(stdout, 1)
        os.close(stdout)
    print(json.dumps(result, indent=2))
    return 0


def run(a: argparse.Namespace) -> dict[str, Any]:
    """Build both sides, run the alternating rounds, return the figures."""
    rng = np.random.default_rng(a.seed)

    def actions() -> np.ndarray:
        return rng.uniform(-1, 1, (a.num_envs, a.chunk, 2)).astype(np.float32)

    def same(x: dict[str, np.ndarray], y: dict[str, np.ndarray]) -> bool:
        return all(np.array_equal(x[k], y[k]) for k in x)

    t0 = time.perf_counter()
    mgr = build_manager(a)
    build_envfleet = time.perf_counter() - t0
    t0 = time.perf_counter()
    direct = DirectLoop(a)
    build_direct = time.perf_counter() - t0
    steps_per_round = a.chunks * a.chunk * a.num_envs
    rounds: list[dict[str, float]] = []
    identical = True
    try:
        state_ids = np.arange(a.num_envs) % BANK_SIZE
        mgr.reset_envs_to_state_ids(state_ids)
        direct.reset(state_ids)
        warm = actions()
        mgr.chunk_step(warm)  # warm-up: first-step kernel launches, first render
        direct.chunk(warm)
        sim_s0, wall_s0 = mgr.stats.sim_s, mgr.stats.wall_s
        for r in range(a.rounds):
            row: dict[str, float] = {}
            plan = [actions() for _ in range(a.chunks)]
            last: dict[str, dict[str, np.ndarray]] = {}
            # Alternate which side goes first, so that a trend in load favours neither.
            for side in ("envfleet", "direct") if r % 2 == 0 else ("direct", "envfleet"):
                t = time.perf_counter()
                for acts in plan:
                    if side == "envfleet":
                        out = mgr.chunk_step(acts).obs
                    else:
                        out = direct.chunk(acts)
                row[side] = time.perf_counter() - t
                last[side] = {k: v.copy() for k, v in out.items()}
            rounds.append(row)
            names = {"full_image": "table_cam", "wrist_image": "pusher_cam", "state": "state"}
            identical &= same({names[k]: v for k, v in last["envfleet"].items()}, last["direct"])
        stats = {"sim_s": mgr.stats.sim_s - sim_s0, "wall_s": mgr.stats.wall_s - wall_s0}
    finally:
        mgr.close()
        direct.close()
    total = {side: sum(r[side] for r in rounds) for side in ("envfleet", "direct")}
    n_steps = steps_per_round * a.rounds
    result = {
        "task": a.task,
        "device": a.device,
        "num_envs": a.num_envs,
        "chunk": a.chunk,
        "render": a.render,
        "camera_size": a.size,
        "env_steps_per_side": n_steps,
        "envfleet_env_steps_per_s": round(n_steps / total["envfleet"], 2),
        "direct_env_steps_per_s": round(n_steps / total["direct"], 2),
        "ratio": round(total["direct"] / total["envfleet"], 4),
        "per_round_ratio": [round(r["direct"] / r["envfleet"], 4) for r in rounds],
        "identical_observations": identical,
        "envfleet_inside_shard_share": round(stats["sim_s"] / stats["wall_s"], 4) if stats["wall_s"] else None,
        "build_s": {"envfleet": round(build_envfleet, 1), "direct": round(build_direct, 1)},
        "host": {"cpus": os.cpu_count(), "loadavg_1m": round(os.getloadavg()[0], 2), "python": sys.version.split()[0]},
    }
    return result


if __name__ == "__main__":
    sys.exit(main())
