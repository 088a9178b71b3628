"""``LeaseKeeper``: keeps a remote stage's lease while its manager is open, whatever the caller is doing.

The server frees a stage whose client sends no request for its lease (``envfleet serve
--lease-s``, told in the welcome), so that a stopped, wedged or vanished client cannot keep it.
A client that is only busy elsewhere (a long policy update, a slow reset of another stage) must
not lose it: a daemon thread sends ``ping`` whenever the connection has been quiet for a quarter
of the lease, so the server hears from a live client at least every half lease. The ping goes
between the caller's requests, under the connection's lock, and not at all while a call is in
flight (the server does not count the lease during a call), so the wire stays request then reply
and a stepping client never pings.

The thread holds its connection weakly: a manager dropped without ``close()`` stops its keeper,
and the server then frees the stage within the lease.
"""

from __future__ import annotations

import threading
import time
import weakref
from typing import TYPE_CHECKING

from .wire import Frame

if TYPE_CHECKING:
    from .connection import Connection

__all__ = ["LeaseKeeper"]


class LeaseKeeper:
    """Pings through ``connection`` when it was quiet for ``lease_s / 4``, until :meth:`stop`.

    :param connection: the manager's connection (held weakly).
    :param lease_s: the server's lease.
    """

    def __init__(self, connection: Connection, lease_s: float) -> None:
        self.interval = lease_s / 4.0
        self._connection = weakref.ref(connection)
        self._stop = threading.Event()
        self.pings = 0
        self._thread = threading.Thread(target=self._run, name=f"envfleet-lease-{connection.address}", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """End the thread (a ping in flight finishes first). Safe to call twice."""
        self._stop.set()
        if self._thread is not threading.current_thread():
            self._thread.join(5.0)

    def _run(self) -> None:
        while not self._stop.wait(self.interval / 2):
            connection = self._connection()
            if connection is None or connection.lost is not None:
                return
            self._ping(connection)
            del connection

    def _ping(self, connection: Connection) -> None:
        if connection.sock is None or time.monotonic() - connection.last_io < self.interval:
            return
        if not connection.lock.acquire(blocking=False):
            return  # a call is in flight: the server does not count the lease meanwhile
        try:
            if connection.sock is not None and not self._stop.is_set():
                connection.exchange(Frame("ping"), "pong", max(self.interval, 5.0))
                self.pings += 1
        except Exception:  # a lost stage or connection: recorded on the connection; the caller's next call says so
            pass
        finally:
            connection.lock.release()
