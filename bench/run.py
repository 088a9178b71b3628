"""envfleet benchmarks: prints the figures, writes docs/benchmarks/<section>.json/.md and plots.

    python bench/run.py                 # every section that can run here
    python bench/run.py manager worker  # some sections

Each section is one module of bench/sections/ with a ``run()``; what they share is in
bench/common.py (timing, tables) and bench/configs.py (toy and LIBERO configs, Ray).
Sections: manager (EnvManager), worker and pipeline (Ray worker), libero
(LIBERO backend), isaac (Isaac backend; runs in the Python 3.12 venv of
`nox -s tests-isaac` when it exists), verl (a step through verl's worker group against
envfleet's own; runs in the venv of `nox -s tests-verl` when it exists), dataproto (concat, chunk
and pickling of step-sized DataProtos, against the code before verl's whole surface), libero_dense (several
LIBERO envs per process: memory, first reset, speed, 64 envs), metaworld (MetaWorld in its own venv), maniskill
(ManiSkill3 in the venv of `nox -s tests-maniskill`), fleet (a group
of 1 to 64 workers on a 5-node Ray cluster on this machine, and a lost node), faces (LIBERO through the
gymnasium and TorchRL faces against the EnvWorker and against AsyncVectorEnv / ParallelEnv; runs in the
venv of `nox -s tests-verl`, which has torchrl, when the bench venv has not), async (first-ready stepping against
lockstep: the toy with heavy-tailed step costs, LIBERO with frequent auto-resets, TorchRL's AsyncEnvPool),
remote (`envfleet serve` over loopback and TLS against the in-process manager, and LIBERO over it against the
in-process worker), record (a LIBERO stage with and without train.record, in turns), gymnasium (LeRobot's PushT and
ALOHA through the gymnasium backend against AsyncVectorEnv, in the venvs of `nox -s tests-gymnasium`, and the
backend's own cost; then gymnasium_peers: CartPole and HalfCheetah at 1 to 64 envs against SyncVectorEnv,
AsyncVectorEnv, SB3's SubprocVecEnv and EnvPool), realtime (train.execution: clock wall against mode chunk under a policy that thinks, and clock
sim's own cost). Each prints a table and
writes
docs/benchmarks/<section>.md, included by docs/benchmarks.md.
"""

from __future__ import annotations

import importlib
import os
import sys
import time

SECTIONS = (
    "manager",
    "worker",
    "pipeline",
    "libero",
    "libero_dense",
    "isaac",
    "verl",
    "dataproto",
    "metaworld",
    "maniskill",
    "fleet",
    "faces",
    "async",
    "remote",
    "record",
    "gymnasium",
    "gymnasium_peers",
    "realtime",
)

# The sections and the modules they share (common, configs) are imported from bench/.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def main(argv: list[str]) -> int:
    sections = argv or list(SECTIONS)
    unknown = [name for name in sections if name not in SECTIONS]
    if unknown:
        print(f"unknown section {unknown[0]!r}; choose from {', '.join(SECTIONS)}", file=sys.stderr)
        return 2
    for name in sections:
        module = importlib.import_module(f"sections.{name}")
        t0 = time.perf_counter()
        module.run()
        print(f"({name}: {time.perf_counter() - t0:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
