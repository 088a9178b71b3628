"""verl's own DataProto tests, run against envfleet's DataProto (opt-in).

verl's ``tests/test_protocol_on_cpu.py`` (verl at commit b178a3c) is not part of this
repository. Point ``ENVFLEET_VERL_PROTOCOL_TESTS`` at a copy of it, for example::

    git -C verl show b178a3c:tests/test_protocol_on_cpu.py > /tmp/test_protocol_on_cpu.py
    ENVFLEET_VERL_PROTOCOL_TESTS=/tmp/test_protocol_on_cpu.py pytest tests/core/test_verl_protocol_suite.py

The file runs in a subprocess, with a stand-in ``verl`` package first on the path
whose ``DataProto`` and protocol helpers are envfleet's, so a real verl installed in
the same environment is never imported. The tests of verl's module-level tensordict
and serialization helpers, which envfleet does not offer, are deselected by name
below (docs/verl.md says why).
"""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys
import textwrap
import xml.etree.ElementTree as ET

import pytest

import envfleet

ENV_VAR = "ENVFLEET_VERL_PROTOCOL_TESTS"

# verl tests that exercise verl's own module-level helpers, not DataProto: envfleet does
# not offer them (they are tensordict and serialization utilities of verl's).
OUT_OF_SCOPE = {
    "test_union_tensor_dict": "verl.protocol.union_tensor_dict, a TensorDict helper",
    "test_union_numpy_dict": "verl.protocol.union_numpy_dict, a numpy dict helper",
    "test_from_tensordict": "builds its input with verl.utils.tensordict_utils.get_tensordict",
    "test_serialize_deserialize_single_tensor": "verl.protocol.serialize_single_tensor / deserialize_single_tensor",
    "test_serialize_deserialize_tensordict_regular_tensors": "verl.protocol.serialize_tensordict / deserialize_tensordict",
    "test_serialize_deserialize_tensordict_nested_tensors": "verl.protocol.serialize_tensordict / deserialize_tensordict",
    "test_serialize_deserialize_tensordict_mixed_types": "verl.protocol.serialize_tensordict / deserialize_tensordict",
    "test_serialize_deserialize_tensordict_with_device": "verl.protocol.serialize_tensordict / deserialize_tensordict",
}

_VERL_INIT = '''
"""Stand-in for verl: its DataProto is envfleet's."""
from envfleet.dataproto import DataProto

__all__ = ["DataProto"]
'''

_VERL_PROTOCOL = '''
"""Stand-in for verl.protocol: envfleet.dataproto's names, and stubs for verl's out-of-scope helpers."""
from envfleet.dataproto import *  # noqa: F403
from envfleet.dataproto import __all__ as _ours


def _out_of_scope(name):
    def stub(*args, **kwargs):
        raise NotImplementedError(f"verl.protocol.{name} is not part of envfleet's DataProto surface")

    stub.__name__ = name
    return stub


_STUBS = ["union_tensor_dict", "union_numpy_dict", "serialize_single_tensor", "deserialize_single_tensor",
          "serialize_tensordict", "deserialize_tensordict"]
for _name in _STUBS:
    globals()[_name] = _out_of_scope(_name)

__all__ = [*_ours, *_STUBS]
'''

_CONFTEST = """
import pathlib

import envfleet.dataproto
import verl


def pytest_sessionstart(session):
    here = pathlib.Path(__file__).resolve().parent
    found = pathlib.Path(verl.__file__).resolve()
    if here not in found.parents or verl.DataProto is not envfleet.dataproto.DataProto:
        raise RuntimeError(f"the stand-in verl was not the one imported: {found}")
"""


def _write_stand_in(root: pathlib.Path) -> None:
    (root / "verl" / "utils").mkdir(parents=True)
    (root / "verl" / "__init__.py").write_text(textwrap.dedent(_VERL_INIT))
    (root / "verl" / "protocol.py").write_text(textwrap.dedent(_VERL_PROTOCOL))
    (root / "verl" / "utils" / "__init__.py").write_text('"""Stand-in for verl.utils."""\n')
    (root / "verl" / "utils" / "tensordict_utils.py").write_text('"""Stand-in: out of scope, imported by the suite only."""\n')


def test_verl_protocol_suite_passes_against_envfleet(tmp_path: pathlib.Path) -> None:
    source = os.environ.get(ENV_VAR)
    if not source:
        pytest.skip(
            f"opt-in: set {ENV_VAR} to verl's tests/test_protocol_on_cpu.py from verl's git history "
            "(commit b178a3c: git -C verl show b178a3c:tests/test_protocol_on_cpu.py > /tmp/test_protocol_on_cpu.py)"
        )
    suite = pathlib.Path(source)
    assert suite.is_file(), f"{ENV_VAR}={source} is not a file"
    text = suite.read_text()
    names = [line[4 : line.index("(")] for line in text.splitlines() if line.startswith("def test_")]
    assert set(OUT_OF_SCOPE) <= set(names), f"not in {suite}: {sorted(set(OUT_OF_SCOPE) - set(names))}"

    stand_in = tmp_path / "stand_in"
    _write_stand_in(stand_in)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "pytest.ini").write_text("[pytest]\n")
    (run_dir / "conftest.py").write_text(
        _CONFTEST.replace("here = pathlib.Path(__file__).resolve().parent", f"here = pathlib.Path({str(stand_in.resolve())!r})")
    )
    (run_dir / "test_protocol_on_cpu.py").write_text(text)

    envfleet_src = pathlib.Path(envfleet.__file__).resolve().parents[1]
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in [str(stand_in), str(envfleet_src), env.get("PYTHONPATH", "")] if p)
    report = tmp_path / "report.xml"
    cmd = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", f"--junitxml={report}", "test_protocol_on_cpu.py"]
    for name in sorted(OUT_OF_SCOPE):
        cmd += ["--deselect", f"test_protocol_on_cpu.py::{name}"]
    out = subprocess.run(cmd, cwd=run_dir, env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, f"verl's DataProto tests failed against envfleet's:\n{out.stdout[-6000:]}\n{out.stderr[-2000:]}"

    suite_node = ET.parse(report).getroot()
    suite_node = suite_node if suite_node.tag == "testsuite" else suite_node.find("testsuite")  # type: ignore[assignment]
    assert suite_node is not None
    counts = {k: int(suite_node.get(k, "0")) for k in ("tests", "failures", "errors", "skipped")}
    in_scope = len(names) - len(OUT_OF_SCOPE)
    assert counts == {"tests": in_scope, "failures": 0, "errors": 0, "skipped": 0}, (counts, out.stdout[-3000:])
