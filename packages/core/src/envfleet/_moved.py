"""The old flat import paths of the modules that moved into sub-packages: each still works, with a warning.

``import envfleet.manager`` gives the module :mod:`envfleet.shards.manager` itself (so a
monkeypatch through either name is seen by both) and a ``DeprecationWarning`` naming the new
path; ``python -m envfleet.shard`` still starts a shard. No file stays at an old path: a
finder on ``sys.meta_path``, installed when ``envfleet`` is imported, answers for them. The
old paths go in the release after next.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import warnings
from collections.abc import Sequence
from types import CodeType, ModuleType

__all__ = ["MOVED", "install"]

#: The old path of each module that moved, and its new one.
MOVED: dict[str, str] = {
    "envfleet.manager": "envfleet.shards.manager",
    "envfleet.shard_handle": "envfleet.shards.handle",
    "envfleet.replies": "envfleet.shards.replies",
    "envfleet.recycling": "envfleet.shards.recycling",
    "envfleet.shard": "envfleet.shards.server",
    "envfleet.protocol": "envfleet.shards.messages",
    "envfleet.wire": "envfleet.shards.wire",
    "envfleet.shm": "envfleet.shards.shm",
    "envfleet.janitor": "envfleet.shards.janitor",
    "envfleet.interpreter": "envfleet.shards.interpreter",
    "envfleet.check": "envfleet.diagnostics.check",
    "envfleet.measure": "envfleet.diagnostics.measure",
    "envfleet.gl_probe": "envfleet.diagnostics.gl_probe",
    "envfleet.egl_cuda": "envfleet.diagnostics.egl_cuda",
    "envfleet.hookspecs": "envfleet.plugins.hookspecs",
    "envfleet.registry": "envfleet.plugins",
    "envfleet.dataproto_pickle": "envfleet.dataproto.pickling",
}


def _message(old: str) -> str:
    return f"{old} moved to {MOVED[old]}: import it from there (the old path will be removed)"


class _Redirect(importlib.abc.Loader):
    """Loads an old path as its new module (an import), or runs the new module (``python -m``)."""

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        return ModuleType(spec.name)  # a placeholder: exec_module puts the real module in its place

    def exec_module(self, module: ModuleType) -> None:
        old = module.__name__
        # stacklevel 2 skips this frame; the import machinery's own frames are skipped by warnings,
        # so the warning points at the line that imported the old path.
        warnings.warn(_message(old), DeprecationWarning, stacklevel=2)
        # The import machinery returns what sys.modules holds after exec_module: the new module.
        sys.modules[old] = importlib.import_module(MOVED[old])

    def get_code(self, fullname: str) -> CodeType:
        """``python -m OLD``: run the new module as ``__main__``."""
        warnings.warn(_message(fullname), DeprecationWarning, stacklevel=2)
        source = f"import runpy\nrunpy.run_module({MOVED[fullname]!r}, run_name='__main__', alter_sys=True)\n"
        return compile(source, f"<{fullname}, moved to {MOVED[fullname]}>", "exec")


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname not in MOVED:
            return None
        return importlib.machinery.ModuleSpec(fullname, _Redirect())


_FINDER = _Finder()


def install() -> None:
    """Answer for the old paths (once per process)."""
    if _FINDER not in sys.meta_path:
        sys.meta_path.append(_FINDER)
