"""Which agents the signed bundle exposes to A2A clients (`a2a_exposed` in their profile).

The edge faces the network, so it reads the bundle with the least the broker can grant: the
value of the policy bucket's `bundle` key by a stored message's get, every `refresh_s`. It
creates no consumer (a watch is one, and a consumer's creator chooses where the server
pushes what it reads: tools/natsconf/_operator.py says why that is a grant to write). Each
value is verified as the gate verifies it (signature by a trusted key, tenant, expiry) and is
never older than the version already in force here: a rolled-back bundle exposes nothing
new. Without a valid bundle nothing is exposed.
"""

from __future__ import annotations

import asyncio
import logging

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from nats.errors import Error as NatsError
from nats.js.errors import KeyNotFoundError
from nats.js.kv import KeyValue

from bus import BUNDLE_KEY
from schemas import BundleError, PolicyBundle, utc_now, verify_bundle

__all__ = ("Exposure",)

log = logging.getLogger("parley.a2a.exposure")


class Exposure:
    """The bundle in force here, and the agents it exposes."""

    def __init__(self, kv: KeyValue, trusted: dict[str, Ed25519PublicKey], tenant: str) -> None:
        self._kv = kv
        self._trusted = trusted
        self._tenant = tenant
        self.bundle: PolicyBundle | None = None
        self._revision = 0

    def agents(self) -> frozenset[str]:
        """The exposed agents (none without a bundle, or once it expired)."""
        bundle = self.bundle
        if bundle is None or bundle.expires_at <= utc_now():
            return frozenset()
        return frozenset(name for name, p in bundle.profiles.items() if p.a2a_exposed)

    async def refresh(self) -> None:
        """Read and verify the newest bundle; a refused one is logged and the last stays."""
        try:
            entry = await self._kv.get(BUNDLE_KEY)
        except KeyNotFoundError:
            return
        except (NatsError, TimeoutError) as exc:
            log.warning("cannot read the policy bundle", extra={"error": str(exc)})
            return
        revision = int(entry.revision or 0)
        if revision == self._revision or not entry.value:
            return
        self._revision = revision
        floor = self.bundle.version if self.bundle is not None else 0
        try:
            bundle, _ = verify_bundle(
                entry.value, self._trusted, now=utc_now(), tenant=self._tenant, min_version=floor
            )
        except BundleError as exc:
            log.error("policy bundle refused", extra={"reason": exc.reason, "error": str(exc)})
            return
        self.bundle = bundle
        log.info("policy bundle in force", extra={"version": bundle.version})

    async def follow(self, stopping: asyncio.Event, refresh_s: float) -> None:
        """Refresh every `refresh_s` until `stopping` is set."""
        while not stopping.is_set():
            await self.refresh()
            try:
                await asyncio.wait_for(stopping.wait(), refresh_s)
            except TimeoutError:
                continue
