"""A real ``envfleet serve`` on loopback, driven by ``RemoteEnvManager``: same results as in process, sessions, refusals."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys

import numpy as np
import pytest

from envfleet import ProcessEnvManager
from envfleet.errors import ConfigError, InvalidInputError
from envfleet.remote import RemoteEnvManager, RemoteRefusedError, build_manager
from envfleet.remote.wire import VERSION, Frame, FrameLimits, encode_frame, read_frame, write_frame

from .servetools import TOKEN, local_cfg, serve, wait_for


def _actions(seed: int, n: int = 4, chunk: int = 4) -> np.ndarray:
    return np.random.default_rng(seed).uniform(-1, 1, (n, chunk, 7)).astype(np.float32)


def _same(a: dict, b: dict, what: str) -> None:
    assert set(a) == set(b), what
    for key in a:
        assert a[key].dtype == b[key].dtype, f"{what}: {key}"
        np.testing.assert_array_equal(a[key], b[key], err_msg=f"{what}: {key}")


def run_episode(mgr, steps: int = 6) -> list:
    """Reset, steps, a partial reset, more steps: every result, for comparison."""
    out = []
    ids = mgr.get_all_state_ids()
    out.append(mgr.reset_envs_to_state_ids(ids[[0, 5, 11, 29]]))
    for t in range(steps):
        out.append(mgr.chunk_step(_actions(t)))
        if t == 2:
            out.append(mgr.reset_some_envs(np.array([1, 3]), ids[[7, 20]]))
    return out


def assert_same_results(got: list, want: list) -> None:
    assert len(got) == len(want)
    for i, (g, w) in enumerate(zip(got, want)):
        _same(g.obs, w.obs, f"call {i} obs")
        _same(g.infos, w.infos, f"call {i} infos")
        assert g.task_descriptions == w.task_descriptions
        for flag in ("rewards", "terminations", "truncations"):
            if hasattr(w, flag):
                assert getattr(g, flag).dtype == getattr(w, flag).dtype
                np.testing.assert_array_equal(getattr(g, flag), getattr(w, flag), err_msg=f"call {i} {flag}")


@pytest.fixture(scope="module")
def reference() -> list:
    with ProcessEnvManager(local_cfg()) as mgr:
        return run_episode(mgr)


def test_remote_manager_is_bit_identical_to_process_manager(tmp_path, reference, no_leaks) -> None:
    served = serve(tmp_path)
    try:
        mgr = build_manager(local_cfg(remote=served.address, token_file=served.token_file))
        assert isinstance(mgr, RemoteEnvManager)
        with mgr:
            assert mgr.spec.name == "toy" and mgr.num_envs == 4 and mgr.chunk == 4
            assert set(mgr.obs_spec) == {"full_image", "wrist_image", "state"}
            assert_same_results(run_episode(mgr), reference)
            assert len(served.shard_pids()) == 2  # the server runs the shards, two envs each
            assert mgr.protocol()["backend"] == "toy"
            with pytest.raises(InvalidInputError, match="action_dim=7"):
                mgr.chunk_step(np.zeros((4, 4, 6), np.float32))
        wait_for(lambda: not served.shard_pids(), 20, "the server frees the stage after the client's bye")
    finally:
        assert served.stop() == 0
    assert "stopped" in served.log()


def test_second_client_is_refused_while_the_first_holds_the_stage(tmp_path, no_leaks) -> None:
    served = serve(tmp_path)
    try:
        first = RemoteEnvManager(served.address, token=TOKEN)
        with pytest.raises(RemoteRefusedError, match="held by client 127.0.0.1") as info:
            RemoteEnvManager(served.address, token=TOKEN)
        assert info.value.code == "busy"
        other_rank = RemoteEnvManager(served.address, token=TOKEN, rank=1)  # another rank is another set of envs
        other_rank.close()
        first.close()
        RemoteEnvManager(served.address, token=TOKEN).close()  # freed: the next client gets it
    finally:
        served.stop()


def test_killed_client_frees_its_envs(tmp_path, no_leaks) -> None:
    served = serve(tmp_path)
    code = f"""
