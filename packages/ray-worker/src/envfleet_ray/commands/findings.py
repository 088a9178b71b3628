"""What a check of ``envfleet doctor`` found: one :class:`Finding` per check, ``ok``, ``warn`` or ``FAIL``.

Every part of the doctor (the machine's checks in :mod:`envfleet_ray.commands.doctor`, a
server's in :mod:`envfleet_ray.commands.doctor_remote`) reports in this one shape, so they
print alike and one exit code sums them.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Finding"]


@dataclass(frozen=True)
class Finding:
    """One check's outcome: ``status`` is ``"ok"``, ``"warn"`` or ``"FAIL"``; ``fix`` says what to do."""

    status: str
    what: str
    fix: str = ""

    def lines(self) -> list[str]:
        """The check's line, and its fix's line when it has one."""
        out = [f"{self.status:<5} {self.what}"]
        if self.fix and self.status != "ok":
            out.append(f"{'':<5} fix: {self.fix}")
        return out
