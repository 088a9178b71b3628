"""The `faces` section of `nox -s bench` (bench/run.py faces): LIBERO through envfleet's faces.

2 libero_spatial envs (state ids 0 and 1: task 0, trials 0 and 1), 128x128, the agentview
and wrist cameras, chunks of 8 random actions. Sub-steps per second, all variants built
before any is timed and then stepped one chunk each in turn, round after round, so that
the shared machine's load hits all alike:

- ``worker``: envfleet's ``EnvWorker`` through ``EnvWorkerGroup`` (a Ray actor), render last,
  as the libero section's fast part measures it;
- ``gym``: ``envfleet.gym.make_vector_env``, one ``step`` per chunk, render last;
- ``torchrl``: ``envfleet.torchrl.make_env``, one ``step`` per chunk, render last;
- ``async_vector_env``: gymnasium's ``AsyncVectorEnv`` (spawn) over 2 LIBERO
  ``OffScreenRenderEnv`` wrapped as a ``gymnasium.Env`` (:class:`LiberoGym`), one action per
  ``step``, rendering every sub-step, as its users run it;
- ``parallel_env``: TorchRL's ``ParallelEnv`` of 2 ``GymWrapper`` over the same ``gym.Env``
  (torchrl 0.10.1 has no LIBERO env of its own), one action per ``step``;
- ``torchrl_libero_env``, ``lerobot_libero_env``: a second group, built after the first is
  closed (bench/faces_peers.py): TorchRL's own ``LiberoEnv`` in a ``ParallelEnv`` of 2 and
  LeRobot's LIBERO env with its async vector env, each in a venv of its own, against the
  ``EnvWorker`` path again.

envfleet's envs run one per process (``envs_per_process: 1``), as both stacks they are
compared with do. TorchRL is on verl's lock (torchrl 0.10.1), which ``nox -s tests-verl`` lays over the tests
venv (``.nox/verl-overlay``): where this interpreter has no torchrl, the whole section runs
on that lock (or under ``ENVFLEET_VERL_PYTHON``), so every variant is still alternated in
one run; without it, the TorchRL variants are reported not run.
``ENVFLEET_BENCH_QUICK=1``: 2 rounds instead of 8, to check that the section runs.
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
import time
from typing import Any

import gymnasium as gym
import numpy as np

if sys.path and os.path.abspath(sys.path[0]) == os.path.dirname(os.path.abspath(__file__)):
    sys.path.pop(0)  # run alone: this folder would shadow LIBERO's `libero` package with libero.py
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # bench/, when run alone
from common import ROOT, verl_env, write
from configs import libero_cfg, libero_installed, start_ray
from faces_peers import measure_peers, peer_notes, peer_rows, wanted_peers

N, HW, CHUNK = 2, 128, 8
CAMERAS = ("agentview", "robot0_eye_in_hand")
QUICK = bool(os.environ.get("ENVFLEET_BENCH_QUICK"))
ROUNDS = 2 if QUICK else 8
# Each variant is built this many times, and its chunks of every build pooled: on 2026-12-02 the
# same variant's median chunk was 0.44 s in one build and 0.50 s in the next (same actions,
# same states), a spread between builds larger than the 5% the faces are held to.
BUILDS = 1 if QUICK else int(os.environ.get("ENVFLEET_BENCH_FACES_BUILDS", "3"))

LABELS = {
    "worker": "EnvWorker (EnvWorkerGroup, Ray actor), render last",
    "gym": "gymnasium face (make_vector_env), a step per chunk, render last",
    "torchrl": "TorchRL face (make_env), a step per chunk, render last",
    "async_vector_env": "gymnasium AsyncVectorEnv over LIBERO gym.Env, a step per action, render every step",
    "parallel_env": "TorchRL ParallelEnv of GymWrapper(LIBERO gym.Env), a step per action, render every step",
}


def run() -> None:
    """Measure here if TorchRL imports, else under the TorchRL venv's Python; write the table."""
    if not libero_installed():
        print("faces: LIBERO backend not installed, skipped")
        return
    if _has_torchrl():
        result = measure()
    else:
        found = verl_env()
        if found is None:
            print("faces: no venv with torchrl (run `nox -s tests-verl` first, or set ENVFLEET_VERL_PYTHON): TorchRL variants not run")
            result = measure()
        else:
            python, verl = found
            print(f"faces: torchrl is not in this venv; the section runs on verl's lock under {python}", flush=True)
            env = {**verl, "PYTHONPATH": os.pathsep.join(p for p in (os.path.join(ROOT, "bench"), verl.get("PYTHONPATH", "")) if p)}
            out = subprocess.run([python, os.path.abspath(__file__), "measure"], stdout=subprocess.PIPE, text=True, timeout=3600, env=env)
            if out.returncode != 0:
                raise RuntimeError(f"faces: the measurement under {python} failed (exit {out.returncode}); its stderr is above")
            result = json.loads(out.stdout.strip().splitlines()[-1])
    _write(result, _peers())


