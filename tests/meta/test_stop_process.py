"""``stop_process``, which the hang and stall tests use: it returns only once every thread of the process is stopped."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from ..conftest import stop_process, thread_states

# Four threads that never block: each takes a SIGSTOP only when the kernel gets round to it.
SPINNERS = """
import sys, threading
def spin():
    while True:
        pass
for _ in range(4):
    threading.Thread(target=spin, daemon=True).start()
print("spinning", flush=True)
spin()
"""


def _cpu_ticks(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])  # utime + stime


def test_every_thread_is_stopped_when_it_returns_and_none_runs_after() -> None:
    proc = subprocess.Popen([sys.executable, "-c", SPINNERS], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "spinning"
        for _ in range(20):
            stop_process(proc.pid)
            states = thread_states(proc.pid)
            assert len(states) == 5 and set(states) == {"T"}, states
            ticks = _cpu_ticks(proc.pid)
            time.sleep(0.05)
            assert _cpu_ticks(proc.pid) == ticks, "a thread ran after stop_process returned"
            os.kill(proc.pid, signal.SIGCONT)
    finally:
        proc.kill()
        proc.wait(10)


def test_a_process_that_is_gone_is_an_error_not_a_stop() -> None:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait(30)
    try:
        stop_process(proc.pid)
    except ProcessLookupError:
        return
    raise AssertionError("stop_process returned for a process that had exited")
