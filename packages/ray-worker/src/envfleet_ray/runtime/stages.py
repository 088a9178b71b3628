"""What a worker keeps of each of its stages, per mode: :class:`StageState`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from envfleet import ProcessEnvManager

__all__ = ["StageState"]


@dataclass
class StageState:
    """What a worker keeps of one stage in one mode (train or val)."""

    manager: ProcessEnvManager
    #: The description of the episode each row is running. With auto_reset a step's own
    #: descriptions are those of the episodes that replaced the ended ones.
    running: list[str] | None = None
    used_ids: set[int] = field(default_factory=set)  # state ids reset to since the last finish_rollout
    restarts_reported: int = 0  # the manager's restarts already in a finish_rollout's metrics

    def take_used_ids(self) -> set[int]:
        """The state ids used since the last call, forgotten from here."""
        used, self.used_ids = self.used_ids, set()
        return used

    def new_restart_causes(self, rank: int) -> list[dict[str, Any]]:
        """The manager's restarts since the last call, each with this worker's rank."""
        stats = self.manager.stats
        causes = [{"rank": rank, **entry} for entry in stats.restart_log if entry["n"] > self.restarts_reported]
        self.restarts_reported = stats.restarts
        return causes
