"""The run's own connections to its broker, and the audit chain it walks with one of them.

Each connection logs in as an actor's user when the broker is locked down (the load as the
CLI, the timeline's reader as the provisioner, the audit's walker as the auditor), so the run
itself holds no more than the principals whose work it does.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import nats
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import load_pem_private_key
from nats.aio.client import Client as NATS

from actors import ACTORS
from schemas import Namespace, key_id
from tools.audit import verify_stream
from tools.chaos._lockdown import LockedBroker

__all__ = ("connect", "verify_audit")

_AUDITOR = "auditor"


async def _quiet(exc: Exception) -> None:
    del exc  # refusals are counted from the server's log; outages are the run's own faults


async def connect(url: str, broker: LockedBroker | None, actor: str) -> NATS:
    """The run's own connection, as `actor`'s user when the broker is locked down."""
    options: dict[str, Any] = {
        "max_reconnect_attempts": -1,
        "reconnect_time_wait": 0.25,
        "ping_interval": 5,
        "error_cb": _quiet,  # nats-py would print each of the server's own faults
    }
    if broker is not None:
        options.update(broker.credentials(actor))
    return await nats.connect(url.split(","), **options)


async def verify_audit(
    url: str, broker: LockedBroker | None, ns: Namespace, audit_key: Path
) -> tuple[int | None, list[str]]:
    """Walk the audit chain with the auditor's public key, reading as the auditor (the only
    user that may read PARLEY_AUDIT); (None, []) without an auditor."""
    if _AUDITOR not in ACTORS:
        return None, []
    try:
        pem = await asyncio.to_thread(audit_key.read_bytes)
    except FileNotFoundError:
        return None, []
    private = load_pem_private_key(pem, password=None)
    assert isinstance(private, Ed25519PrivateKey)  # noqa: S101 - demo_topology wrote it
    public = private.public_key()
    nc = await connect(url, broker, _AUDITOR)
    try:
        js = nc.jetstream()
        report = await verify_stream(js, ns.stream("audit"), trusted={key_id(public): public})
    finally:
        await nc.close()
    gaps = [] if report.ok else [f"seq {report.first_bad_seq}: {report.problem}"]
    return report.records, gaps
