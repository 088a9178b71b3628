"""The `gymnasium` section of ``nox -s bench``: the gymnasium backend on LeRobot's PushT and ALOHA, and its own cost.

- PushT and ALOHA, 4 envs, chunks of 8 random actions, the same seeds: envfleet through an in-process
  ``EnvWorker`` (its shards in the case's venv, ``train.simulator_python``) against gymnasium's
  ``AsyncVectorEnv`` over ``gymnasium.make`` of the same env, in that venv, and TorchRL's
  ``ParallelEnv(GymEnv)`` where TorchRL is (:func:`torchrl_overlay`). PushT: envfleet renders the
  read sub-step only (``render: rgb_array``, state and keypoints in the observation); ``AsyncVectorEnv``
  as LeRobot runs PushT (``obs_type: pixels_agent_pos``, a 96x96 image in every step's observation), and,
  for the record, ``AsyncVectorEnv`` over envfleet's own make calling ``render()`` once per chunk.
  ALOHA: its camera is in its observation, rendered by the env every step on both sides.
- The backend's own cost: ``envfleet/Zero-v0`` (a gymnasium env that costs nothing) against the toy
  backend frozen (``train.toy.frozen``), the same layout (4 envs, one per process, one 64x64 image).

The venvs are ``$ENVFLEET_PUSHT_PYTHON`` / ``$ENVFLEET_ALOHA_PYTHON`` or those ``nox -s tests-gymnasium``
builds (.nox/gymnasium-pusht, .nox/gymnasium-aloha). Run as a script by a case's venv, this module
measures one ``AsyncVectorEnv`` case and prints it as JSON.
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

import numpy as np

if sys.path and os.path.abspath(sys.path[0]) == os.path.dirname(os.path.abspath(__file__)):
    del sys.path[0]  # this file is named gymnasium: as a script, its folder must not shadow the package
from common import ROOT, rate_in_venv, vector_env_rate, write

import sections.gymnasium_peers as gymnasium_peers

NUM_ENVS, CHUNK, ROUNDS = 4, 8, 3
SEEDS = list(range(NUM_ENVS))
#: Timed and warm-up chunks per case (ALOHA renders three 640x480 cameras per step on the CPU).
CHUNKS = {"pusht": (12, 2), "aloha": (3, 1), "zero": (200, 10), "toy": (200, 10)}
PUSHT_ENVFLEET = {
    "id": "gym_pusht/PushT-v0",
    "render": "rgb_array",
    "kwargs": {"obs_type": "environment_state_agent_pos", "visualization_width": 96, "visualization_height": 96},
    "state_keys": {"state": "agent_pos", "environment_state": "environment_state"},
    "rescale_actions": True,
    "seeds": SEEDS,
}
ALOHA_ENVFLEET = {
    "id": "gym_aloha/AlohaInsertion-v0",
    "kwargs": {"obs_type": "pixels_agent_pos"},
    "image_keys": {"top": "pixels.top"},
    "state_keys": {"state": "agent_pos"},
    "seeds": SEEDS,
}
ACTION_DIM = {"pusht": 2, "aloha": 14, "zero": 4, "toy": 7}

__all__ = ["run", "sim_python"]


def sim_python(case: str) -> str | None:
    """The venv interpreter of ``case`` (pusht, aloha), if one exists."""
    for path in (os.environ.get(f"ENVFLEET_{case.upper()}_PYTHON", ""), os.path.join(ROOT, ".nox", f"gymnasium-{case}", "bin", "python")):
        if path and os.path.exists(path):
            return path
    return None


def _actions(case: str, k: int) -> np.ndarray:
    """Chunk ``k``: ``[NUM_ENVS, CHUNK, dim]`` in [-1, 1] (ALOHA: scaled by 0.3, joint targets near its start)."""
    scale = 0.3 if case == "aloha" else 1.0
    return (np.random.default_rng(k).uniform(-1, 1, (NUM_ENVS, CHUNK, ACTION_DIM[case])) * scale).astype(np.float32)


def _env_actions(case: str, k: int) -> np.ndarray:
    """Chunk ``k`` as the env takes it: PushT's [-1, 1] rescaled onto its [0, 512] box, as envfleet's rescale_actions does."""
    a = _actions(case, k)
    return ((a.astype(np.float64) + 1.0) * 256.0).astype(np.float32) if case == "pusht" else a


def worker_rate(train: dict[str, Any], case: str) -> float:
    """Sub-steps per second through an in-process ``EnvWorker`` (one stage)."""
    from envfleet.config import load_config
    from envfleet.dataproto import DataProto
    from envfleet_ray.runtime.worker import EnvWorker

    chunks, warmup = CHUNKS[case]
    cfg = load_config(data={"train": train, "actor": {"model": {"num_action_chunks": CHUNK}}, "rollout": {"pipeline_stage_num": 1}})
    worker = EnvWorker(cfg)
    try:
        worker.init_worker()
        worker.init_simulator()
        worker.reset_envs_to_state_ids(DataProto.from_dict(non_tensors={"state_ids": np.arange(NUM_ENVS) % len(SEEDS)}))

        def step(k: int) -> None:
            worker.env_interact_step(DataProto.from_dict(non_tensors={"actions": _actions(case, k)}, meta_info={"stage_id": 0}))

        for k in range(warmup):
            step(k)
        t0 = time.perf_counter()
        for k in range(chunks):
            step(100 + k)
        return NUM_ENVS * CHUNK * chunks / (time.perf_counter() - t0)
    finally:
        worker.close()


def _case_train(case: str) -> dict[str, Any]:
    section = PUSHT_ENVFLEET if case == "pusht" else ALOHA_ENVFLEET
    return {"simulator_type": "gymnasium", "num_envs": NUM_ENVS, "simulator_python": sim_python(case), "gymnasium": dict(section)}


def _zero_train() -> dict[str, Any]:
    zero = {"id": "envfleet_gymnasium.envs:envfleet/Zero-v0", "render": "rgb_array", "kwargs": {"image_size": 64}, "seeds": SEEDS}
    return {"simulator_type": "gymnasium", "num_envs": NUM_ENVS, "gymnasium": zero}


def _toy_train() -> dict[str, Any]:
    return {
        "simulator_type": "toy",
        "num_envs": NUM_ENVS,
        "init_params": {"camera_heights": 64, "camera_widths": 64, "camera_names": ["table"]},
        "toy": {"frozen": True},
        "max_episode_steps": 1000,
    }


def async_rate(case: str, how: str) -> float:
    """Sub-steps per second of gymnasium's ``AsyncVectorEnv`` over the case, in its venv (this module as a script).

    ``how``: ``obs`` (PushT as LeRobot runs it, its image in every observation; ALOHA as it is) or
    ``render`` (PushT made as envfleet makes it, ``render()`` called once per chunk).
    """
    import functools

    import gymnasium
    from gymnasium.vector import AsyncVectorEnv

    section = PUSHT_ENVFLEET if case == "pusht" else ALOHA_ENVFLEET
    # 'module:Id': each of AsyncVectorEnv's processes imports the module that registers the id.
    env_id = f"{section['id'].split('/', 1)[0]}:{section['id']}"
    kwargs = dict(section["kwargs"])
    if case == "pusht" and how == "obs":
        kwargs = {"obs_type": "pixels_agent_pos", "observation_width": 96, "observation_height": 96}
    if how == "render":
        kwargs["render_mode"] = "rgb_array"
    chunks, warmup = CHUNKS[case]
    vec = AsyncVectorEnv([functools.partial(gymnasium.make, env_id, **kwargs) for _ in range(NUM_ENVS)], context="spawn")
    try:
        vec.reset(seed=SEEDS)
        if how == "obs":
            return vector_env_rate(vec, functools.partial(_env_actions, case), warmup, chunks)
        for k in range(warmup):
            for a in _env_actions(case, k).transpose(1, 0, 2):
                vec.step(a)
            vec.call("render")
        t0 = time.perf_counter()
        for k in range(chunks):
            for a in _env_actions(case, 100 + k).transpose(1, 0, 2):
                vec.step(a)
            vec.call("render")
        return NUM_ENVS * CHUNK * chunks / (time.perf_counter() - t0)
    finally:
        vec.close()


def torchrl_overlay() -> str | None:
    """Where TorchRL is: verl's pins installed apart (``.nox/verl-overlay``, by tests-verl / tests-torchrl), or
    ``$ENVFLEET_TORCHRL_OVERLAY``. PushT's and ALOHA's venvs hold no torch, so TorchRL runs from the main venv
    with that overlay and the case venv's packages put first on ``PYTHONPATH``."""
    for path in (os.environ.get("ENVFLEET_TORCHRL_OVERLAY", ""), os.path.join(ROOT, ".nox", "verl-overlay")):
        if path and os.path.isdir(os.path.join(path, "torchrl")):
            return path
    return None


