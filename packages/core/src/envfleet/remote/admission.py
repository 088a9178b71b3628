"""Who gets into ``envfleet serve``: the budget of connections that have not authenticated, and the log of what it drops.

A connection is a *stranger* from its accept until its hello carries the token. Strangers have
a cap of their own (``--max-unauthenticated``), below the total (``--max-connections``), and a
short deadline (``--auth-timeout-s``). When a new connection finds the strangers' cap or the
total full, the oldest stranger is dropped to make room for it, not the newcomer: a crowd of
half-open connections cannot keep out a client that sends its hello at once (sshd's
``MaxStartups`` drops at random once its budget fills, for the same reason). Only when every
slot holds an authenticated session is a newcomer turned away.

What strangers cause (drops, refusals) is logged through :class:`RateLimitedLog`, so that a
flood of them cannot flood the log either.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from typing import Any

__all__ = ["RateLimitedLog", "StrangerBudget"]


class StrangerBudget:
    """The connections of a server, strangers oldest first, and which stranger gives way to a newcomer.

    Not thread-safe: the server calls it under its lock.

    :param max_connections: connections at once, authenticated or not.
    :param max_strangers: unauthenticated connections at once; at least 1 and below ``max_connections``.
    """

    def __init__(self, max_connections: int, max_strangers: int) -> None:
        if not 1 <= max_strangers < max_connections:
            raise ValueError(
                f"the unauthenticated connections' cap must be at least 1 and below the total ({max_connections}), got {max_strangers}"
            )
        self.max_connections = max_connections
        self.max_strangers = max_strangers
        self._strangers: OrderedDict[Any, float] = OrderedDict()  # connection -> when it was accepted
        self._members: set[Any] = set()

    def arrive(self, conn: Any, now: float) -> tuple[bool, Any, float]:
        """Admit ``conn`` as a stranger: ``(admitted, victim, victim's age in s)``.

        ``victim`` is the oldest stranger, which must be dropped to make room, or None. Not admitted
        only when every slot holds an authenticated session.
        """
        victim, age = None, 0.0
        if len(self._strangers) >= self.max_strangers or len(self._strangers) + len(self._members) >= self.max_connections:
            if not self._strangers:
                return False, None, 0.0
            victim, since = self._strangers.popitem(last=False)
            age = now - since
        self._strangers[conn] = now
        return True, victim, age

    def authenticated(self, conn: Any) -> bool:
        """``conn`` sent the token; False when it had been dropped meanwhile (it must go)."""
        if self._strangers.pop(conn, None) is None:
            return False
        self._members.add(conn)
        return True

    def leave(self, conn: Any) -> None:
        """``conn`` closed."""
        self._strangers.pop(conn, None)
        self._members.discard(conn)

    @property
    def strangers(self) -> int:
        """Unauthenticated connections now."""
        return len(self._strangers)


class RateLimitedLog:
    """Warnings of ``logger`` at most ``burst`` at once and ``per_s`` a second after that (a token bucket).

    A line over the rate is counted, not written; the next line written says how many were
    left out since the one before it.
    """

    def __init__(self, logger: logging.Logger, burst: int = 10, per_s: float = 1.0) -> None:
        self.logger = logger
        self.burst, self.per_s = float(burst), float(per_s)
        self._tokens = float(burst)
        self._at = time.monotonic()
        self._left_out = 0
        self._lock = threading.Lock()

    def warning(self, message: str, *args: Any) -> None:
        """``logger.warning(message, *args)``, unless over the rate."""
        with self._lock:
            now = time.monotonic()
            self._tokens = min(self.burst, self._tokens + (now - self._at) * self.per_s)
            self._at = now
            if self._tokens < 1.0:
                self._left_out += 1
                return
            self._tokens -= 1.0
            left_out, self._left_out = self._left_out, 0
        if left_out:
            message += " (%d more such lines left out before this one: over %g a second)"
            args = (*args, left_out, self.per_s)
        self.logger.warning(message, *args)
