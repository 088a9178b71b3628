"""Times concat, chunk and a pickle round trip of step-sized DataProtos, for one version of the code.

`bench/run.py dataproto` runs it once per version per round, each in a fresh process,
so that neither version inherits the other's allocator state (a pickled step is about
0.8 MB, and where such buffers come from depends on what ran before).

    python bench/dataproto_ops.py            # envfleet.dataproto as installed
    python bench/dataproto_ops.py OLD.py     # a dataproto.py loaded from that file

Prints one JSON object: ``{"operation": seconds per call, ...}``.
"""

from __future__ import annotations

import importlib.util
import json
import os
import pickle
import sys
from typing import Any

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import timed

N, HW, CHUNK, WORKERS = 8, 128, 8, 4


def load(path: str | None) -> Any:
    """envfleet.dataproto, or the dataproto.py at ``path`` as a module of its own."""
    if path is None:
        from envfleet import dataproto

        return dataproto
    name = "envfleet_dataproto_before"
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # pickle finds the rebuild function by its module's name
    spec.loader.exec_module(module)
    return module


def step_arrays(seed: int) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """One env step's result as the worker builds it: images, state, rewards and flags, a dozen small infos, task texts."""
    rng = np.random.default_rng(seed)
    tensors: dict[str, np.ndarray] = {
        "full_image": rng.integers(0, 255, (N, HW, HW, 3), dtype=np.uint8),
        "wrist_image": rng.integers(0, 255, (N, HW, HW, 3), dtype=np.uint8),
        "state": rng.standard_normal((N, 8)).astype(np.float32),
        "rews": rng.standard_normal((N, CHUNK)).astype(np.float32),
        "terminations": rng.random((N, CHUNK)) < 0.1,
        "truncations": np.zeros((N, CHUNK), bool),
    }
    for i in range(12):
        tensors[f"info_{i}"] = rng.integers(0, 100, N).astype(np.int64 if i % 2 else np.float32)
    non_tensors = {"task_descriptions": np.array([f"put the bowl on plate {i}" for i in range(N)], dtype=object)}
    return tensors, non_tensors


def main(argv: list[str]) -> None:
    mod = load(argv[0] if argv else None)
    cls = mod.DataProto
    steps = []
    for w in range(WORKERS):
        arrays, non_tensors = step_arrays(seed=w)
        built = cls.from_dict({k: torch.from_numpy(v) for k, v in arrays.items()}, non_tensors, {"stage_id": 0})
        steps.append(pickle.loads(pickle.dumps(built, protocol=5)))  # as a worker's result arrives: unpickled
    whole = cls.concat(steps)
    whole.batch  # noqa: B018  # chunk slices the TensorDict; build it once, outside the timing
    step = steps[0]
    cases = {  # label: (call, calls per timing)
        f"concat of {WORKERS} step results ({WORKERS}x{N} rows)": (lambda: cls.concat(steps), 300),
        f"chunk({WORKERS}) of {WORKERS * N} rows": (lambda: whole.chunk(WORKERS), 300),
        f"pickle round trip of one step ({N} rows)": (lambda: pickle.loads(pickle.dumps(step, protocol=5)), 100),
    }
    print(json.dumps({label: timed(call, repeat, warmup=20) for label, (call, repeat) in cases.items()}))


if __name__ == "__main__":
    main(sys.argv[1:])
