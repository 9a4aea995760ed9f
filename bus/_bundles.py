"""The policy bundle in force: loaded from KV, verified, hot-reloaded, never rolled back.

The gate enforces it, and the tool runtime verifies it again for itself (a reader that
honours the floor without raising it: `keeps_floor=False`).

The signer writes a DSSE-signed bundle under the key `bundle` of the policy bucket
(`parley policy publish`); the bucket keeps that key's history. The gate verifies every value
before decoding it (signature over the exact bytes, key id, payload type, schema version,
expiry, tenant) and refuses any version lower than the floor: the highest version it ever
trusted. A bundle that fails is logged and ignored: the last good one stays in force. When the
last good one expires the gate denies everything (`POLICY_EXPIRED`, decided in
actors/gate/_decide.py).

On start the gate walks the history of `bundle` newest first and takes the first revision that
verifies and is not below the floor, logging which one and why each newer one was refused: a
bad newest bundle costs that bundle, not the whole policy.

The floor lives under `trusted.version`, and its value is the signed bundle that set it, not a
bare number: the gate verifies it like any bundle (except for expiry: an expired bundle still
proves its version was trusted), so only the signer's data can raise it, and a foreign or
corrupted value (anyone who can write the key can write anything) is detected, logged and
ignored in favour of the older revisions of the key that do verify. It is never decoded with a
bare `int()`: no value read from KV can crash the gate or lock it out for good. A foreign
newest value is overwritten with the proof it hid, so it does not outlive the next write.

Both histories are read as the bucket's leader has them (bus/_kv_history.py): on a cluster a
plain read can come from a replica one write behind, and would miss the bundle just published.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import logging
from dataclasses import dataclass
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from nats.errors import Error as NatsError
from nats.js.errors import KeyWrongLastSequenceError
from nats.js.kv import KeyValue

from bus._elections import through_elections
from bus._keys import load_public_key
from bus._kv_history import leader_history
from schemas import (
    BUNDLE_PAYLOAD_TYPE,
    BundleError,
    DsseError,
    ErrorCode,
    PolicyBundle,
    decode_bundle,
    key_id,
    utc_now,
    verify_bundle,
    verify_payload,
)

__all__ = ("BUNDLE_KEY", "TRUSTED_VERSION_KEY", "BundleStore", "load_public_keys")

log = logging.getLogger("parley.bus.bundles")

BUNDLE_KEY = "bundle"
TRUSTED_VERSION_KEY = "trusted.version"

_PUT = (None, "PUT")
"""KV operations that carry a value (a delete or purge marker carries none)."""
_PROBLEM_CHARS = 600


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


@dataclass(frozen=True, slots=True)
class _Stored:
    """One revision of a key, with a value."""

    revision: int
    value: bytes


@dataclass(frozen=True, slots=True)
class _Floor:
    """What the history of `trusted.version` proves."""

    version: int
    """The highest version a verified record proves (0: none does)."""
    proof: bytes
    """The signed bundle that proves it (empty when none)."""
    revision: int
    """The key's newest revision, for compare-and-set (0: never written)."""
    newest_foreign: bool
    """The newest value does not verify: it hides the proof and is to be overwritten."""


