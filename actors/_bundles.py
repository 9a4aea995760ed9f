"""The policy bundle the gate enforces: loaded from KV, verified, hot-reloaded, never rolled back.

The signer writes a DSSE-signed bundle under the key `bundle` of the policy bucket
(`parley policy publish`). The gate verifies every new value before decoding it (signature over
the exact bytes, key id, payload type, schema version, expiry, tenant) and refuses any version
lower than the highest it ever trusted, which it persists under `trusted.version` with
compare-and-set, so a restarted gate, or another replica, cannot be rolled back either. A
bundle that fails is logged and ignored: the last good one stays in force. When the last good
one expires the gate denies everything (`POLICY_EXPIRED`, decided in actors/_decide.py).
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from nats.js.errors import KeyNotFoundError, KeyWrongLastSequenceError
from nats.js.kv import KeyValue

from bus import load_public_key
from schemas import BundleError, ErrorCode, PolicyBundle, key_id, utc_now, verify_bundle

__all__ = ("BUNDLE_KEY", "TRUSTED_VERSION_KEY", "BundleStore", "load_public_keys")

log = logging.getLogger("parley.actors.gate.bundles")

BUNDLE_KEY = "bundle"
TRUSTED_VERSION_KEY = "trusted.version"


def load_public_keys(paths: list[str]) -> dict[str, Ed25519PublicKey]:
    """Read the signers' Ed25519 public keys (PEM), by key id.

    Raises:
        ValueError: a file is missing or is not an Ed25519 public key.
    """
    keys: dict[str, Ed25519PublicKey] = {}
    for name in paths:
        key = load_public_key(Path(name))
        keys[key_id(key)] = key
    return keys


class BundleStore:
    """The bundle in force, for one gate process."""

    def __init__(self, kv: KeyValue, trusted: dict[str, Ed25519PublicKey], tenant: str) -> None:
        self._kv = kv
        self._trusted = trusted
        self._tenant = tenant
        self.bundle: PolicyBundle | None = None
        self.bundle_hash = ""
        self.problem = "no policy bundle has been published yet"
        self.refused = 0
        self.changed = asyncio.Event()
        """Set whenever a bundle is accepted or refused (tests and tools wait on it)."""

    async def load(self) -> None:
        """Read and apply the published bundle, if any."""
        try:
            entry = await self._kv.get(BUNDLE_KEY)
        except KeyNotFoundError:
            return
        await self.offer(entry.value or b"")

    async def _trusted_version(self) -> tuple[int, int]:
        try:
            entry = await self._kv.get(TRUSTED_VERSION_KEY)
        except KeyNotFoundError:
            return 0, 0
        return int(entry.value or b"0"), int(entry.revision or 0)

    async def _persist_version(self, version: int) -> None:
        """Raise the persisted highest trusted version to `version` (never lower it)."""
        for _ in range(10):
            current, revision = await self._trusted_version()
            if current >= version:
                return
            try:
                if revision:
                    await self._kv.update(TRUSTED_VERSION_KEY, str(version).encode(), revision)
                else:
                    await self._kv.create(TRUSTED_VERSION_KEY, str(version).encode())
                return
            except KeyWrongLastSequenceError:
                continue  # another replica raised it meanwhile: read again
        raise RuntimeError("could not persist the trusted policy version")

    async def offer(self, signed: bytes) -> bool:
        """Verify `signed` and make it the bundle in force; False (and logged) if refused."""
        digest = hashlib.sha256(signed).hexdigest()[:16]
        if digest == self.bundle_hash:
            return True
        floor, _ = await self._trusted_version()
        if self.bundle is not None:
            floor = max(floor, self.bundle.version)
        try:
            bundle, signer = verify_bundle(
                signed, self._trusted, now=utc_now(), tenant=self._tenant, min_version=floor
            )
            if self.bundle is not None and bundle.version == self.bundle.version:
                raise BundleError(
                    ErrorCode.POLICY_BUNDLE_INVALID,
                    "same_version",
                    f"bundle version {bundle.version} is already in force with other contents",
                )
        except BundleError as exc:
            self.refused += 1
            log.error(
                "policy bundle refused",
                extra={"code": str(exc.code), "reason": exc.reason, "error": str(exc)},
            )
            self.changed.set()
            return False
        await self._persist_version(bundle.version)
        self.bundle, self.bundle_hash = bundle, digest
        self.problem = ""
        log.info(
            "policy bundle in force",
            extra={"version": bundle.version, "signer": signer, "hash": digest},
        )
        self.changed.set()
        return True

    async def watch(self, stopping: asyncio.Event) -> None:
        """Apply every bundle the signer publishes until `stopping` is set (hot reload)."""
        watcher = await self._kv.watch(BUNDLE_KEY, ignore_deletes=True)
        stop_wait = asyncio.ensure_future(stopping.wait())
        try:
            while True:
                update = asyncio.ensure_future(watcher.updates(timeout=None))  # type: ignore[no-untyped-call]
                done, _ = await asyncio.wait(
                    {update, stop_wait}, return_when=asyncio.FIRST_COMPLETED
                )
                if stop_wait in done:
                    update.cancel()
                    return
                entry = update.result()
                if entry is not None and entry.value:
                    await self.offer(entry.value)
        finally:
            stop_wait.cancel()
            await watcher.stop()  # type: ignore[no-untyped-call]
