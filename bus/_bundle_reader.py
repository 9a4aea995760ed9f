"""The signed policy bundle for a process that faces people or the network: read by a stored
message's get, never through a consumer.

The gate follows the bundle with a watch (bus/_bundles.py), an ephemeral consumer. A process
serving HTTP (the A2A edge, the web console) gets the least the broker can grant instead: the
value of the policy bucket's `bundle` key by a stored message's get, read again when asked
(a consumer's creator chooses where the server pushes what it reads:
tools/natsconf/_operator.py says why that is a grant to write). Each value is verified as the
gate verifies it (signature by a trusted key, tenant, expiry) and is never older than the
version already in force here: a rolled-back bundle is refused and the last one stays.
"""

from __future__ import annotations

import logging

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from nats.errors import Error as NatsError
from nats.js.errors import KeyNotFoundError
from nats.js.kv import KeyValue

from bus._bundles import BUNDLE_KEY
from schemas import BundleError, PolicyBundle, utc_now, verify_bundle

__all__ = ("BundleReader",)

log = logging.getLogger("parley.bus.bundles")


class BundleReader:
    """The newest bundle a trusted signer signed for `tenant`, as last read."""

    def __init__(self, kv: KeyValue, trusted: dict[str, Ed25519PublicKey], tenant: str) -> None:
        self._kv = kv
        self._trusted = trusted
        self._tenant = tenant
        self.bundle: PolicyBundle | None = None
        self.problem = "no policy bundle has been published yet"
        """Why no bundle is in force, or why the last one read was refused."""
        self._revision = 0

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
            self.problem = str(exc)
            log.error("policy bundle refused", extra={"reason": exc.reason, "error": str(exc)})
            return
        self.bundle = bundle
        log.info("policy bundle in force", extra={"version": bundle.version})
