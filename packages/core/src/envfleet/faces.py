"""What envfleet's faces onto other ecosystems (``envfleet.gym``, ``envfleet.torchrl``) share.

A face takes its config as :func:`envfleet.config.as_config` does (a loaded config as it is) and, when
the caller names no initial states, draws them from a :class:`StateWalk`. A face's ``step`` carries
actions only, so :func:`check_face_execution` refuses ``train.execution.delay: caller`` for it.
"""

from __future__ import annotations

from typing import Any

from .config import as_config
from .errors import ConfigError
from .execution import is_realtime
from .states import StateWalk

__all__ = ["StateWalk", "as_config", "check_face_execution"]


def check_face_execution(section: Any, mode: str, face: str) -> None:
    """A ConfigError for ``{mode}.execution.delay: caller`` under ``face``, whose ``step`` has no place for delays."""
    if is_realtime(section) and section.execution.delay == "caller":
        raise ConfigError(
            f"{mode}.execution.delay: caller and {face} do not go together: its step carries actions only; state the "
            f"delay in sub-steps ({mode}.execution.delay: 3), or as a seeded latency (delay: latency)"
        )
