"""A real ``envfleet serve`` subprocess on loopback for the remote tests, and what they check around it."""

from __future__ import annotations

import os
import re
import secrets
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from envfleet.config import load_config

from ..conftest import child_pids, pid_alive, shm_segments

#: The token of this test process's servers: its own, so that no server of a test on another
#: pytest worker would welcome this process's clients, should one reach its port.
TOKEN = f"remote-test-token-{os.getpid()}-{secrets.token_hex(8)}"

#: The toy stage every remote test serves unless it says otherwise: small images, a fixed chunk.
TOY = (
    "train.simulator_type=toy",
    "train.num_envs=4",
    "actor.model.num_action_chunks=4",
    "rollout.pipeline_stage_num=1",
    "train.init_params.camera_heights=16",
    "train.init_params.camera_widths=16",
    "train.toy.envs_per_process=2",
)


def overrides(*extra: str) -> list[str]:
    """:data:`TOY` with ``extra`` ``key=value`` strings after it (later ones win)."""
    return [*TOY, *extra]


def local_cfg(*extra: str, remote: str | None = None, token_file: str | None = None, **remote_keys: Any) -> Any:
    """The loaded config of :func:`overrides`; with ``remote``, its ``train.remote`` pointing there."""
    more = [] if remote is None else [f"train.remote.address={remote}"]
    if token_file is not None:
        more.append(f"train.remote.token_file={token_file}")
    more += [f"train.remote.{k}={v}" for k, v in remote_keys.items()]
    return load_config(overrides=[*overrides(*extra), *more])


@dataclass
class Served:
    """One ``envfleet serve`` process: its address and its output so far."""

    proc: subprocess.Popen[str]
    address: str
    token_file: str | None
    lines: list[str] = field(default_factory=list)

    @property
    def port(self) -> int:
        return int(self.address.rpartition(":")[2])

    def log(self) -> str:
        return "".join(self.lines)

    def shard_pids(self) -> set[int]:
        """The server's shard processes, alive."""
        return {p for p in child_pids(self.proc.pid) if pid_alive(p) and "envfleet.shards.server" in _cmdline(p)}

    def segments(self) -> set[str]:
        """The shared-memory segments the server created."""
        return {n for n in shm_segments() if n.split("_")[1] == str(self.proc.pid)}

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 60.0) -> int:
        """Signal the server and wait for it; returns its exit code. Leaves nothing behind (asserted)."""
        shards = self.shard_pids()
        pid = self.proc.pid
        if self.proc.poll() is None:
            try:
                os.kill(pid, signal.SIGCONT)
            except ProcessLookupError:
                pass
            self.proc.send_signal(sig)
        code = self.proc.wait(timeout)
        deadline = time.time() + 20
        while time.time() < deadline and (any(pid_alive(p) for p in shards) or self.segments()):
            time.sleep(0.1)
        assert not [p for p in shards if pid_alive(p)], f"shards of the server left running:\n{self.log()}"
        assert not {n for n in shm_segments() if n.split("_")[1] == str(pid)}, "segments left behind"
        return code


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return fh.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def serve(
    tmp_path: Any,
    *extra: str,
    token: str | None = TOKEN,
    args: Sequence[str] = (),
    port: int = 0,
    wait: bool = True,
    base: Sequence[str] = TOY,
) -> Served:
    """Start ``envfleet serve`` on 127.0.0.1 with ``base`` (the toy config) and ``extra`` overrides; wait for its address."""
    config = tmp_path / "serve.yaml"
    if not config.exists():
        config.write_text("train:\n  simulator_type: toy\n")
    command = [sys.executable, "-m", "envfleet_ray.cli", "serve", "--config", str(config), "--port", str(port), *args]
    token_file = None
    if token is None:
        command.append("--insecure")
    else:
        token_file = str(tmp_path / "token")
        with open(token_file, "w") as fh:
            fh.write(token + "\n")
        command += ["--token-file", token_file]
    command += [*base, *extra]
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    served = Served(proc, "", token_file)
    found = threading.Event()

    def pump() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            served.lines.append(line)
            match = re.search(r"listening on (\S+)", line)
            if match:
                served.address = match.group(1)
                found.set()

    threading.Thread(target=pump, daemon=True).start()
    if wait:
        deadline = time.time() + 60
        while not found.wait(0.1):
            if proc.poll() is not None or time.time() > deadline:
                proc.kill()
                raise AssertionError(f"envfleet serve did not start:\n{served.log()}")
    return served


def wait_for(predicate: Any, timeout: float, what: str) -> float:
    """Poll ``predicate`` until true; returns the seconds it took. Fails naming ``what``."""
    t0 = time.time()
    while not predicate():
        if time.time() - t0 > timeout:
            raise AssertionError(f"{what}: not within {timeout} s")
        time.sleep(0.05)
    return time.time() - t0