def _peers() -> dict[str, Any]:
    """The second group (bench/faces_peers.py): the peer stacks' own LIBERO envs against the EnvWorker path."""
    from sections.libero import WorkerStage

    if not wanted_peers():
        return {}
    start_ray()
    return measure_peers(ROUNDS, lambda: WorkerStage(N, HW, {"envs_per_process": 1}, cpus=N))


def _has_torchrl() -> bool:
    try:
        import torchrl  # noqa: F401
    except ImportError:
        return False
    return True


# ---------------------------------------------------------------------- the stack users run today
class LiberoGym(gym.Env):  # type: ignore[misc]
    """One LIBERO ``OffScreenRenderEnv`` as a ``gymnasium.Env``, the way users wrap it: every ``step``
    is one action and returns both cameras' images (flipped upright) and the 9-dim proprio state.

    Built in the process that steps it (``AsyncVectorEnv`` and ``ParallelEnv`` build it in their
    workers), on libero_spatial task 0, reset to trial ``trial``'s fixed initial state."""

    metadata: dict[str, Any] = {"render_modes": []}

    def __init__(self, trial: int) -> None:
        from libero.libero.envs import OffScreenRenderEnv

        from envfleet_libero.suites import SuiteIndex

        task = SuiteIndex("libero_spatial").tasks[0]
        self.init_state = task.init_states[trial % len(task.init_states)]
        # ignore_done: robosuite's horizon would end the timed loop; envfleet's side sets no horizon either.
        self.env = OffScreenRenderEnv(
            bddl_file_name=task.bddl_file, camera_names=list(CAMERAS), camera_heights=HW, camera_widths=HW, ignore_done=True
        )
        image = gym.spaces.Box(0, 255, (HW, HW, 3), np.uint8)
        self.observation_space = gym.spaces.Dict(
            {"agentview_image": image, "wrist_image": image, "state": gym.spaces.Box(-np.inf, np.inf, (9,), np.float32)}
        )
        self.action_space = gym.spaces.Box(-1.0, 1.0, (7,), np.float32)

    def _obs(self, raw: dict[str, Any]) -> dict[str, np.ndarray]:
        state = np.concatenate([raw["robot0_eef_pos"], raw["robot0_eef_quat"], raw["robot0_gripper_qpos"]])
        return {
            "agentview_image": np.ascontiguousarray(raw["agentview_image"][::-1, ::-1]),
            "wrist_image": np.ascontiguousarray(raw["robot0_eye_in_hand_image"][::-1, ::-1]),
            "state": state.astype(np.float32),
        }

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        """LIBERO's reset, then the trial's fixed initial state."""
        super().reset(seed=seed)
        self.env.reset()
        return self._obs(self.env.set_init_state(self.init_state)), {}

    def step(self, action: np.ndarray) -> tuple[dict[str, np.ndarray], float, bool, bool, dict[str, Any]]:
        """One action, both cameras rendered."""
        raw, reward, done, _ = self.env.step(np.asarray(action, dtype=np.float64))
        return self._obs(raw), float(reward), bool(done), False, {}

    def close(self) -> None:
        """Frees LIBERO's env."""
        self.env.close()


def _gym_env(trial: int) -> Any:
    return LiberoGym(trial)


def _gym_wrapped(trial: int) -> Any:
    from torchrl.envs import GymWrapper

    return GymWrapper(_gym_env(trial))


# ---------------------------------------------------------------------- the variants
def _cfg() -> Any:
    from omegaconf import OmegaConf, read_write

    cfg = libero_cfg(N, HW, "last", chunk=CHUNK)
    with read_write(cfg):
        OmegaConf.update(cfg, "train.libero.envs_per_process", 1)
    return cfg


