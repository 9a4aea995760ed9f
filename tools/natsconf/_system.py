"""The optional `system` user: nats-server's own account, for `nats server report` and
`nats events`, written only when asked (`parley nats-config --system-user`; `parley up`
writes it for the local system).

nats-server answers monitoring requests (`$SYS.REQ.SERVER.PING.<endpoint>` to every server,
`$SYS.REQ.SERVER.<id>.<endpoint>` to one, `$SYS.REQ.ACCOUNT.<account>.<endpoint>` about one
account) and publishes its events (`$SYS.ACCOUNT.>`, `$SYS.SERVER.>`) only in the system
account, which no Parley principal is in. The user here asks the read endpoints and listens
to the events; it may not reload the config, kick or lame-duck a server, or reach anything
outside the system account (which has no imports: Parley's subjects are not there).
"""

from __future__ import annotations

from typing import Any

from schemas import Namespace

__all__ = ("SYSTEM_ACCOUNT", "SYSTEM_USER", "system_account")

SYSTEM_USER = "system"
SYSTEM_ACCOUNT = "SYS"

_READ_ENDPOINTS = (
    "STATSZ",
    "VARZ",
    "CONNZ",
    "SUBSZ",
    "ROUTEZ",
    "GATEWAYZ",
    "LEAFZ",
    "ACCOUNTZ",
    "JSZ",
    "HEALTHZ",
    "RAFTZ",
    "IPQUEUESZ",
)
"""The monitoring endpoints `nats server` reads: `server list` (STATSZ), `server report
jetstream` (JSZ), `server report connections` (CONNZ), `server info` (VARZ) and the like."""

_WRITE_ENDPOINTS = ("RELOAD", "KICK", "LDM", "PROFILEZ")
"""What changes or probes a running server: refused, whatever is allowed around it."""


def system_permissions(ns: Namespace) -> dict[str, object]:
    """The system user's permissions: the read endpoints, the events, its own inbox."""
    publish = ["$SYS.REQ.SERVER.PING"]  # STATSZ of every server: `nats server list`
    for endpoint in _READ_ENDPOINTS:
        publish += [
            f"$SYS.REQ.SERVER.PING.{endpoint}",
            f"$SYS.REQ.SERVER.*.{endpoint}",
            f"$SYS.REQ.ACCOUNT.*.{endpoint}",
        ]
    deny = [f"$SYS.REQ.SERVER.*.{endpoint}" for endpoint in _WRITE_ENDPOINTS]
    deny += [f"$SYS.REQ.ACCOUNT.*.{endpoint}" for endpoint in _WRITE_ENDPOINTS]
    inbox = ns.inbox_prefix(SYSTEM_USER)
    return {
        "publish": {"allow": publish, "deny": deny},
        "subscribe": {
            "allow": [f"{inbox}.>", "$SYS.ACCOUNT.>", "$SYS.SERVER.>"],
            "deny": ["_INBOX.>"],
        },
    }


def system_account(nkey: str, ns: Namespace) -> dict[str, Any]:
    """The system account's entry in `authorization.conf`: one user, no imports or exports."""
    return {"users": [{"nkey": nkey, "permissions": system_permissions(ns)}]}
