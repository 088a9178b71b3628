"""The `remote` section of `nox -s bench` (bench/run.py remote): `envfleet serve` over loopback.

The zero-cost toy (8 envs, two 256x256 images each, chunk 1) through a real `envfleet serve`
process and `RemoteEnvManager`, plain and over TLS, against `ProcessEnvManager` in process
and against a memcpy of the same bytes; the cost of the hello (connect and token check); the
wire's framing against websockets + msgpack for the same reply; and LIBERO (2 envs, chunk 8,
render last, two 128x128 cameras) through an EnvWorker over the server against the
in-process worker path, when LIBERO is installed.
"""

from __future__ import annotations

import hmac
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any

import numpy as np
from common import timed, write
from configs import libero_installed, libero_overrides, toy_cfg, toy_overrides

TOKEN = "bench-token-0123456789abcdef"
N, HW = 8, 256


class _Serve:
    """An `envfleet serve` subprocess with ``overrides``; ``tls``: a self-signed pair made here."""

    def __init__(self, overrides: list[str], tls: bool = False) -> None:
        self.dir = tempfile.mkdtemp(prefix="envfleet-bench-remote-")
        config = os.path.join(self.dir, "c.yaml")
        with open(config, "w") as fh:
            fh.write("train:\n  simulator_type: toy\n")
        self.token_file = os.path.join(self.dir, "token")
        with open(self.token_file, "w") as fh:
            fh.write(TOKEN + "\n")
        args = ["--token-file", self.token_file]
        self.cert = None
        if tls:
            self.cert, key = os.path.join(self.dir, "cert.pem"), os.path.join(self.dir, "key.pem")
            subprocess.run(
                ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1",
                 "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", key, "-out", self.cert],
                check=True, capture_output=True,
            )  # fmt: skip
            args += ["--tls-cert", self.cert, "--tls-key", key]
        command = [sys.executable, "-m", "envfleet_ray.cli", "serve", "--config", config, *args, *overrides]
        self.proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            match = re.search(r"listening on (\S+)", line)
            if match:
                self.address = match.group(1)
                break
        else:
            raise RuntimeError("envfleet serve did not start")
        threading.Thread(target=lambda: [None for _ in self.proc.stdout or []], daemon=True).start()

    def manager(self, **kw: Any) -> Any:
        from envfleet.remote import RemoteEnvManager

        return RemoteEnvManager(self.address, token=TOKEN, ca_file=self.cert, **kw)

    def close(self) -> None:
        self.proc.terminate()
        self.proc.wait(60)


def _rate(mgr: Any, repeat: int = 60) -> float:
    """Env steps per second of ``mgr`` (chunk 1, zero actions) after a reset."""
    mgr.reset_envs_to_state_ids(np.arange(N))
    actions = np.zeros((N, 1, 7), np.float32)
    return N / timed(lambda: mgr.chunk_step(actions), repeat, warmup=10)


def _toy() -> tuple[list[dict[str, Any]], dict[str, float]]:
    from envfleet import ProcessEnvManager

    frozen = ["train.toy.frozen=true", "train.toy.envs_per_process=8"]
    rates: dict[str, float] = {}
    with ProcessEnvManager(toy_cfg(N, HW, **{"toy.frozen": True, "toy.envs_per_process": 8})) as mgr:
        rates["ProcessEnvManager, in process"] = _rate(mgr)
    for tls in (False, True):
        server = _Serve(toy_overrides(N, HW, 1, *frozen), tls=tls)
        try:
            with server.manager() as mgr:
                rates[f"RemoteEnvManager, loopback{' + TLS' if tls else ''}"] = _rate(mgr)
            if not tls:
                hello_s = timed(lambda s=server: s.manager().close(), 10, warmup=2)
        finally:
            server.close()
    reply = np.zeros(N * 2 * HW * HW * 3, np.uint8)
    dest = np.empty_like(reply)
    rates["memcpy of a step's images"] = N / timed(lambda: np.copyto(dest, reply), 200, warmup=10)
    rates["plain socket, a step's bytes from another process"] = N / _socket_copy(reply.nbytes)
    base = rates["ProcessEnvManager, in process"]
    rows = [{"path": k, "env steps/s": v, "vs in-process manager": v / base} for k, v in rates.items()]
    token = TOKEN.encode()
    costs = {
        "hello_ms": hello_s * 1e3,
        "compare_digest_us": timed(lambda: hmac.compare_digest(token, token), 10000) * 1e6,
    }
    return rows, costs


