"""What envfleet's faces onto other ecosystems (``envfleet.gym``, ``envfleet.torchrl``) share.

A face takes its config as :func:`envfleet.config.as_config` does (a loaded config as it is) and, when
the caller names no initial states, draws them from a :class:`StateWalk`.
"""

from __future__ import annotations

from .config import as_config
from .states import StateWalk

__all__ = ["StateWalk", "as_config"]