def torchrl_rate(case: str) -> float:
    """Sub-steps per second of TorchRL's ``ParallelEnv(GymEnv)`` over the case (PushT as LeRobot runs it), as a script."""
    import functools

    import torch
    from torchrl.envs import GymEnv, ParallelEnv

    section = PUSHT_ENVFLEET if case == "pusht" else ALOHA_ENVFLEET
    env_id = f"{section['id'].split('/', 1)[0]}:{section['id']}"
    kwargs = (
        {"obs_type": "pixels_agent_pos", "observation_width": 96, "observation_height": 96} if case == "pusht" else dict(section["kwargs"])
    )
    chunks, warmup = CHUNKS[case]
    penv = ParallelEnv(NUM_ENVS, functools.partial(GymEnv, env_id, **kwargs), mp_start_method="spawn")
    try:
        penv.set_seed(SEEDS[0])
        td = penv.reset()

        def chunk(k: int) -> None:
            nonlocal td
            for a in _env_actions(case, k).transpose(1, 0, 2):
                td = penv.step(td.set("action", torch.from_numpy(np.ascontiguousarray(a))))["next"]

        for k in range(warmup):
            chunk(k)
        t0 = time.perf_counter()
        for k in range(chunks):
            chunk(100 + k)
        return NUM_ENVS * CHUNK * chunks / (time.perf_counter() - t0)
    finally:
        penv.close()