import sys, numpy as np
from envfleet.remote import RemoteEnvManager
m = RemoteEnvManager({served.address!r}, token={TOKEN!r})
m.start_simulator(); m.reset_envs_to_state_ids(np.arange(4))
print("ready", flush=True); sys.stdin.read()
"""
    client = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert client.stdout is not None and client.stdout.readline().strip() == "ready"
        assert len(served.shard_pids()) == 2
        client.send_signal(signal.SIGKILL)
        client.wait(10)
        took = wait_for(lambda: "freed" in served.log(), 30, "the server frees a killed client's envs")
        assert took < 30 and not served.shard_pids()
        with RemoteEnvManager(served.address, token=TOKEN) as again:  # the stage is free for the next client
            again.reset_envs_to_state_ids(np.arange(4))
    finally:
        client.kill()
        served.stop()


def _raw(address: str) -> socket.socket:
    host, _, port = address.rpartition(":")
    return socket.create_connection((host, int(port)), timeout=10)


def test_wrong_token_is_refused_and_logged_with_the_peer(tmp_path) -> None:
    served = serve(tmp_path)
    try:
        with pytest.raises(RemoteRefusedError, match="authentication failed") as info:
            RemoteEnvManager(served.address, token="not-the-token")
        assert info.value.code == "auth"
        with pytest.raises(RemoteRefusedError, match="authentication failed"):
            RemoteEnvManager(served.address)
        # A message before the hello is refused without being acted on.
        sock = _raw(served.address)
        write_frame(sock, Frame("open", {"stage_id": 0}))
        reply = read_frame(sock, FrameLimits())
        assert reply.type == "error" and reply.get("code") == "auth" and reply.get("fatal")
        sock.close()
        wait_for(lambda: served.log().count("refused") >= 3, 10, "three refusals logged")
        assert "client 127.0.0.1:" in served.log() and "wrong token" in served.log() and "missing token" in served.log()
        assert not served.shard_pids()
    finally:
        served.stop()


def test_a_newer_wire_version_gets_an_error_naming_both(tmp_path) -> None:
    served = serve(tmp_path)
    try:
        sock = _raw(served.address)
        write_frame(sock, Frame("hello", {"token": TOKEN}), version=VERSION + 1)
        reply = read_frame(sock, FrameLimits())
        assert reply.get("code") == "version"
        assert f"version {VERSION + 1}" in reply.get("message") and f"version {VERSION}" in reply.get("message")
        sock.close()
    finally:
        served.stop()


def test_tls_with_a_self_signed_pair_and_a_wrong_ca_is_refused(tmp_path, reference, no_leaks) -> None:
    def pair(name: str) -> tuple[str, str]:
        cert, key = tmp_path / f"{name}.pem", tmp_path / f"{name}.key"
        subprocess.run(
            ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1",
             "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)],
            check=True, capture_output=True,
        )  # fmt: skip
        return str(cert), str(key)

    cert, key = pair("server")
    other, _ = pair("other")
    served = serve(tmp_path, args=["--tls-cert", cert, "--tls-key", key])
    try:
        assert "(tls, token)" in served.log()
        with build_manager(local_cfg(remote=served.address, token_file=served.token_file, ca_file=cert)) as mgr:
            assert_same_results(run_episode(mgr), reference)
        from envfleet.remote import RemoteConnectionError

        with pytest.raises(RemoteConnectionError, match="CERTIFICATE_VERIFY_FAILED"):
            RemoteEnvManager(served.address, token=TOKEN, ca_file=other)
        with pytest.raises((RemoteConnectionError, RemoteRefusedError)):  # plain TCP to a TLS server
            RemoteEnvManager(served.address, token=TOKEN, connect_timeout_s=5)
        wait_for(lambda: "TLS handshake failed" in served.log(), 10, "the failed handshake logged")
    finally:
        served.stop()


@pytest.mark.parametrize(
    "args, match",
    [
        ([], "a token is required"),
        (["--insecure", "--host", "0.0.0.0"], "only on a loopback address"),
        (["--tls-cert", "x.pem", "--insecure"], "both --tls-cert and --tls-key"),
        (["--insecure", "--max-connections", "4", "--max-unauthenticated", "4"], "below --max-connections (4)"),
        (["--insecure", "--lease-s", "0"], "--lease-s and --auth-timeout-s must be over 0"),
    ],
    ids=["no-token", "insecure-off-loopback", "half-tls", "strangers-fill-all", "no-lease"],
)
def test_serve_refuses_to_start_unsafely(tmp_path, args, match) -> None:
    config = tmp_path / "c.yaml"
    config.write_text("train:\n  simulator_type: toy\n")
    out = subprocess.run(
        [sys.executable, "-m", "envfleet_ray.cli", "serve", "--config", str(config), *args], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 2 and match in out.stderr


def test_a_config_that_disagrees_with_the_server_is_named(tmp_path) -> None:
    served = serve(tmp_path, token=None)
    try:
        with pytest.raises(ConfigError, match="train.num_envs is 3 here but 4 on the server"):
            build_manager(local_cfg("train.num_envs=3", remote=served.address))
    finally:
        served.stop()


def test_a_request_over_the_stage_limit_is_refused_before_it_is_read(tmp_path, no_leaks) -> None:
    served = serve(tmp_path)
    try:
        sock = _raw(served.address)
        for frame in (Frame("hello", {"token": TOKEN}), Frame("open", {})):
            write_frame(sock, frame)
            assert read_frame(sock, FrameLimits()).type in ("welcome", "opened")
        # 4 envs x chunk 4 x 7 floats is 448 bytes: a 2 MB payload is refused from its prefix alone.
        # Only the prefix and header go out: the server must answer without waiting for the payload.
        sock.sendall(bytes(encode_frame(Frame("step", arrays={"actions": np.zeros((4, 4, 7 * 4096), np.float32)}))[0]))
        reply = read_frame(sock, FrameLimits())
        assert reply.get("code") == "frame" and reply.get("fatal") and "over the limit" in reply.get("message")
        sock.close()
        wait_for(lambda: "freed" in served.log(), 10, "the stage freed")
    finally:
        served.stop()


def test_offload_and_restore_over_the_wire_match_in_process(tmp_path, no_leaks) -> None:
    def run(mgr) -> list:
        mgr.start_simulator()
        out = [mgr.reset_envs_to_state_ids(np.array([2, 9, 16, 23])), mgr.chunk_step(_actions(1))]
        mgr.stop_simulator()  # offload: the shards save their state and exit
        mgr.start_simulator()
        out.append(mgr.chunk_step(_actions(2)))
        return out

    with ProcessEnvManager(local_cfg()) as ref:
        want = run(ref)
        supports = ref.supports_state
    served = serve(tmp_path)
    try:
        mgr = RemoteEnvManager(served.address, token=TOKEN)
        try:
            got = run(mgr)
            assert mgr.supports_state == supports
        finally:
            mgr.close()
        assert_same_results(got, want)
    finally:
        served.stop()


def test_recording_beside_a_remote_stage_is_refused_before_connecting() -> None:
    """train.record records where the simulators run: beside train.remote.address it is a ConfigError at once."""
    cfg = local_cfg("train.record.format=lerobot", remote="127.0.0.1:9")  # port 9: nothing listens, nothing is tried
    with pytest.raises(ConfigError, match=r"train.record records where the simulators run.*envfleet serve --config"):
        build_manager(cfg)
