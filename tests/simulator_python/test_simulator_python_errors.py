"""A simulator interpreter that cannot run the backend is an error naming it, what is missing and the pip fix.

Each case is a real interpreter: a path that does not exist, a bare venv, a venv that
sees the worker's packages but not MetaWorld, a venv whose envfleet is another
version, and the Isaac venv (a simulator venv of another backend).
"""

from __future__ import annotations

import glob
import importlib.metadata
import os
import subprocess
import sys

import numpy as np
import pytest

from envfleet import ProcessEnvManager
from envfleet.config import load_config
from envfleet.shards.interpreter import SimulatorPythonError, pip_target

from ..metaworld.common import metaworld_train

ISAAC_PYTHON_ENV = "ENVFLEET_ISAAC_PYTHON"


def _start(python: str) -> None:
    cfg = load_config(data={"train": metaworld_train(num_envs=1, simulator_python=python)})
    mgr = ProcessEnvManager(cfg)
    try:
        mgr.start_simulator()
    finally:
        mgr.close()


def _error(python: str) -> str:
    """The message of the SimulatorPythonError that starting a MetaWorld stage under ``python`` raises."""
    with pytest.raises(SimulatorPythonError) as err:
        _start(python)
    text = str(err.value)
    assert python in text, "the error does not name the interpreter"
    return text


def _bare_venv(path: str, see_worker_site: bool = False) -> str:
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", path], check=True)
    if see_worker_site:
        site = glob.glob(os.path.join(path, "lib", "python*", "site-packages"))[0]
        worker_site = next(p for p in sys.path if p.endswith("site-packages") and p.startswith(sys.prefix))
        with open(os.path.join(site, "worker.pth"), "w") as fh:
            # addsitedir, not a plain path line: the worker's editable installs are .pth files themselves.
            fh.write(f"import site; site.addsitedir({worker_site!r})\n")
    return os.path.join(path, "bin", "python")


def test_missing_interpreter(no_leaks: None) -> None:
    with pytest.raises(SimulatorPythonError, match=r"/nowhere/bin/python is not an executable file.*envfleet venv BACKEND"):
        _start("/nowhere/bin/python")


def test_venv_without_envfleet(tmp_path, no_leaks: None) -> None:
    python = _bare_venv(str(tmp_path / "bare"))
    text = _error(python)
    assert "it has no envfleet (envfleet core)" in text
    assert f"{python} -m pip install --no-deps {pip_target('envfleet')}" in text


def test_venv_without_the_simulator(tmp_path, no_leaks: None) -> None:
    # Sees envfleet and the light envfleet-metaworld of the worker, but no metaworld (and MuJoCo 3.17).
    python = _bare_venv(str(tmp_path / "nosim"), see_worker_site=True)
    text = _error(python)
    assert "lacks the simulator packages metaworld" in text
    assert f"envfleet venv metaworld --python {python}" in text


def test_mismatched_envfleet_versions(tmp_path, no_leaks: None) -> None:
    python = _bare_venv(str(tmp_path / "old"), see_worker_site=True)
    site = glob.glob(str(tmp_path / "old" / "lib" / "python*" / "site-packages"))[0]
    # What pip records for an older envfleet, found before the worker's own record.
    info = os.path.join(site, "envfleet-0.0.1.dist-info")
    os.makedirs(info)
    with open(os.path.join(info, "METADATA"), "w") as fh:
        fh.write("Metadata-Version: 2.1\nName: envfleet\nVersion: 0.0.1\n")
    text = _error(python)
    assert f"it has envfleet 0.0.1 while the worker has {importlib.metadata.version('envfleet')}: the two must match" in text
    assert f"{python} -m pip install --no-deps {pip_target('envfleet')}" in text


def test_simulator_venv_of_another_backend(no_leaks: None) -> None:
    python = os.environ.get(ISAAC_PYTHON_ENV, "")
    assert os.path.isfile(python), f"{ISAAC_PYTHON_ENV}={python!r}: build the Isaac venv first (nox -s tests-isaac)"
    text = _error(python)
    assert "it has no envfleet-metaworld" in text and "cannot import envfleet_metaworld.env" in text
    assert f"{python} -m pip install --no-deps {pip_target('envfleet-metaworld')}" in text


def test_the_fixed_venv_runs(no_leaks: None) -> None:
    """The MetaWorld venv passes the same checks and steps: the errors above are not a probe that always fails."""
    cfg = load_config(data={"train": metaworld_train(num_envs=1, task_suite_name="reach-v3"), "actor": {"model": {"num_action_chunks": 2}}})
    with ProcessEnvManager(cfg) as mgr:
        mgr.reset_envs_to_state_ids(np.array([0]))
        out = mgr.chunk_step(np.full((1, 2, 4), 0.5, dtype=np.float32))
        assert out.obs["full_image"].shape == (1, 64, 64, 3)
