"""The writer thread: finished episodes in through a bounded queue, encoded and written off the step path."""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from typing import Any

from ..errors import EnvFleetError

__all__ = ["DatasetWriter", "RecordingError"]

log = logging.getLogger(__name__)


class RecordingError(EnvFleetError, OSError):
    """Recording a dataset failed (a full disk, an unwritable directory); the message names the path."""


class DatasetWriter:
    """A thread that runs every job put to it, in order; the first failure stops it and is raised
    to the caller at its next :meth:`put`, :meth:`flush` or :meth:`close`.

    :param open_dataset: builds the dataset files object in the thread (its first job).
    :param capacity: jobs that may wait; a :meth:`put` to a full queue waits, logs a warning and counts it.
    :param where: the dataset's path, for messages.
    """

    def __init__(self, open_dataset: Callable[[], Any], capacity: int, where: str) -> None:
        self.where = where
        self.capacity = max(int(capacity), 1)
        self._queue: queue.Queue[Callable[[Any], None] | None] = queue.Queue(self.capacity)
        self._error: BaseException | None = None
        self._reported = False  # the error reached a caller once: close() does not raise it again
        self._open = open_dataset
        self.dataset: Any = None
        self.queue_full = 0  # puts that found the queue full
        self.queue_wait_s = 0.0  # time the step path waited for room
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="envfleet-record", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while True:
            job = self._queue.get()
            try:
                if job is None:
                    return
                if self._error is None:
                    if self.dataset is None:
                        self.dataset = self._open()
                    job(self.dataset)
            except BaseException as exc:
                self._error = exc
                log.error("recording to %s failed: %s", self.where, exc)
            finally:
                self._queue.task_done()

    @property
    def failed(self) -> bool:
        """Whether a job failed (the writer runs nothing more)."""
        return self._error is not None

    def raise_error(self) -> None:
        """Raise :class:`RecordingError` if a job failed."""
        if self._error is not None:
            self._reported = True
            done = getattr(self.dataset, "total_episodes", 0)
            raise RecordingError(
                f"recording the dataset at {self.where} failed: {type(self._error).__name__}: {self._error}; "
                f"the {done} episode(s) written before it stay loadable"
            ) from self._error

    def put(self, job: Callable[[Any], None]) -> None:
        """Queue ``job(dataset)``; when the queue is full, wait for room (logged and counted, never dropped)."""
        self.raise_error()
        if self._closed:
            raise RecordingError(f"the dataset writer of {self.where} is closed")
        try:
            self._queue.put_nowait(job)
            return
        except queue.Full:
            pass
        self.queue_full += 1
        log.warning("recording to %s: the writer's queue is full (%d jobs): the step waits for it", self.where, self.capacity)
        t0 = time.perf_counter()
        while True:
            try:
                self._queue.put(job, timeout=0.5)
                break
            except queue.Full:
                self.raise_error()
        self.queue_wait_s += time.perf_counter() - t0

    def flush(self) -> None:
        """Wait until every queued job ran; raise if one failed."""
        self._queue.join()
        self.raise_error()

    def close(self) -> None:
        """Run what is queued, stop the thread; raise if a job failed and no caller was told yet. Safe to call twice."""
        if not self._closed:
            self._closed = True
            self._queue.put(None)
            self._thread.join()
        if not self._reported:
            self.raise_error()
