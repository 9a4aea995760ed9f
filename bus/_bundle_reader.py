"""The signed policy bundle for a process that faces people or the network: read by a stored
message's get, never through a consumer.

The gate follows the bundle with a watch (bus/_bundles.py), an ephemeral consumer. A process
serving HTTP (the A2A edge, the web console) gets the least the broker can grant instead: the
last stored values of the policy bucket's `bundle` and `trusted.version` keys by a stored
message's get, read again when asked (a consumer's creator chooses where the server pushes
what it reads: tools/natsconf/_operator.py says why that is a grant to write).

Each value is verified as the gate verifies it (signature by a trusted key, tenant, expiry),
and never below the floor: the highest version the gates have trusted, which
`trusted.version` proves with that version's own signed bundle. So this reader agrees with
the gates: a rolled-back bundle is refused; and a newest value that does not verify (a
foreign or broken write) leaves in force what the gates keep, the bundle already in force
here or, at a first read, the floor's own bundle while it has not expired.
"""

from __future__ import annotations

import asyncio
import logging
from datetime import UTC, datetime
from typing import Final

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from nats.errors import Error as NatsError
from nats.js.errors import KeyNotFoundError
from nats.js.kv import KeyValue

from bus._bundles import BUNDLE_KEY, TRUSTED_VERSION_KEY
from schemas import BundleError, PolicyBundle, utc_now, verify_bundle

__all__ = ("BundleReader",)

log = logging.getLogger("parley.bus.bundles")

_NEVER_EXPIRED: Final = datetime(1970, 1, 1, tzinfo=UTC)
"""The `now` a floor's proof is verified at: it proves a version whether or not it expired."""


class BundleReader:
    """The newest bundle a trusted signer signed for `tenant`, as last read."""

    def __init__(self, kv: KeyValue, trusted: dict[str, Ed25519PublicKey], tenant: str) -> None:
        self._kv = kv
        self._trusted = trusted
        self._tenant = tenant
        self.bundle: PolicyBundle | None = None
        self.problem = "no policy bundle has been published yet"
        """Why no bundle is in force, or why the newest one read was refused."""
        self._revision = 0
        self._lock = asyncio.Lock()
        """One read at a time: an older read finishing after a newer one would be refused
        as a rollback, and say so."""

    async def refresh(self) -> None:
        """Read and verify the newest bundle; a refused one is logged and the last stays."""
        async with self._lock:
            try:
                newest = await self._value(BUNDLE_KEY)
                floor_record = await self._value(TRUSTED_VERSION_KEY)
            except (NatsError, TimeoutError) as exc:
                self.problem = f"the policy bundle cannot be read: {exc!r}"
                log.warning("cannot read the policy bundle", extra={"error": str(exc)})
                return
            floor, proof = self._floor(floor_record[1] if floor_record else b"")
            if newest is None or newest[0] == self._revision:
                self._fall_back(proof)
                return
            revision, value = newest
            self._revision = revision
            in_force = self.bundle.version if self.bundle is not None else 0
            try:
                bundle, _ = verify_bundle(
                    value,
                    self._trusted,
                    now=utc_now(),
                    tenant=self._tenant,
                    min_version=max(floor, in_force),
                )
            except BundleError as exc:
                self.problem = str(exc)
                log.error("policy bundle refused", extra={"reason": exc.reason, "error": str(exc)})
                self._fall_back(proof)
                return
            self.bundle = bundle
            log.info("policy bundle in force", extra={"version": bundle.version})

    async def _value(self, key: str) -> tuple[int, bytes] | None:
        try:
            entry = await self._kv.get(key)
        except KeyNotFoundError:
            return None
        if not entry.value:
            return None
        return int(entry.revision or 0), entry.value

    def _floor(self, record: bytes) -> tuple[int, bytes]:
        """The version the gates' floor proves, and its proof (0 and nothing: none)."""
        if not record:
            return 0, b""
        try:
            proven, _ = verify_bundle(
                record, self._trusted, now=_NEVER_EXPIRED, tenant=self._tenant
            )
        except BundleError:
            return 0, b""  # a foreign floor proves nothing; the gates ignore it too
        return proven.version, record

    def _fall_back(self, proof: bytes) -> None:
        """With nothing in force, the bundle the gates' floor proves, while it has not expired
        (the newest value did not verify, or the key is gone)."""
        if self.bundle is not None or not proof:
            return
        try:
            bundle, _ = verify_bundle(proof, self._trusted, now=utc_now(), tenant=self._tenant)
        except BundleError:
            return
        self.bundle = bundle
        log.info("policy bundle in force", extra={"version": bundle.version, "from": "floor"})