# Every variant steps the same chunks of actions from the same initial states: LIBERO's cost
# per step depends on the arm's path (contacts), so a variant given other actions would be
# timed on other physics. 1 is the seed of sections.libero.WorkerStage, the EnvWorker path.
ACTION_SEED = 1


def _actions(rng: np.random.Generator) -> np.ndarray:
    return (rng.uniform(-1, 1, (N, CHUNK, 7)) * 0.3).astype(np.float32)


class _Gym:
    def __init__(self) -> None:
        from envfleet.gym import make_vector_env

        self.env = make_vector_env(_cfg())
        self.env.reset(options={"state_ids": np.arange(N)})
        self.rng = np.random.default_rng(ACTION_SEED)
        self.chunk()

    def chunk(self) -> float:
        actions = _actions(self.rng)
        t0 = time.perf_counter()
        self.env.step(actions)
        return time.perf_counter() - t0

    def close(self) -> None:
        self.env.close()


class _TorchRL:
    def __init__(self) -> None:
        import torch
        from tensordict import TensorDict

        from envfleet.torchrl import make_env

        self.torch = torch
        self.env = make_env(_cfg())
        self.td = self.env.reset(TensorDict({"state_ids": torch.arange(N)}, batch_size=[N]))
        self.rng = np.random.default_rng(ACTION_SEED)
        self.chunk()

    def chunk(self) -> float:
        self.td["action"] = self.torch.from_numpy(_actions(self.rng))
        t0 = time.perf_counter()
        self.env.step(self.td)
        return time.perf_counter() - t0

    def close(self) -> None:
        self.env.close()


class _AsyncVectorEnv:
    def __init__(self) -> None:
        # spawn: LIBERO's EGL context does not survive a fork (docs: Pitfalls).
        self.env = gym.vector.AsyncVectorEnv([functools.partial(_gym_env, i) for i in range(N)], context="spawn")
        self.env.reset()
        self.rng = np.random.default_rng(ACTION_SEED)
        self.chunk()

    def chunk(self) -> float:
        actions = _actions(self.rng)
        t0 = time.perf_counter()
        for k in range(CHUNK):
            self.env.step(actions[:, k])
        return time.perf_counter() - t0

    def close(self) -> None:
        self.env.close()


class _ParallelEnv:
    def __init__(self) -> None:
        import torch
        from torchrl.envs import ParallelEnv

        self.torch = torch
        self.env = ParallelEnv(N, [functools.partial(_gym_wrapped, i) for i in range(N)], mp_start_method="spawn")
        self.td = self.env.reset()
        self.rng = np.random.default_rng(ACTION_SEED)
        self.chunk()

    def chunk(self) -> float:
        actions = self.torch.from_numpy(_actions(self.rng))
        t0 = time.perf_counter()
        for k in range(CHUNK):
            self.td["action"] = actions[:, k]
            self.env.step(self.td)
        return time.perf_counter() - t0

    def close(self) -> None:
        self.env.close()


def _mem_available_gb() -> float:
    with open("/proc/meminfo") as fh:
        return next(int(line.split()[1]) for line in fh if line.startswith("MemAvailable:")) / 2**20