def _torchrl_in_main_venv(case: str, overlay: str) -> float:
    import subprocess

    python = sim_python(case)
    assert python is not None
    purelib = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], capture_output=True, text=True, check=True
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([overlay, purelib.stdout.strip(), os.path.join(ROOT, "bench")])}
    out = subprocess.run(
        [sys.executable, os.path.abspath(__file__), f"{case}:torchrl"], capture_output=True, text=True, timeout=1800, env=env
    )
    if out.returncode != 0:
        raise RuntimeError(f"gymnasium bench case {case}:torchrl failed:\n{out.stderr[-3000:]}")
    return float(json.loads(out.stdout.strip().splitlines()[-1])["rate"])


def run() -> None:
    """Print and write docs/benchmarks/gymnasium.md."""
    rows: list[dict[str, Any]] = []
    notes: list[str] = []
    runs: dict[str, list[float]] = {}

    def add(key: str, rate: float) -> None:
        runs.setdefault(key, []).append(rate)
        print(key, round(rate, 1), flush=True)

    cases = [c for c in ("pusht", "aloha") if sim_python(c) is not None]
    overlay = torchrl_overlay()
    if len(cases) < 2:
        print(
            "gymnasium: no PushT or ALOHA venv (run `nox -s tests-gymnasium` first, or set ENVFLEET_PUSHT_PYTHON / ENVFLEET_ALOHA_PYTHON)"
        )
    # The cases alternate, round after round, so that a slow spell of the shared machine hits all of them.
    for _ in range(ROUNDS):
        for case in cases:
            python = sim_python(case)
            assert python is not None
            add(f"{case}/envfleet", worker_rate(_case_train(case), case))
            add(f"{case}/async", rate_in_venv("gymnasium", python, __file__, f"{case}:obs", timeout=1800))
            if case == "pusht":
                add(f"{case}/async-render", rate_in_venv("gymnasium", python, __file__, f"{case}:render", timeout=1800))
            if overlay is not None:
                add(f"{case}/torchrl", _torchrl_in_main_venv(case, overlay))
        add("zero/envfleet", worker_rate(_zero_train(), "zero"))
        add("zero/toy", worker_rate(_toy_train(), "toy"))
    med = {k: float(np.median(v)) for k, v in runs.items()}
    labels = {
        "pusht/envfleet": "PushT: envfleet EnvWorker, render() at the read sub-step only (shards in PushT's venv)",
        "pusht/async": "PushT: gymnasium AsyncVectorEnv, obs_type pixels_agent_pos (image every step, as LeRobot)",
        "pusht/async-render": "PushT: gymnasium AsyncVectorEnv, envfleet's make, render() once per chunk",
        "pusht/torchrl": "PushT: TorchRL ParallelEnv(GymEnv), obs_type pixels_agent_pos",
        "aloha/envfleet": "ALOHA insertion: envfleet EnvWorker (camera in the observation; shards in ALOHA's venv)",
        "aloha/async": "ALOHA insertion: gymnasium AsyncVectorEnv",
        "aloha/torchrl": "ALOHA insertion: TorchRL ParallelEnv(GymEnv)",
        "zero/envfleet": "envfleet/Zero-v0 (a zero-cost gymnasium env): envfleet EnvWorker",
        "zero/toy": "toy backend, frozen (zero cost): envfleet EnvWorker",
    }
    for key, label in labels.items():
        if key in med:
            rows.append({"what": label, "sub-steps/s": med[key], "ms per chunk of 4x8": NUM_ENVS * CHUNK / med[key] * 1e3})
    if "pusht/envfleet" in med:
        ratio = med["pusht/envfleet"] / med["pusht/async"]
        notes.append(
            f"PushT: envfleet / AsyncVectorEnv as LeRobot runs it: {ratio:.2f}x (target >= 1.5x: {'met' if ratio >= 1.5 else 'not met'}); "
            f"envfleet / AsyncVectorEnv rendering once per chunk too: {med['pusht/envfleet'] / med['pusht/async-render']:.2f}x."
        )
    if "aloha/envfleet" in med:
        ratio = med["aloha/envfleet"] / med["aloha/async"]
        notes.append(
            f"ALOHA: envfleet / AsyncVectorEnv: {ratio:.2f}x (target: not slower, >= 1.0x: {'met' if ratio >= 1.0 else 'not met'}); "
            "its camera is in its observation, so render last has nothing to skip."
        )
    zero_ms = NUM_ENVS * CHUNK / med["zero/envfleet"] * 1e3
    toy_ms = NUM_ENVS * CHUNK / med["zero/toy"] * 1e3
    notes.append(
        f"The backend's own cost: a chunk of {CHUNK} on {NUM_ENVS} zero-cost gymnasium envs takes {zero_ms:.2f} ms against "
        f"{toy_ms:.2f} ms for the frozen toy ({zero_ms - toy_ms:+.2f} ms: gymnasium's step and render calls, {CHUNK} per env)."
    )
    notes.append(
        f"{NUM_ENVS} envs, one per process, chunks of {CHUNK} random actions, seeds {SEEDS}; PushT {CHUNKS['pusht'][0]}, "
        f"ALOHA {CHUNKS['aloha'][0]}, zero-cost {CHUNKS['zero'][0]} chunks timed after a warm-up; each figure the median of "
        f"{ROUNDS} rounds in which the cases alternate; the runs: {json.dumps({k: [round(x, 1) for x in v] for k, v in runs.items()})}."
    )
    if overlay is None:
        notes.append("TorchRL's ParallelEnv(GymEnv) is not measured: no TorchRL here (run `nox -s tests-torchrl` first).")
    else:
        notes.append(
            "TorchRL's ParallelEnv(GymEnv) (torchrl of verl's lock) runs from the main venv with the case venv's packages first "
            "on PYTHONPATH: the case venvs hold no torch. "
            + "; ".join(
                f"envfleet / ParallelEnv on {c}: {med[f'{c}/envfleet'] / med[f'{c}/torchrl']:.2f}x" for c in cases if f"{c}/torchrl" in med
            )
            + "."
        )
    write("gymnasium", rows, notes)
    gymnasium_peers.run()


if __name__ == "__main__":
    case, how = sys.argv[1].split(":")
    rate = torchrl_rate(case) if how == "torchrl" else async_rate(case, how)
    print(json.dumps({"case": sys.argv[1], "rate": rate}))