def _serve_bytes(port: Any, nbytes: int) -> None:
    import socket

    listener = socket.create_server(("127.0.0.1", 0))
    port.put(listener.getsockname()[1])
    conn, _ = listener.accept()
    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    data = memoryview(np.zeros(nbytes, np.uint8))  # type: ignore[arg-type]
    while conn.recv(64):
        conn.sendall(data)


def _socket_copy(nbytes: int, repeat: int = 60) -> float:
    """Seconds per request of ``nbytes`` over loopback from another process with plain sockets: the floor of any wire here."""
    import multiprocessing
    import socket

    ctx = multiprocessing.get_context("spawn")
    port = ctx.Queue()
    proc = ctx.Process(target=_serve_bytes, args=(port, nbytes), daemon=True)
    proc.start()
    buf = memoryview(np.empty(nbytes, np.uint8))  # type: ignore[arg-type]
    with socket.create_connection(("127.0.0.1", port.get(timeout=60))) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

        def call() -> None:
            sock.sendall(b"x" * 64)
            got = 0
            while got < nbytes:
                got += sock.recv_into(buf[got:], nbytes - got)

        seconds = timed(call, repeat, warmup=10)
    proc.join(10)
    return seconds


def _wire_vs_websockets(repeat: int = 100) -> dict[str, float]:
    """Milliseconds per request of a step-sized reply (two 8x256x256x3 images) over loopback: this wire, websockets+msgpack."""
    import socket

    import msgpack
    from websockets.sync.client import connect
    from websockets.sync.server import serve

    from envfleet.remote.wire import Frame, FrameLimits, read_frame, write_frame

    obs = {"obs.full_image": np.zeros((N, HW, HW, 3), np.uint8), "obs.wrist_image": np.ones((N, HW, HW, 3), np.uint8)}
    out: dict[str, float] = {}

    listener = socket.create_server(("127.0.0.1", 0))

    def frame_server() -> None:
        conn, _ = listener.accept()
        with conn:
            while True:
                try:
                    read_frame(conn, FrameLimits())
                except (EOFError, OSError):
                    return
                write_frame(conn, Frame("result", {"task_descriptions": ["x"] * N}, obs))

    threading.Thread(target=frame_server, daemon=True).start()
    with socket.create_connection(listener.getsockname()) as sock:
        step = Frame("step", arrays={"actions": np.zeros((N, 1, 7), np.float32)})

        def frame_call() -> None:
            write_frame(sock, step)
            read_frame(sock, FrameLimits())

        out["envfleet wire (socket, JSON header, raw arrays)"] = timed(frame_call, repeat) * 1e3
    listener.close()

    def ws_handler(ws: Any) -> None:
        for message in ws:
            msgpack.unpackb(message)
            header = {"type": "result", "arrays": [[k, "uint8", list(v.shape)] for k, v in obs.items()], "task_descriptions": ["x"] * N}
            ws.send(msgpack.packb({"header": header, "payload": [v.tobytes() for v in obs.values()]}))

    with serve(ws_handler, "127.0.0.1", 0, max_size=None, compression=None) as ws_server:
        port = ws_server.socket.getsockname()[1]
        threading.Thread(target=ws_server.serve_forever, daemon=True).start()
        with connect(f"ws://127.0.0.1:{port}", max_size=None, compression=None) as ws:
            request = msgpack.packb({"type": "step", "actions": np.zeros((N, 1, 7), np.float32).tobytes()})

            def ws_call() -> None:
                ws.send(request)
                reply = msgpack.unpackb(ws.recv())
                [np.frombuffer(p, np.uint8) for p in reply["payload"]]

            out["websockets 17.4 + msgpack 1.2.4"] = timed(ws_call, repeat) * 1e3
        ws_server.shutdown()
    return out


