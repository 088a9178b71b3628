"""``envfleet doctor --config FILE`` for a config whose ``train.remote.address`` is set: checks the server.

One connection to the server, as a run makes it: it is reachable, the token is accepted,
the wire version matches, and the stage opens and starts; then the server's backend, its
package versions and its renderer are reported (from the stage's protocol, as the server
computes it). Each problem is a ``FAIL`` with its fix.
"""

from __future__ import annotations

from typing import Any

from .findings import Finding

# Imports inside functions: the client of envfleet.remote loads only for a config whose train.remote.address
# is set.

__all__ = ["remote_address", "remote_findings"]


def remote_address(cfg: Any, mode: str = "train") -> str | None:
    """``cfg[mode].remote.address``, or None when the config runs its envs here."""
    section = cfg.get(mode)
    remote = None if section is None else section.get("remote")
    address = None if remote is None else remote.get("address")
    return str(address) if address else None


def remote_findings(cfg: Any, mode: str = "train") -> list[Finding]:
    """The checks of the server ``cfg[mode].remote`` names, in order; stops at the first that fails."""
    from envfleet.errors import ConfigError, EnvFleetError
    from envfleet.remote import RemoteConnectionError, RemoteEnvManager, RemoteRefusedError
    from envfleet.remote.config import build_manager
    from envfleet.remote.wire import VERSION

    address = remote_address(cfg, mode)
    where = f"remote server {address} ({mode}.remote.address)"
    try:
        manager = build_manager(cfg, stage_id=0, mode=mode)
    except RemoteRefusedError as exc:
        fixes = {
            "auth": f"put the server's token on the first line of the file {mode}.remote.token_file names (envfleet serve --token-file)",
            "version": f"run the same envfleet release on both sides (this client speaks wire version {VERSION})",
            "busy": f"stop the other client that holds stage 0, wait until its lease runs out, or take the stage from a holder "
            f"you know is dead with {mode}.remote.take=true",
        }
        return [Finding("FAIL", f"{where}: refused ({exc.code}): {exc}", fixes.get(exc.code, "see the server's log"))]
    except RemoteConnectionError as exc:
        return [Finding("FAIL", f"{where}: not reachable: {exc}", "start `envfleet serve --config FILE` there, or fix the address")]
    except ConfigError as exc:
        return [Finding("FAIL", f"{where}: {exc}", f"make this config's {mode} section match the server's, or fix {mode}.remote")]
    assert isinstance(manager, RemoteEnvManager)  # remote.address is set
    findings = [Finding("ok", f"{where}: reachable, token accepted, wire version {VERSION}")]
    try:
        spec = manager.spec
        chunk = manager.num_action_chunks
        findings.append(
            Finding(
                "ok",
                f"{where}: backend {spec.name} (package {spec.package or '-'}), stage 0: {manager.num_envs} envs, "
                f"action_dim {manager.action_dim}, chunk {'any' if chunk is None else chunk}",
            )
        )
        manager.start_simulator()
        proto = manager.protocol()
        versions = ", ".join(f"{name} {version}" for name, version in sorted(proto.get("packages", {}).items()))
        findings.append(Finding("ok", f"{where}: versions on the server: {versions or 'none reported'}"))
        renderer = ", ".join(f"{k}={v}" for k, v in proto.get("renderer", {}).items())
        findings.append(Finding("ok", f"{where}: renderer: {renderer or 'none (the backend does not render)'}"))
    except EnvFleetError as exc:
        findings.append(Finding("FAIL", f"{where}: the stage does not start: {type(exc).__name__}: {exc}", "see the server's log"))
    finally:
        manager.close()
    return findings
