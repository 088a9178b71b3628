"""``envfleet serve``: the stages of a config behind a socket, for :class:`envfleet.remote.RemoteEnvManager`.

It binds to 127.0.0.1 unless told otherwise, prints the address it listens on, and on
SIGTERM or Ctrl-C ends every session, stops every shard process and frees its shared
memory before it exits. A token (``--token-file``) is required, except on a loopback
address with an explicit ``--insecure``. The protocol is in docs/remote.md.
"""

from __future__ import annotations

import argparse
import logging
import signal
import ssl
import sys
import threading
from typing import Any

# Imports inside functions: the server and the config load when a server starts, not when `envfleet --help`
# imports this module.

__all__ = ["add_parser", "run"]


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add the ``serve`` subcommand to the ``envfleet`` parser's subparsers."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "serve",
        help="serve a config's envs over the network to envfleet.remote.RemoteEnvManager (train.remote.address)",
        description="Serve the stages of a config's envs behind a TCP socket (TLS with --tls-cert/--tls-key). "
        "Clients authenticate with the token in --token-file; see docs/remote.md.",
    )
    parser.add_argument("--config", required=True, help="YAML config in verl's env layout: what to serve")
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1: this machine only)")
    parser.add_argument("--port", type=int, default=0, help="port to bind (default 0: any free port, printed)")
    parser.add_argument("--token-file", help="file whose first line is the token clients must send")
    parser.add_argument("--tls-cert", help="PEM certificate (chain) for TLS; needs --tls-key")
    parser.add_argument("--tls-key", help="PEM private key for TLS; needs --tls-cert")
    parser.add_argument("--insecure", action="store_true", help="no token: allowed only on a loopback address")
    parser.add_argument("--max-connections", type=int, default=16, help="open connections at once (default 16)")
    parser.add_argument(
        "--max-unauthenticated", type=int, help="of them, not yet authenticated; when full the oldest is dropped (default: half)"
    )
    parser.add_argument("--auth-timeout-s", type=float, default=5.0, help="a connection without the token by then is closed (default 5)")
    parser.add_argument(
        "--lease-s", type=float, default=30.0, help="a client with a stage that sends nothing for this long loses it (default 30)"
    )
    parser.add_argument(
        "--idle-timeout-s", type=float, default=3600.0, help="a silent session without a stage is closed after this (default 3600)"
    )
    parser.add_argument("--send-timeout-s", type=float, default=60.0, help="a client that does not read a reply for this long is dropped")
    parser.add_argument("overrides", nargs="*", help="config overrides key=value, e.g. train.num_envs=2")
    return parser


def options_from(args: argparse.Namespace) -> Any:
    """The :class:`~envfleet.remote.ServeOptions` of parsed ``args``.

    :raises ConfigError: no token off loopback, ``--insecure`` off loopback, half a TLS pair.
    """
    from envfleet.errors import ConfigError
    from envfleet.remote import ServeOptions, is_loopback, read_token

    loopback = is_loopback(args.host)
    if args.insecure and not loopback:
        raise ConfigError(f"envfleet serve: --insecure is allowed only on a loopback address, not --host {args.host}; give --token-file")
    if args.insecure and args.token_file:
        raise ConfigError("envfleet serve: --insecure and --token-file contradict each other; give one")
    if not args.insecure and not args.token_file:
        raise ConfigError("envfleet serve: a token is required: give --token-file FILE (or --insecure, on a loopback address only)")
    if bool(args.tls_cert) != bool(args.tls_key):
        raise ConfigError("envfleet serve: TLS needs both --tls-cert and --tls-key")
    strangers = args.max_connections // 2 if args.max_unauthenticated is None else args.max_unauthenticated
    if not 1 <= strangers < args.max_connections:
        raise ConfigError(
            f"envfleet serve: --max-unauthenticated must be at least 1 and below --max-connections ({args.max_connections}), "
            f"got {strangers}; --max-connections needs at least 2"
        )
    if args.lease_s <= 0 or args.auth_timeout_s <= 0:
        raise ConfigError(f"envfleet serve: --lease-s and --auth-timeout-s must be over 0, got {args.lease_s} and {args.auth_timeout_s}")
    context = None
    if args.tls_cert:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        try:
            context.load_cert_chain(args.tls_cert, args.tls_key)
        except (OSError, ssl.SSLError) as exc:
            raise ConfigError(f"envfleet serve: cannot load --tls-cert {args.tls_cert} / --tls-key {args.tls_key}: {exc}") from None
    token = read_token(args.token_file)
    return ServeOptions(
        host=args.host,
        port=int(args.port),
        token=None if token is None else token.encode(),
        ssl_context=context,
        max_connections=int(args.max_connections),
        max_unauthenticated=strangers,
        auth_timeout_s=float(args.auth_timeout_s),
        lease_s=float(args.lease_s),
        idle_timeout_s=float(args.idle_timeout_s),
        send_timeout_s=float(args.send_timeout_s),
    )


def run(args: argparse.Namespace) -> int:
    """Run ``envfleet serve`` until SIGTERM or Ctrl-C; returns the exit code."""
    from envfleet.config import load_config
    from envfleet.remote import EnvServer

    options = options_from(args)
    cfg = load_config(args.config, overrides=list(args.overrides))
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s", stream=sys.stderr)
    server = EnvServer(cfg, options)
    done = threading.Event()
    previous = {sig: signal.signal(sig, lambda *_: done.set()) for sig in (signal.SIGTERM, signal.SIGINT)}
    server.start()
    try:
        scheme = "tls" if options.ssl_context is not None else "tcp"
        auth = "token" if options.token is not None else "no token (--insecure)"
        print(
            f"envfleet serve: listening on {server.address} ({scheme}, {auth}); lease {options.lease_s:g} s; SIGTERM or Ctrl-C stops",
            flush=True,
        )
        while not done.wait(1.0):
            pass
    finally:
        print("envfleet serve: stopping: closing sessions and shards", file=sys.stderr, flush=True)
        server.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    print("envfleet serve: stopped", flush=True)
    return 0
