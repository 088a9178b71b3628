"""SAPIEN's PhysX GPU library: whether CUDA physics can start here without a download.

SAPIEN 3.0.3 (``sapien/physx/__init__.py``, ``enable_gpu``) loads ``libPhysXGpu_64.so`` from
``~/.sapien/physx/<PhysX version>/`` and, when the file is absent, fetches it from GitHub at
first use, with no timeout. On an offline cluster the first CUDA shard then hangs or fails.
envfleet never lets it come to that: before a shard is built with ``physx_cuda`` the file is
looked for, and the doctor looks for it too.

The PhysX version is SAPIEN's own (``sapien.pysapien.physx.version()``), read in a child
process so that the asking process does not load SAPIEN.

>>> library_path("105.1-physx-5.3.1.patch0", home="/home/me")
PosixPath('/home/me/.sapien/physx/105.1-physx-5.3.1.patch0/libPhysXGpu_64.so')
"""

from __future__ import annotations

import functools
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

__all__ = ["LIBRARY", "PhysxLibrary", "library_path", "physx_version", "find_physx_library", "placement_hint"]

#: The file SAPIEN loads for CUDA physics on Linux.
LIBRARY = "libPhysXGpu_64.so"
_URL = "https://github.com/sapien-sim/physx-precompiled/releases/download/{version}/linux-so.zip"
_VERSION = "from sapien.pysapien import physx\nprint('ENVFLEET_PHYSX ' + physx.version())\n"
_TIMEOUT_S = 25.0  # the whole check stays within 30 s


@dataclass(frozen=True)
class PhysxLibrary:
    """Where SAPIEN looks for its PhysX GPU library, and whether it is there."""

    version: str  # "" when SAPIEN could not be asked
    path: str  # "" when the version is unknown
    present: bool
    error: str = ""  # why the version is unknown

    def placement(self) -> str:
        """How to put the file in place on a machine without network."""
        return placement_hint(self.version, self.path)


def library_path(version: str, home: str | os.PathLike[str] | None = None) -> Path:
    """The file SAPIEN loads for PhysX ``version``: ``<home>/.sapien/physx/<version>/libPhysXGpu_64.so``."""
    return Path(home if home is not None else Path.home()) / ".sapien" / "physx" / version / LIBRARY


@functools.lru_cache(maxsize=8)
def _version(python: str, home: str) -> tuple[str, str]:
    try:
        proc = subprocess.run(
            [python, "-c", _VERSION], capture_output=True, text=True, timeout=_TIMEOUT_S, stdin=subprocess.DEVNULL, env=dict(os.environ)
        )
    except subprocess.TimeoutExpired:
        return "", f"SAPIEN did not answer within {_TIMEOUT_S:.0f} s"
    except OSError as exc:
        return "", str(exc)
    line = next((x for x in proc.stdout.splitlines() if x.startswith("ENVFLEET_PHYSX ")), None)
    if line is None:
        tail = [x.strip() for x in proc.stderr.splitlines() if x.strip()][-1:] or [f"exit code {proc.returncode}"]
        return "", f"SAPIEN's PhysX version could not be read: {tail[0]}"
    return line.split(" ", 1)[1].strip(), ""


def physx_version(python: str | None = None) -> tuple[str, str]:
    """``(version, error)``: SAPIEN's PhysX version as ``python`` (default this one) has it, asked once per process."""
    return _version(python or sys.executable, str(Path.home()))


def find_physx_library(python: str | None = None) -> PhysxLibrary:
    """Look for the PhysX GPU library of the SAPIEN that ``python`` imports; never downloads."""
    version, error = physx_version(python)
    if not version:
        return PhysxLibrary("", "", False, error)
    path = library_path(version)
    return PhysxLibrary(version, str(path), path.is_file())


def placement_hint(version: str, path: str) -> str:
    """One sentence: where the file comes from and where it goes."""
    if not version:
        return "install SAPIEN (the version of the backend's lock) so that its PhysX version can be read"
    folder = os.path.dirname(path)
    return (
        f"on a machine with network, download {_URL.format(version=version)} and unzip it into {folder} "
        f"(mkdir -p {folder} && unzip linux-so.zip -d {folder}), or copy {folder} from a machine where SAPIEN has placed it"
    )
