"""envfleet's Isaac Lab backend (``simulator_type: isaac``).

Importing this package is light: the plugin module (:mod:`envfleet_isaac.plugin`) imports
no simulator, and :mod:`envfleet_isaac.env` (which imports torch and, when an env is built,
Isaac Lab) is imported only in the shard process that builds the env.
"""

from __future__ import annotations

__all__ = ["__version__"]

__version__ = "0.1.0"