class BundleStore:
    """The bundle in force, for one gate process."""

    def __init__(
        self,
        kv: KeyValue,
        trusted: dict[str, Ed25519PublicKey],
        tenant: str,
        *,
        keeps_floor: bool = True,
    ) -> None:
        """`keeps_floor`: raise the stored floor when a newer bundle is trusted (the gates);
        False for a reader that only honours it (the tool runtime, which may not write it)."""
        self._kv = kv
        self._keeps_floor = keeps_floor
        self._trusted = trusted
        self._tenant = tenant
        self.bundle: PolicyBundle | None = None
        self.bundle_hash = ""
        self.problem = "no policy bundle has been published yet"
        self.refused = 0
        self._seen_revision = 0
        """The newest revision of `bundle` that `load` examined (the watch skips up to it)."""
        self._reported: set[int] = set()
        """Revisions of `trusted.version` already logged as foreign (logged once each)."""
        self.changed = asyncio.Event()
        """Set whenever a bundle is accepted or refused (tests and tools wait on it)."""

    async def _history(self, key: str) -> tuple[list[_Stored], int]:
        """The revisions of `key` that hold a value, newest first, and the key's newest
        revision (a delete marker's too: compare-and-set is against it; 0 if none)."""
        entries = await through_elections(
            lambda: leader_history(self._kv, key), f"the history of policy key {key!r}"
        )
        if not entries:
            return [], 0
        stored = [
            _Stored(int(entry.revision or 0), entry.value)
            for entry in reversed(entries)
            if entry.operation in _PUT and entry.value
        ]
        return stored, int(entries[-1].revision or 0)

    def _proven(self, signed: bytes) -> PolicyBundle:
        """The bundle a floor record holds, verified but for expiry (it proves a version).

        Raises:
            BundleError: the value is not a bundle a trusted signer signed for this tenant.
        """
        try:
            payload, _ = verify_payload(signed, BUNDLE_PAYLOAD_TYPE, self._trusted)
        except DsseError as exc:
            raise BundleError(ErrorCode.POLICY_BUNDLE_INVALID, exc.reason, str(exc)) from None
        bundle = decode_bundle(payload)
        if bundle.tenant_id != self._tenant:
            raise BundleError(
                ErrorCode.POLICY_BUNDLE_INVALID,
                "tenant",
                f"bundle is for tenant {bundle.tenant_id!r}, this gate serves {self._tenant!r}",
            )
        return bundle

    async def _floor(self) -> _Floor:
        """Read the floor: the highest version any verified revision of its key proves."""
        stored, revision = await self._history(TRUSTED_VERSION_KEY)
        version, proof, newest_foreign = 0, b"", False
        for index, record in enumerate(stored):
            try:
                proven = self._proven(record.value)
            except BundleError as exc:
                newest_foreign = newest_foreign or index == 0
                if record.revision not in self._reported:
                    self._reported.add(record.revision)
                    # Signed by a key this gate does not trust: another system's gate in the
                    # same store, or a key since rotated out (a bundle published by hand,
                    # docs/collaboration.md), said at every start as an error (a newcomer's
                    # walk). A record that is no signed bundle at all stays an error.
                    level = logging.WARNING if exc.reason == "unknown_key" else logging.ERROR
                    log.log(
                        level,
                        "foreign trusted-version record ignored",
                        extra={
                            "revision": record.revision,
                            "reason": exc.reason,
                            "error": str(exc),
                            "bytes": len(record.value),
                        },
                    )
                continue
            if proven.version > version:
                version, proof = proven.version, record.value
        return _Floor(version, proof, revision, newest_foreign)

    async def _persist_floor(self, signed: bytes, version: int) -> None:
        """Raise the floor to `version`, proved by `signed` (never lower it), and overwrite a
        foreign newest value with the proof it hid.

        A floor that cannot be written is logged, not fatal: the bundle in force still holds
        in memory and the bundle history still proves it.
        """
        if not self._keeps_floor:
            return
        for _ in range(10):
            floor = await self._floor()
            if floor.version >= version and not floor.newest_foreign:
                return
            value = signed if version >= floor.version else floor.proof
            try:
                write = functools.partial(self._write_floor, value, floor.revision)
                await through_elections(write, "the trusted policy version")
                return
            except KeyWrongLastSequenceError:
                # Another replica (or a foreign writer) wrote meanwhile, or this write was
                # stored and its answer lost in an election: read again.
                continue
            except NatsError as exc:
                log.error("could not persist the trusted policy version", extra={"error": str(exc)})
                return
        log.error("could not persist the trusted policy version: ten compare-and-set races lost")

    async def _write_floor(self, value: bytes, revision: int) -> None:
        """Compare-and-set `trusted.version` on `revision` (0: create it)."""
        if revision:
            await self._kv.update(TRUSTED_VERSION_KEY, value, revision)
        else:
            await self._kv.create(TRUSTED_VERSION_KEY, value)

    async def load(self) -> None:
        """Apply the newest stored bundle that verifies and is not a rollback.

        Each newer revision refused on the way is logged with its reason, and so is the one
        taken; when none can be trusted, `problem` says why, revision by revision.
        """
        stored, _ = await self._history(BUNDLE_KEY)
        floor = await self._floor()
        if stored:
            self._seen_revision = stored[0].revision
        candidates = [(f"{BUNDLE_KEY}@{s.revision}", s.value) for s in stored]
        if floor.proof:  # the floor's own bundle, should the history of `bundle` be gone
            candidates.append((f"{TRUSTED_VERSION_KEY}@{floor.version}", floor.proof))
        refusals: list[str] = []
        tried: set[bytes] = set()
        for where, signed in candidates:
            digest = hashlib.sha256(signed).digest()
            if digest in tried:
                continue
            tried.add(digest)
            refusal = await self._apply(signed, floor.version, where, refused_newer=refusals)
            if refusal is None:
                return
            refusals.append(f"{where}: {refusal}")
        if refusals:
            self.problem = (f"no stored policy bundle can be trusted ({'; '.join(refusals)})")[
                :_PROBLEM_CHARS
            ]
            log.error("no policy bundle in force", extra={"refused": refusals})

    async def offer(self, signed: bytes, where: str = "") -> bool:
        """Verify `signed` and make it the bundle in force; False (and logged) if refused."""
        digest = hashlib.sha256(signed).hexdigest()[:16]
        if digest == self.bundle_hash:
            return True
        floor = (await self._floor()).version
        return await self._apply(signed, floor, where) is None

    async def _apply(
        self, signed: bytes, floor: int, where: str, refused_newer: list[str] | None = None
    ) -> str | None:
        """Verify `signed` against `floor` and put it in force: None, or why it was refused."""
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
                extra={"code": str(exc.code), "reason": exc.reason, "error": str(exc), "at": where},
            )
            self.changed.set()
            return f"{exc.reason}: {exc}"
        await self._persist_floor(signed, bundle.version)
        self.bundle, self.bundle_hash = bundle, hashlib.sha256(signed).hexdigest()[:16]
        self.problem = ""
        extra: dict[str, object] = {
            "version": bundle.version,
            "signer": signer,
            "hash": self.bundle_hash,
            "at": where,
        }
        if refused_newer:
            extra["refused_newer"] = refused_newer
        log.info("policy bundle in force", extra=extra)
        self.changed.set()
        return None

    async def watch(self, stopping: asyncio.Event) -> None:
        """Apply every bundle the signer publishes until `stopping` is set (hot reload).

        Opening the watch is a JetStream request (a consumer's creation, then its info) that
        goes unanswered while the policy bucket elects a leader: it is asked again through
        the election (bus/_elections.py) rather than let the gate exit. The watch replays the
        key's history and skips what `load` (or the watch) already examined, so a bundle
        published between `load` and the watch, or while the watch was being opened, is
        offered like any other, in the order it was published. Once open, nats-py's ordered
        consumer re-creates itself from the last revision it delivered after any outage.
        """
        try:
            watcher = await through_elections(
                self._open_watch, "the policy bundle's watch", stop=stopping
            )
        except Exception:
            if stopping.is_set():
                return
            raise
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
                revision = int(entry.revision or 0) if entry is not None else 0
                if entry is not None and entry.value and revision > self._seen_revision:
                    self._seen_revision = revision
                    await self.offer(entry.value, f"{BUNDLE_KEY}@{revision}")
        finally:
            stop_wait.cancel()
            await watcher.stop()  # type: ignore[no-untyped-call]

    async def _open_watch(self) -> KeyValue.KeyWatcher:
        """A watch of `bundle` from its oldest kept revision (the caller skips those seen)."""
        return await self._kv.watch(BUNDLE_KEY, include_history=True, ignore_deletes=True)
