"""The venv ``envfleet venv metaworld`` builds holds envfleet's light core: no torch, no tensordict."""

from __future__ import annotations

import json
import subprocess

from .common import sim_python

_INSTALLED = """
import importlib.metadata, importlib.util, json
names = {d.metadata["Name"].lower().replace("_", "-") for d in importlib.metadata.distributions()}
print(json.dumps({"dists": sorted(names), "torch_importable": importlib.util.find_spec("torch") is not None}))
"""


def test_the_metaworld_venv_has_no_torch() -> None:
    out = subprocess.run([sim_python(), "-c", _INSTALLED], capture_output=True, text=True, timeout=120, env={"PATH": "/usr/bin:/bin"})
    assert out.returncode == 0, out.stderr
    found = json.loads(out.stdout)
    assert {"envfleet", "envfleet-metaworld", "metaworld", "mujoco"} <= set(found["dists"]), found["dists"]
    heavy = sorted(set(found["dists"]) & {"torch", "tensordict", "sympy", "networkx", "triton"})
    assert not heavy, f"{sim_python()} holds {heavy}: requirements/metaworld-py311.txt must keep the light core"
    assert not found["torch_importable"]
