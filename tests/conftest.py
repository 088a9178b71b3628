"""Shared fixtures: leak checks for processes and shared-memory segments."""

from __future__ import annotations

import os

import pytest

from envfleet.shards.shm import SHM_PREFIX

#: The toy's own keys (``train.toy.*``); any other keyword of :func:`toy_cfg` is a ``train.*`` key.
TOY_KEYS = (
    "step_cost_s",
    "step_sleep_s",
    "envs_per_process",
    "raise_on_step",
    "raise_in_constructor",
    "exit_on_step",
    "frozen",
    "env_sleep_s",
    "step_cost_tail",
    "reset_sleep_s",
)


def toy_cfg(num_envs: int = 2, chunk: int = 4, stages: int = 1, *overrides: str, **train: object) -> object:
    """A loaded config of the toy backend: ``num_envs`` per stage, ``stages`` pipeline stages,
    ``chunk`` sub-steps; keywords set ``train.toy.*`` (:data:`TOY_KEYS`) or ``train.*`` keys, and
    ``overrides`` are further ``key=value`` strings."""
    from envfleet.config import load_config

    keys = [f"train.toy.{k}={v}" if k in TOY_KEYS else f"train.{k}={v}" for k, v in train.items()]
    return load_config(
        overrides=[
            "train.simulator_type=toy",
            f"train.num_envs={num_envs}",
            f"rollout.pipeline_stage_num={stages}",
            f"actor.model.num_action_chunks={chunk}",
            *keys,
            *overrides,
        ]
    )


def lock_pins(name: str) -> dict[str, str]:
    """The pins of ``requirements/<name>`` by normalised project name (lower case, runs of ``-_.`` as ``-``)."""
    import re

    pins = {}
    with open(os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "requirements", name)) as fh:
        for line in fh:
            line = line.split("#")[0].strip()
            if "==" in line:
                package, version = line.split("==", 1)
                pins[re.sub(r"[-_.]+", "-", package).lower()] = version
    return pins


def shm_segments() -> set[str]:
    """envfleet's segments in /dev/shm."""
    try:
        return {n for n in os.listdir("/dev/shm") if n.startswith(SHM_PREFIX)}
    except FileNotFoundError:  # pragma: no cover - not Linux
        return set()


def child_pids(pid: int | None = None) -> set[int]:
    """Direct children of ``pid`` (default: this process), from /proc."""
    pid = os.getpid() if pid is None else pid
    out: set[int] = set()
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/children") as fh:
                out |= {int(x) for x in fh.read().split()}
    except FileNotFoundError:
        pass
    return out


def pid_alive(pid: int) -> bool:
    """True if ``pid`` exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False


def thread_states(pid: int) -> list[str]:
    """The scheduler state letter of every thread of ``pid`` (``R``, ``S``, ``T`` stopped, ...); [] when it is gone."""
    states = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except FileNotFoundError:
        return []
    for task in tasks:
        try:
            with open(f"/proc/{pid}/task/{task}/stat") as fh:
                states.append(fh.read().rsplit(")", 1)[1].split()[0])
        except (FileNotFoundError, ProcessLookupError):
            pass  # the thread ended meanwhile
    return states


def stop_process(pid: int, timeout: float = 10.0) -> None:
    """SIGSTOP ``pid`` and return once every thread of it is stopped.

    ``kill()`` returns when the signal is queued, not when the process stops: a thread that
    was about to run (woken by the request a test sends next) can still serve that request
    before it takes the stop. On this 2-core machine under load, 15 of 200 requests sent right
    after ``kill(SIGSTOP)`` to ``envfleet serve`` were answered. A test that means "the peer
    is stalled" must wait for it."""
    import signal
    import time

    os.kill(pid, signal.SIGSTOP)
    deadline = time.monotonic() + timeout
    while True:
        states = thread_states(pid)
        if not states:
            raise ProcessLookupError(f"process {pid} ended while it was being stopped")
        if all(state in "TtZX" for state in states):
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"process {pid} not stopped {timeout} s after SIGSTOP: thread states {states}")
        time.sleep(0.001)


def own_segments() -> set[str]:
    """envfleet segments created by this process (the owner pid is part of the name)."""
    return {n for n in shm_segments() if n.split("_")[1] == str(os.getpid())}


@pytest.fixture
def no_leaks():
    """Fail the test if it leaves shared-memory segments of this process behind."""
    before_shm = own_segments()
    yield
    import gc
    import time

    gc.collect()
    deadline = time.time() + 10
    while time.time() < deadline and (own_segments() - before_shm):
        time.sleep(0.1)
    leaked = own_segments() - before_shm
    assert not leaked, f"leaked shared-memory segments: {sorted(leaked)}"


@pytest.fixture(scope="module")
def local_ray(request):
    """A local Ray bound to 127.0.0.1 for the tests of one module, shut down after them: 4 CPUs,
    or the module's ``RAY_CPUS``."""
    import ray

    from envfleet_ray import init_ray

    info = init_ray(num_cpus=getattr(request.module, "RAY_CPUS", 4))
    assert info["local"]
    yield info
    ray.shutdown()


#: Tests that look at the whole machine, not only at what they started: they run in the tests
#: session's serial pass (``-m serial``), after the parallel one (``-n 2``), never beside another
#: test. Node ids, or a file's path and "::" for all its tests; set here, since their files belong
#: to several packages. noxfile.py reads this literal to run them.
SERIAL = (
    # Kills every Ray process that appeared on the machine while it ran: a Ray of a test running
    # beside it would be among them.
    "tests/reliability/test_driver_kill.py::",
    # A segment of any process counts as left behind by the interrupted command (its owners,
    # Ray actors of the command's process group, are gone when it looks).
    "tests/ray_worker/test_cli.py::test_ctrl_c_writes_the_partial_summary_and_leaves_nothing_behind",
)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "serial: looks at the whole machine; never runs beside another test (tests/conftest.py SERIAL)")


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark :data:`SERIAL`'s tests, before ``-m`` selects by marks."""
    for item in items:
        if item.nodeid.startswith(SERIAL):
            item.add_marker(pytest.mark.serial)