def measure() -> dict[str, Any]:
    """Build every variant that runs here, then alternate them chunk by chunk; seconds per chunk each."""
    from sections.libero import WorkerStage

    torchrl = _has_torchrl()
    builders: dict[str, Any] = {
        "worker": lambda: WorkerStage(N, HW, {"envs_per_process": 1}, cpus=N),
        "gym": _Gym,
        "torchrl": _TorchRL if torchrl else None,
        "async_vector_env": _AsyncVectorEnv,
        "parallel_env": _ParallelEnv if torchrl else None,
    }
    wanted = [v for v in os.environ.get("ENVFLEET_BENCH_FACES", ",".join(builders)).split(",") if v]
    not_run: dict[str, str] = {}
    for name in builders:
        if name not in wanted:
            not_run[name] = "left out by ENVFLEET_BENCH_FACES"
        elif builders[name] is None:
            not_run[name] = "torchrl does not import here"
    times: dict[str, list[float]] = {}
    per_build: dict[str, list[float]] = {}  # each build's median chunk
    if "worker" in wanted:
        start_ray()
    for b in range(BUILDS):
        variants: dict[str, Any] = {}
        try:
            for name, build in builders.items():
                if name in not_run:
                    continue
                if _mem_available_gb() < 4:  # 2 LIBERO processes hold about 3.5 GB
                    not_run[name] = f"{_mem_available_gb():.1f} GB available when it was to be built"
                    continue
                t0 = time.perf_counter()
                variants[name] = build()
                print(f"faces: {name} built in {time.perf_counter() - t0:.0f} s (build {b + 1} of {BUILDS})", file=sys.stderr, flush=True)
            mine: dict[str, list[float]] = {}
            for r in range(ROUNDS):
                for name, variant in variants.items():
                    mine.setdefault(name, []).append(variant.chunk())
                print(f"faces: round {r + 1} of {ROUNDS}", file=sys.stderr, flush=True)
        finally:
            for variant in variants.values():
                variant.close()
        for name, chunks in mine.items():
            times.setdefault(name, []).extend(chunks)
            per_build.setdefault(name, []).append(float(np.median(chunks)))
    return {
        "seconds_per_chunk": times,
        "build_medians": per_build,
        "not_run": not_run,
        "torchrl": _torchrl_version(),
        "python": sys.executable,
    }


def _torchrl_version() -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("torchrl")  # torchrl's own __version__ reads 0.0.0+unknown in its 0.10.1 wheel
    except PackageNotFoundError:
        return None


def _write(result: dict[str, Any], peers: dict[str, Any]) -> None:
    times: dict[str, list[float]] = result["seconds_per_chunk"]
    rate = {name: N * CHUNK / float(np.median(t)) for name, t in times.items()}
    worker = rate.get("worker")
    rows = []
    for name, label in LABELS.items():
        if name not in rate:
            reason = result["not_run"].get(name, "-")
            rows.append(
                {
                    "variant": label,
                    "sub-steps/s": f"not run ({reason})",
                    "x EnvWorker": "-",
                    "median chunk (s)": "-",
                    "builds' medians (s)": "-",
                }
            )
            continue
        ratio = rate[name] / worker if worker else "-"
        builds = result.get("build_medians", {}).get(name, [])
        rows.append(
            {
                "variant": label,
                "sub-steps/s": rate[name],
                "x EnvWorker": ratio,
                "median chunk (s)": float(np.median(times[name])),
                "builds' medians (s)": ", ".join(f"{m:.3f}" for m in builds),
            }
        )
    notes = [
        f"{N} libero_spatial envs (task 0, trials 0 and 1), {HW}x{HW}, cameras {' and '.join(CAMERAS)}, chunks of {CHUNK} random "
        f"actions, the same for every variant; each variant built {BUILDS} times: every variant built, then stepped one chunk "
        f"each in turn for {ROUNDS} rounds, then closed; the medians pool the chunks of every build. "
        f"envfleet's envs run one per process; run under {os.path.relpath(result['python'], ROOT)} (torchrl {result['torchrl'] or 'not installed'}).",
        "A chunk of the two stacks users run today is 8 steps of one action, each rendering both cameras; envfleet's faces "
        "step one chunk per call and render its last sub-step only.",
    ]
    for face, stack, target in (("gym", "async_vector_env", "gymnasium"), ("torchrl", "parallel_env", "TorchRL")):
        if face in rate and worker:
            notes.append(f"{target} face: {rate[face] / worker:.2f}x the EnvWorker path (target >= 0.95).")
        if face in rate and stack in rate:
            notes.append(f"{target} face: {rate[face] / rate[stack]:.1f}x {LABELS[stack].split(',')[0]} (target >= 4x).")
    rows += peer_rows(peers)
    notes += peer_notes(peers, rate)
    extra = {key: result[key] for key in ("seconds_per_chunk", "build_medians", "not_run", "torchrl", "python")}
    extra["peers"] = peers
    write("faces", rows, notes, extra)


if __name__ == "__main__":
    if sys.argv[1:] == ["measure"]:
        # Imported by its package name, so that the spawned workers of AsyncVectorEnv and ParallelEnv
        # find the env factories as sections.faces.* rather than __main__.*.
        from sections import faces

        print(json.dumps(faces.measure()))
    else:
        run()
