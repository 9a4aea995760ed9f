"""The artifact store: files the tool runtime keeps for a session, in a NATS Object Store.

The bucket is the namespace's object store (bus/_streams.py `ARTIFACTS`, `OBJ_<root>_artifacts`,
made by provisioning, bounded by the quotas' `bucket_bytes.artifacts` and refusing new objects
when full). Objects are laid out as nats-py's and the nats CLI's object store lays them out
(chunks on `$O.<bucket>.C.<nuid>`, metadata rolled up on `$O.<bucket>.M.<base64 key>`), so
`nats object get` reads them too; they are keyed `<tenant>/<session>/<sha256>` and named by
artifact URIs (actors/tools/_artifact_uris.py).

Written and read here with plain publishes and direct gets rather than nats-py's `put` and
`get`: its `put` purges the stream to clean up after a failure or an overwrite (a stream
administration no actor is granted: it could empty the bucket), and its `get` reads through an
ordered push consumer, which a reader in an account of its own cannot receive and whose
creation is in effect a grant to write (tools/natsconf/_operator.py). Here a failed write
deletes the chunks it published, message by message, and a read is direct gets only.

Every read checks what it got against the URI: the chunks' count, the bytes' size and SHA-256.
Every new object is charged to the person and the agent it is stored for, within their shares
of the store (bus/_shares.py), before its first chunk is published.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import secrets
from collections.abc import AsyncIterable, AsyncIterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from nats.js import JetStreamContext
from nats.js.api import ObjectInfo, ObjectMetaOptions
from nats.js.errors import APIError, NotFoundError

from actors.tools._artifact_uris import ArtifactUri, BadArtifactUri, session_key
from bus import ARTIFACTS, Charge, Payer, ShareExceeded, Shares, read_history
from schemas import Namespace

__all__ = (
    "CHUNK_BYTES",
    "ArtifactCorrupt",
    "ArtifactNotFound",
    "ArtifactShareExceeded",
    "ArtifactStore",
    "ArtifactStoreError",
    "artifacts_bucket",
    "stored_bytes",
)

CHUNK_BYTES = 128 * 1024
"""Bytes per stored chunk (nats-py's default), unless the message size limit is smaller."""
_OBJECT_OVERHEAD = 1024
"""About what an object's metadata record takes in the stream."""
_CHUNK_OVERHEAD = 128
"""About what a chunk's subject, headers and index take beside its bytes."""


def stored_bytes(size: int, chunk_bytes: int) -> int:
    """What an object of `size` bytes is charged: its bytes and what storing it costs
    besides (its metadata record, each chunk's subject and headers), so that many tiny
    objects cannot fill the store under every share."""
    chunks = -(-size // chunk_bytes)
    return size + _OBJECT_OVERHEAD + chunks * _CHUNK_OVERHEAD


class _Attempt:
    """What one write may have left in the store: its charge is given back only when
    nothing is (every chunk it published deleted, none in flight, no metadata)."""

    __slots__ = ("nothing_left",)

    def __init__(self) -> None:
        self.nothing_left = False


class ArtifactStoreError(RuntimeError):
    """The store refused or failed a write (full, unreachable), or a read went wrong."""


class ArtifactNotFound(ArtifactStoreError):
    """No artifact is stored under that URI's key."""


class ArtifactShareExceeded(ArtifactStoreError):
    """The object would pass the share of the person or the agent it is stored for."""


class ArtifactCorrupt(ArtifactStoreError):
    """What is stored is not what the URI names: another size, digest or chunk count."""


def artifacts_bucket(ns: Namespace) -> str:
    """The namespace's object store bucket (its stream is `OBJ_<bucket>`)."""
    return ns.bucket(ARTIFACTS)


@dataclass(frozen=True, slots=True)
class _Meta:
    info: ObjectInfo
    sha256: str


class ArtifactStore:
    """One tenant's artifacts in its namespace's object store, on one JetStream context."""

    def __init__(
        self,
        js: JetStreamContext,
        ns: Namespace,
        tenant: str,
        max_payload: int = CHUNK_BYTES,
        shares: Shares | None = None,
    ) -> None:
        """`shares`: what each person and agent may keep stored (None: a reader's store,
        or a test's, that charges nobody)."""
        self._js = js
        self._shares = shares
        self.kept_s = 0.0
        """How long the store keeps an object (its age limit; 0: unknown or for ever), as
        `check` read it."""
        self.tenant = tenant
        self.chunk_bytes = min(CHUNK_BYTES, max_payload)
        """Bytes per chunk a write publishes: no chunk over the streams' message limit."""
        self.bucket = artifacts_bucket(ns)
        self.stream = f"OBJ_{self.bucket}"

    async def check(self) -> float:
        """That the bucket exists (provisioning makes it); how long it keeps an object, in
        seconds (0: for ever).

        Raises:
            ArtifactStoreError: it does not.
        """
        try:
            info = await self._js.stream_info(self.stream)
        except NotFoundError:
            raise ArtifactStoreError(
                f"no artifact store {self.bucket}: run `parley provision`"
            ) from None
        self.kept_s = info.config.max_age or 0.0
        return self.kept_s

    def uri(self, session_id: str, data: bytes, name: str = "") -> ArtifactUri:
        """The URI `data` is stored under for `session_id`."""
        digest = hashlib.sha256(data).hexdigest()
        return ArtifactUri(self.tenant, session_key(session_id), digest, len(data), name)

    async def put_bytes(
        self,
        session_id: str,
        data: bytes,
        *,
        name: str,
        step_id: str,
        payers: Sequence[Payer] = (),
    ) -> str:
        """Store `data` for the session, charged to `payers`; return its URI."""
        uri = self.uri(session_id, data, name)
        await self.put(uri, self._slices(data), step_id=step_id, payers=payers)
        return str(uri)

    async def _slices(self, data: bytes) -> AsyncIterator[bytes]:
        for start in range(0, len(data), self.chunk_bytes):
            yield data[start : start + self.chunk_bytes]

    async def put(
        self,
        uri: ArtifactUri,
        chunks: AsyncIterable[bytes],
        *,
        step_id: str,
        payers: Sequence[Payer] = (),
    ) -> None:
        """Store the bytes `chunks` yield under `uri`, which must name them (digest and size),
        charged to `payers` (the person and the agent it is stored for).

        Content already stored under the key is kept, not written again nor charged again.

        Raises:
            ArtifactShareExceeded: it would pass a payer's share; nothing was stored.
            ArtifactCorrupt: the chunks were not what `uri` names (a file that changed while it
                was stored); nothing is left stored.
            ArtifactStoreError: the store refused a chunk (full) or is unreachable.
        """
        found = await self._meta(uri)
        if found is not None and found.sha256 == uri.sha256 and found.info.size == uri.size:
            if not self._expiring(found):
                return
        charge = await self._charge(uri, payers)
        attempt = _Attempt()
        try:
            await self._write(uri, chunks, step_id, attempt)
        finally:
            if attempt.nothing_left:  # else its bytes count until they expire
                await asyncio.shield(self._give_back(charge))

    def _expiring(self, found: _Meta) -> bool:
        """Whether a stored object has lived half the store's age limit: a URI handed out
        now must not name bytes about to go, so it is stored again (a new object)."""
        if not self.kept_s:
            return False
        try:
            stored = datetime.fromisoformat(found.info.mtime or "")
        except ValueError:
            return True
        return (datetime.now(UTC) - stored).total_seconds() > self.kept_s / 2

    async def _charge(self, uri: ArtifactUri, payers: Sequence[Payer]) -> Charge | None:
        if self._shares is None:
            return None
        if not payers:  # every write the runtime makes is some person's and some agent's
            raise ArtifactStoreError(f"{uri.key} is stored for nobody: no share to charge")
        try:
            return await self._shares.charge(payers, stored_bytes(uri.size, self.chunk_bytes))
        except ShareExceeded as exc:
            raise ArtifactShareExceeded(str(exc)) from None
        except Exception as exc:
            raise ArtifactStoreError(f"the artifact shares could not be counted: {exc!r}") from exc

    async def _give_back(self, charge: Charge | None) -> None:
        if self._shares is None or charge is None:
            return
        try:
            await self._shares.give_back(charge)
        except Exception:  # noqa: S110 - a charge kept overstates a share until it expires
            pass

    async def _write(
        self,
        uri: ArtifactUri,
        chunks: AsyncIterable[bytes],
        step_id: str,
        attempt: _Attempt,
    ) -> None:
        """Publish the chunks and the metadata, saying in `attempt` whether anything of them
        may be left in the store. Another replica that stored the same key at the same time
        wins: its object stands, ours is deleted."""
        nuid = secrets.token_hex(11)
        subject = f"$O.{self.bucket}.C.{nuid}"
        stored: list[int] = []
        digest, size = hashlib.sha256(), 0
        in_flight = False  # a publish sent whose outcome we do not know: it may be stored
        try:
            async for chunk in chunks:
                digest.update(chunk)
                size += len(chunk)
                in_flight = True
                ack = await self._js.publish(subject, chunk)
                in_flight = False
                stored.append(ack.seq)
            if digest.hexdigest() != uri.sha256 or size != uri.size:
                raise ArtifactCorrupt(
                    f"{uri.name or uri.key} changed while it was stored "
                    f"({size} bytes, sha256 {digest.hexdigest()}): not stored"
                )
            in_flight = True  # from here on the object may be whole: its charge stays
            await self._publish_meta(uri, nuid, len(stored), step_id)
        except BaseException as exc:  # cancelled too: what it published is deleted
            if isinstance(exc, APIError):
                in_flight = False  # the server refused it (full): not stored
            cleaned = await asyncio.shield(self._forget(stored))
            attempt.nothing_left = cleaned and not in_flight
            if isinstance(exc, Exception) and not isinstance(exc, ArtifactStoreError):
                raise ArtifactStoreError(f"the artifact store refused {uri.key}: {exc!r}") from exc
            raise
        try:  # another replica may have stored the same key at the same time
            winner = await self._meta(uri)
        except Exception:  # ours or theirs, the object stands: its charge stays
            return
        if winner is not None and winner.info.nuid != nuid:
            attempt.nothing_left = await self._forget(stored)

    async def _publish_meta(self, uri: ArtifactUri, nuid: str, chunks: int, step_id: str) -> None:
        info = ObjectInfo(
            name=uri.key,
            bucket=self.bucket,
            nuid=nuid,
            size=uri.size,
            chunks=chunks,
            mtime=datetime.now(UTC).isoformat(),
            digest="SHA-256=" + base64.urlsafe_b64encode(bytes.fromhex(uri.sha256)).decode(),
            description=uri.name,
            headers={"Parley-Step": [step_id]} if step_id else None,
            options=ObjectMetaOptions(max_chunk_size=self.chunk_bytes),
        )
        await self._js.publish(
            self._meta_subject(uri.key),
            json.dumps(info.as_dict()).encode(),
            headers={"Nats-Rollup": "sub"},
        )

    async def _forget(self, sequences: list[int]) -> bool:
        """Delete chunks a failed write left (best effort: each is one message); whether
        none is left."""
        cleaned = True
        for seq in sequences:
            try:
                await self._js.delete_msg(self.stream, seq)
            except NotFoundError:
                continue  # gone already
            except Exception:  # a chunk left behind costs bytes (counted), never correctness
                cleaned = False
        return cleaned

    def _meta_subject(self, key: str) -> str:
        encoded = base64.urlsafe_b64encode(key.encode()).decode()
        return f"$O.{self.bucket}.M.{encoded}"

    async def _meta(self, uri: ArtifactUri) -> _Meta | None:
        try:
            message = await self._js.get_msg(
                self.stream, subject=self._meta_subject(uri.key), direct=True
            )
        except NotFoundError:
            return None
        return _decode_meta(message.data or b"")

    async def get(self, uri: ArtifactUri) -> bytes:
        """The bytes `uri` names, checked against it.

        Raises:
            ArtifactNotFound: nothing stored under its key, or what is left of an object
                that is expiring.
            ArtifactCorrupt: what is stored is not what it names.
        """
        found = await self._meta(uri)
        if found is None or found.info.deleted:
            raise ArtifactNotFound(f"no artifact {uri.key} in {self.bucket}")
        if found.sha256 != uri.sha256 or found.info.size != uri.size:
            raise ArtifactCorrupt(f"{uri.key} is stored with another digest or size")
        subject = f"$O.{self.bucket}.C.{found.info.nuid}"
        chunks = [m.data async for m in read_history(self._js, self.stream, subject=subject)]
        data = b"".join(chunks)
        if len(chunks) < (found.info.chunks or 0):  # the oldest messages go first: expiring
            raise ArtifactNotFound(
                f"{uri.key}: {len(chunks)} of its {found.info.chunks} chunks are left in "
                f"{self.bucket}: it expired (retention.artifacts_s) or was deleted"
            )
        if len(chunks) != (found.info.chunks or 0) or len(data) != uri.size:
            raise ArtifactCorrupt(f"{uri.key}: {len(chunks)} chunks of {len(data)} bytes stored")
        if hashlib.sha256(data).hexdigest() != uri.sha256:
            raise ArtifactCorrupt(f"{uri.key}: the stored bytes' SHA-256 is not the URI's")
        return data

    async def list(self, session_id: str) -> list[ArtifactUri]:
        """The artifacts stored for a session, oldest first: of this store's tenant, or of
        every tenant when it is "" (a reader's)."""
        session = session_key(session_id)
        found = []
        async for message in read_history(self._js, self.stream, subject=f"$O.{self.bucket}.M.>"):
            meta = _decode_meta(message.data)
            if meta is None or meta.info.deleted:
                continue
            tenant, _, rest = meta.info.name.partition("/")
            if rest.partition("/")[0] != session or (self.tenant and tenant != self.tenant):
                continue
            try:
                uri = ArtifactUri(
                    tenant, session, meta.sha256, meta.info.size or 0, meta.info.description or ""
                )
            except BadArtifactUri:
                continue
            found.append(uri)
        return found


def _decode_meta(data: bytes) -> _Meta | None:
    """An object's metadata and its SHA-256 in hex; None for what is not one."""
    try:
        info = ObjectInfo.from_response(json.loads(data))
        digest = (info.digest or "").removeprefix("SHA-256=")
        sha256 = base64.urlsafe_b64decode(digest).hex()
    except (ValueError, TypeError, KeyError):
        return None
    return _Meta(info, sha256)