def _libero() -> list[dict[str, Any]]:
    """Env steps per second of an EnvWorker, 2 LIBERO envs, chunk 8, render last, 128x128: in process vs over a server."""
    from envfleet.dataproto import DataProto
    from envfleet_ray import EnvWorker

    overrides = libero_overrides(2, 128, "last")
    from envfleet.config import load_config

    def started(cfg: Any) -> Any:
        worker = EnvWorker(cfg)
        worker.init_worker()
        worker.init_simulator()
        worker.reset_envs_to_state_ids(DataProto.from_dict(non_tensors={"state_ids": np.arange(2)}))
        return worker

    acts = np.random.default_rng(0).uniform(-0.3, 0.3, (2, 8, 7)).astype(np.float32)
    data = DataProto.from_dict(non_tensors={"actions": acts}, meta_info={"stage_id": 0})
    server = _Serve(overrides)
    remote = [*overrides, f"train.remote.address={server.address}", f"train.remote.token_file={server.token_file}"]
    labels = ("EnvWorker, in process (shards here)", "EnvWorker over envfleet serve (loopback)")
    workers: list[Any] = []
    try:
        # Both alive at once (4 LIBERO processes), timed in alternating blocks, so that a slow
        # spell of the shared machine falls on both alike.
        workers = [started(load_config(overrides=overrides)), started(load_config(overrides=remote))]
        for worker in workers:
            for _ in range(2):
                worker.env_interact_step(data)
        blocks: dict[str, list[float]] = {label: [] for label in labels}
        for rnd in range(4):
            for i in (0, 1) if rnd % 2 == 0 else (1, 0):
                t0 = time.perf_counter()
                for _ in range(4):
                    workers[i].env_interact_step(data)
                blocks[labels[i]].append((time.perf_counter() - t0) / 4)
    finally:
        for worker in workers:
            worker.close()
        server.close()
    rates = {label: 2 * 8 / float(np.median(seconds)) for label, seconds in blocks.items()}
    base = rates["EnvWorker, in process (shards here)"]
    return [{"path": f"LIBERO: {k}", "env steps/s": v, "vs in-process manager": v / base} for k, v in rates.items()]


def run() -> None:
    """Print and write the remote figures."""
    rows, costs = _toy()
    wire = _wire_vs_websockets()
    notes = [
        f"Toy: {N} envs, two {HW}x{HW} images each, chunk 1, frozen (a zero-cost simulator): "
        "env steps per second, median of 3 blocks of 60 calls. Target: loopback at least 0.5x the in-process manager.",
        f"Hello (connect, token check, open the stage, bye): {costs['hello_ms']:.2f} ms per connection; the token is checked "
        f"once per connection (hmac.compare_digest: {costs['compare_digest_us']:.2f} us), not per call, so a call pays nothing for it.",
        *(f"Wire, one step-sized reply over loopback: {name}: {ms:.2f} ms per request" for name, ms in wire.items()),
    ]
    if libero_installed() and os.environ.get("ENVFLEET_BENCH_REMOTE_LIBERO", "1") != "0":
        rows += _libero()
        notes.append(
            "LIBERO: libero_spatial, 2 envs (one process each), chunk 8, render last, two 128x128 cameras; both workers alive at once, "
            "median of 4 alternated blocks of 4 calls after 2. Target: 0.95x."
        )
    write("remote", rows, notes, {"costs": costs, "wire_ms": wire})
