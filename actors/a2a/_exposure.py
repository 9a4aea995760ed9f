"""Which agents the signed bundle exposes to A2A clients (`a2a_exposed` in their profile).

The edge faces the network, so it reads the bundle with the least the broker can grant, by a
stored message's get every `refresh_s` (bus/_bundle_reader.py): no consumer. Without a valid
bundle nothing is exposed, and a rolled-back bundle exposes nothing new.
"""

from __future__ import annotations

import asyncio

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from nats.js.kv import KeyValue

from bus import BundleReader
from schemas import PolicyBundle, utc_now

__all__ = ("Exposure",)


class Exposure:
    """The bundle in force here, and the agents it exposes."""

    def __init__(self, kv: KeyValue, trusted: dict[str, Ed25519PublicKey], tenant: str) -> None:
        self._reader = BundleReader(kv, trusted, tenant)

    @property
    def bundle(self) -> PolicyBundle | None:
        return self._reader.bundle

    def agents(self) -> frozenset[str]:
        """The exposed agents (none without a bundle, or once it expired)."""
        bundle = self.bundle
        if bundle is None or bundle.expires_at <= utc_now():
            return frozenset()
        return frozenset(name for name, p in bundle.profiles.items() if p.a2a_exposed)

    async def refresh(self) -> None:
        """Read and verify the newest bundle; a refused one is logged and the last stays."""
        await self._reader.refresh()

    async def follow(self, stopping: asyncio.Event, refresh_s: float) -> None:
        """Refresh every `refresh_s` until `stopping` is set."""
        while not stopping.is_set():
            await self.refresh()
            try:
                await asyncio.wait_for(stopping.wait(), refresh_s)
            except TimeoutError:
                continue
