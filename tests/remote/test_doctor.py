"""``envfleet doctor --config`` with ``train.remote.address`` set, against a real ``envfleet serve``."""

from __future__ import annotations

import subprocess
import sys

from envfleet.remote.wire import VERSION

from .servetools import overrides, serve


def _doctor(tmp_path, address: str, token_file: str) -> subprocess.CompletedProcess[str]:
    config = tmp_path / "client.yaml"
    config.write_text(f"train:\n  simulator_type: toy\n  remote:\n    address: '{address}'\n    token_file: '{token_file}'\n")
    command = [sys.executable, "-m", "envfleet_ray.cli", "doctor", "--config", str(config), *overrides()]
    return subprocess.run(command, capture_output=True, text=True, timeout=120)


def test_doctor_checks_the_server_and_reports_its_backend(tmp_path, no_leaks) -> None:
    served = serve(tmp_path)
    try:
        assert served.token_file is not None
        good = _doctor(tmp_path, served.address, served.token_file)
        assert good.returncode == 0, good.stdout + good.stderr
        lines = good.stdout.splitlines()
        assert any(line.startswith("ok") and f"token accepted, wire version {VERSION}" in line for line in lines), good.stdout
        assert any("backend toy" in line and "4 envs" in line and "chunk 4" in line for line in lines), good.stdout
        assert any("versions on the server" in line and "envfleet " in line for line in lines), good.stdout
        assert any("renderer:" in line for line in lines), good.stdout

        wrong = tmp_path / "wrong-token"
        wrong.write_text("not-the-token\n")
        bad = _doctor(tmp_path, served.address, str(wrong))
        assert bad.returncode == 1, bad.stdout + bad.stderr
        assert "FAIL" in bad.stdout and "refused (auth)" in bad.stdout and "fix:" in bad.stdout, bad.stdout
    finally:
        served.stop()
    gone = _doctor(tmp_path, served.address, served.token_file)
    assert gone.returncode == 1 and "not reachable" in gone.stdout, gone.stdout + gone.stderr
