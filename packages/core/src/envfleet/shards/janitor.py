"""The janitor: unlinks an owner's shared-memory segments, and removes its log directories,
when the owner dies, however it dies.

Python's own resource tracker is a child of the owner, and Ray kills a worker's
child processes when the worker goes (for example when its driver is killed), so
the tracker dies before it can clean up. The janitor is detached instead: a
double-forked process in its own session, holding the read end of a pipe. The
owner writes ``+name`` / ``-name`` lines as it creates and unlinks segments; when
the pipe reports EOF (the owner exited or was killed), the janitor unlinks what is
still registered and exits. A directory is registered the same way by its absolute
path (``+/tmp/envfleet_logs_...``); segment names never start with ``/``.

One janitor per owner process, started on first use.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading

__all__ = ["register", "unregister", "register_dir", "unregister_dir", "main"]

_lock = threading.Lock()
_state: dict[str, int] = {}  # "pid" -> owner pid the janitor serves, "fd" -> write end


def _ensure() -> int | None:
    pid = os.getpid()
    if _state.get("pid") == pid:
        return _state["fd"]
    read_fd, write_fd = os.pipe()
    try:
        launcher = subprocess.Popen(
            [sys.executable, "-m", "envfleet.shards.janitor", str(read_fd)],
            pass_fds=(read_fd,),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            close_fds=True,
        )
        launcher.wait(timeout=30)  # the launcher forks the janitor and exits at once
    except (OSError, subprocess.SubprocessError):
        os.close(read_fd)
        os.close(write_fd)
        return None
    os.close(read_fd)
    _state["pid"], _state["fd"] = pid, write_fd
    return write_fd


def _send(line: str) -> None:
    with _lock:
        fd = _ensure()
        if fd is None:
            return
        try:
            os.write(fd, (line + "\n").encode())
        except OSError:
            _state.pop("pid", None)


def register(name: str) -> None:
    """Ask the janitor to unlink ``name`` if this process dies before unregistering it."""
    _send("+" + name)


def unregister(name: str) -> None:
    """``name`` was unlinked by its owner; forget it."""
    _send("-" + name)


def register_dir(path: str) -> None:
    """Ask the janitor to remove directory ``path`` if this process dies before unregistering it."""
    _send("+" + os.path.abspath(path))


def unregister_dir(path: str) -> None:
    """``path`` was removed by its owner; forget it."""
    _send("-" + os.path.abspath(path))


def _unlink(name: str) -> None:
    if name.startswith("/"):
        import shutil  # only on this path: the janitor starts with as little as it can

        shutil.rmtree(name, ignore_errors=True)
        return
    try:
        import _posixshmem  # noqa: PLC2701 (the stdlib module SharedMemory itself uses)

        _posixshmem.shm_unlink("/" + name)
    except (FileNotFoundError, OSError):
        pass


def main(argv: list[str] | None = None) -> None:
    """``python -m envfleet.shards.janitor READ_FD``: fork, let the launcher exit, serve until EOF."""
    read_fd = int((sys.argv[1:] if argv is None else argv)[0])
    if os.fork() > 0:
        os._exit(0)  # the launcher: its parent reaps it, the janitor is orphaned and detached
    names: set[str] = set()
    buffer = b""
    with os.fdopen(read_fd, "rb", buffering=0) as pipe:
        while True:
            try:
                chunk = pipe.read(65536)
            except OSError:
                chunk = b""
            if not chunk:
                break
            buffer += chunk
            *lines, buffer = buffer.split(b"\n")
            for raw in lines:
                line = raw.decode(errors="replace")
                if line.startswith("+"):
                    names.add(line[1:])
                elif line.startswith("-"):
                    names.discard(line[1:])
    for name in names:
        _unlink(name)
    os._exit(0)


if __name__ == "__main__":
    main()
