"""An EnvWorker steps and resets without importing tensordict (its actor's memory, docs/cluster.md).

tensordict pulls in torch._dynamo and sympy (some 80 MiB per process); a worker only
forwards numpy columns, and the TensorDict is built where ``batch`` is first read (the
driver). The worker runs in a fresh interpreter; its pickled results are read here.
"""

from __future__ import annotations

import pickle
import subprocess
import sys
import textwrap

import numpy as np

_WORKER = """
import pickle, sys

import numpy as np

from envfleet.config import load_config
from envfleet.dataproto import DataProto
from envfleet_ray.runtime.worker import EnvWorker

cfg = load_config(overrides=["train.simulator_type=toy", "train.num_envs=2", "actor.model.num_action_chunks=2",
                             "train.init_params.camera_heights=8", "train.init_params.camera_widths=8"])
worker = EnvWorker(cfg)
worker.init_worker()
worker.init_simulator()
try:
    # The inputs arrive pickled, as through Ray.
    reset = worker.reset_envs_to_state_ids(pickle.loads(pickle.dumps(DataProto.from_dict(non_tensors={"state_ids": np.array([0, 1])}))))
    acts = DataProto.from_dict(non_tensors={"actions": np.full((2, 2, 7), 0.1, np.float32)}, meta_info={"stage_id": 0})
    step = worker.env_interact_step(pickle.loads(pickle.dumps(acts)))
    out = pickle.dumps((reset, step))
finally:
    worker.close()
heavy = sorted(m for m in sys.modules if m.split(".")[0] == "tensordict")
sys.stdout.write(repr(heavy) + "\\n")
sys.stdout.flush()
sys.stdout.buffer.write(out)
"""


def test_a_worker_steps_without_importing_tensordict() -> None:
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(_WORKER)], capture_output=True, timeout=300)
    assert proc.returncode == 0, proc.stderr.decode()[-3000:]
    first, _, payload = proc.stdout.partition(b"\n")
    assert first == b"[]", f"the worker imported tensordict modules: {first.decode()[:500]}"
    reset, step = pickle.loads(payload)
    # The driver's side builds the TensorDict from the same columns.
    assert step.batch["full_image"].shape == (2, 8, 8, 3)
    assert step.batch["rews"].shape == (2, 2)
    assert reset.batch["state"].shape == (2, 8)
    assert not np.array_equal(step.batch["state"].numpy(), reset.batch["state"].numpy()), "a step of 0.1 moved nothing"
