"""What a run is doing before its first chunk: its shards starting, then their first reset.

A cold start is mostly waiting. Shard processes import their simulator, then the first reset
builds the scenes (LIBERO compiles each task's MuJoCo model and uploads its textures, seconds a
task on a CPU). :func:`stage_status` reads what each shard of a stage is doing (the command its
:class:`~envfleet.shards.handle.ShardHandle` has in flight, the ones it has answered) and the
last line its simulator printed, without taking the manager's lock, so that
``EnvWorker.startup_status`` answers while the stage starts. :class:`StartupDisplay` polls the
workers from the driver and prints each phase with its time: on a terminal one line updated in
place, in a log plain lines, one per change.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, TextIO

__all__ = ["stage_status", "StartupDisplay", "summarise"]

#: The prefix of a simulator's line worth showing (its log's other lines are libraries' chatter).
_SAYS = "envfleet-"


def stage_status(manager: Any) -> list[dict[str, Any]]:
    """One dict per shard of ``manager``: ``started`` (its env is built), ``reset`` (it has answered a
    reset), ``in_flight`` (the command it works on, or None), ``for_s`` and ``says`` (the last line of
    its output that envfleet's backends print). A manager without shards (a remote one) has none."""
    now = time.monotonic()
    out = []
    for shard in list(getattr(manager, "shards", None) or []):
        answered = set(getattr(shard, "answered", ()))
        in_flight = getattr(shard, "in_flight", None)
        out.append(
            {
                "started": "init" in answered,
                "reset": bool(answered & {"reset", "reset_some"}),
                "in_flight": in_flight,
                "for_s": round(now - float(getattr(shard, "in_flight_since", now)), 1) if in_flight else 0.0,
                "says": _last_said(shard),
            }
        )
    return out


def _last_said(shard: Any) -> str:
    try:
        lines = shard.stderr_tail(40).splitlines()
    except (AttributeError, OSError):
        return ""
    return next((line.strip() for line in reversed(lines) if line.startswith(_SAYS)), "")


def summarise(statuses: Sequence[Sequence[Sequence[dict[str, Any]]]]) -> dict[str, Any]:
    """Counts over every worker's stages' shards: ``shards``, ``started``, ``reset``, and ``says``: the
    newest line of a shard still at work (the longest at it), or ``""``."""
    shards = [s for worker in statuses for stage in worker for s in stage]
    busy = sorted((s for s in shards if s["in_flight"] and s["says"]), key=lambda s: -s["for_s"])
    return {
        "shards": len(shards),
        "started": sum(s["started"] for s in shards),
        "reset": sum(s["reset"] for s in shards),
        "says": busy[0]["says"] if busy else "",
    }


class StartupDisplay:
    """Prints the start-up's phases, each with its time, until the first chunk.

    :param poll: returns every worker's :meth:`EnvWorker.startup_status` (None while none is up).
    :param stream: where the lines go (standard error).
    :param enabled: False prints nothing (``--no-progress``).
    :param interval_s: how often the workers are asked.

    Phases are begun and ended by the caller (:meth:`begin`, :meth:`end`); while one runs, a
    thread asks the workers every ``interval_s`` and shows the counts of the phase (shards
    started, shards reset) and the newest line a simulator printed.
    """

    def __init__(self, poll: Callable[[], Any], stream: TextIO | None = None, enabled: bool = True, interval_s: float = 0.5) -> None:
        self._poll = poll
        self._stream = stream if stream is not None else sys.stderr
        self._enabled = enabled
        self._tty = enabled and bool(getattr(self._stream, "isatty", lambda: False)())
        self._interval_s = interval_s
        self._phase: str | None = None
        self._t0 = 0.0
        self._shown = ""  # the last plain line written (a log gets a line only when it changes)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def begin(self, phase: str) -> None:
        """Start phase ``phase`` (``ray``, ``workers``, ``shards`` or ``reset``), ending the one before."""
        with self._lock:
            if self._phase is not None:
                self._end_locked()
            self._phase, self._t0, self._shown = phase, time.perf_counter(), ""
            self._show_locked(self._line(None))
        if self._enabled and self._thread is None:
            self._thread = threading.Thread(target=self._watch, name="envfleet-startup", daemon=True)
            self._thread.start()

    def end(self) -> None:
        """End the phase that runs, printing it with its time (nothing when none runs)."""
        with self._lock:
            if self._phase is not None:
                self._end_locked()

    def close(self) -> None:
        """End the phase that runs and stop asking the workers (safe twice)."""
        self.end()
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5.0)
            self._thread = None

    def __enter__(self) -> StartupDisplay:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ internals
    def _watch(self) -> None:
        while not self._stop.wait(self._interval_s):
            try:
                statuses = self._poll()
            except Exception:  # a worker being built or gone: the next poll tells
                continue
            counts = None if statuses is None else summarise(statuses)
            with self._lock:
                if self._phase == "reset" and counts is not None and counts["shards"] and counts["reset"] == counts["shards"]:
                    self._end_locked()  # every shard has answered its first reset: the first chunk is next
                elif self._phase is not None:
                    self._show_locked(self._line(counts))

    def _line(self, counts: dict[str, Any] | None, final: bool = False) -> str:
        elapsed = time.perf_counter() - self._t0
        phase = self._phase
        verb = {"ray": "starting Ray", "workers": "starting the workers", "shards": "starting the simulators", "reset": "first reset"}.get(
            str(phase), str(phase)
        )
        line = f"envfleet: {verb}"
        if counts is not None and counts["shards"]:
            if phase == "shards":
                line += f": {counts['started']} of {counts['shards']} shard(s) started"
            elif phase == "reset":
                line += f": {counts['reset']} of {counts['shards']} shard(s) reset"
        if final:
            return f"{line}, {elapsed:.1f}s"
        line += f" ({elapsed:.0f}s)" if self._tty else ""
        if counts is not None and counts["says"]:
            line += f" | {counts['says']}"
        return line

    def _end_locked(self) -> None:
        counts = None
        try:
            statuses = self._poll()
            counts = summarise(statuses) if statuses is not None else None
        except Exception:
            pass
        if counts is not None and self._phase == "shards":
            counts["started"] = counts["shards"]
        if counts is not None and self._phase == "reset":
            counts["reset"] = counts["shards"]
        line = self._line(counts, final=True)
        if self._enabled:
            self._stream.write(("\r\033[K" if self._tty else "") + line + "\n")
            self._stream.flush()
        self._phase = None

    def _show_locked(self, line: str) -> None:
        if not self._enabled:
            return
        if self._tty:
            self._stream.write("\r\033[K" + line)
        elif line != self._shown:
            self._stream.write(line + "\n")
        else:
            return
        self._shown = line
        self._stream.flush()
