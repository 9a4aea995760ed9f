"""The bundle `parley up` signs and publishes for the system it runs, kept across restarts.

A system (tools/_local_system.py) names a bundle source; `parley up` signs it with the system's
own policy key and publishes it as the policy signer, whose broker grant lets it create and
update the bundle but never read it. What `parley up` published last into a store is written
down in that store (`parley-policy.json` beside the server's data: the source's digest, the
bucket revision and the version it signed), so that the next `parley up` on that store:

- publishes nothing when the same source is in force (a restart is not a policy change), and
  publishes it again into a bucket that holds no bundle;
- replaces its own earlier bundle when the source changed (another example, an edited file),
  signed with a version above the last one, since a gate refuses any version it has already
  passed; the replacement is a compare-and-set on the revision it wrote, so
- a bundle published since by anyone else (`parley policy publish`) is never overwritten: the
  compare-and-set fails, nothing is recorded, and every start says which bundle stays in
  force and how to take the place back (`parley up --replace-policy`, an unconditional put).
"""

from __future__ import annotations

import hashlib
import os
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import msgspec
from nats.js.errors import KeyNotFoundError, KeyWrongLastSequenceError
from nats.js.kv import KeyValue

from actors.gate import BUNDLE_KEY
from bus import SHIPPED_ROOT, ConfigError, connect, jetstream, load_settings, shipped
from schemas import (
    BUNDLE_PAYLOAD_TYPE,
    BundleError,
    DsseError,
    Namespace,
    decode_bundle,
    key_id,
    sign_payload,
    verify_payload,
)
from tools._local import LOCAL_BROKER, LOCAL_KEYS
from tools._local_system import key_pair
from tools.natsconf import PERSON_PREFIX, POLICY_SIGNER

__all__ = (
    "RECORD_NAME",
    "BundleSource",
    "PublishedRecord",
    "publish_system_policy",
    "read_bundle_source",
)

RECORD_NAME: Final = "parley-policy.json"
"""The file in a server's store holding what `parley up` published into it last."""


@dataclass(frozen=True, slots=True)
class BundleSource:
    """A bundle source as read from its TOML, checked as a gate would read it."""

    path: Path
    """Where it was read, for people: relative to the checkout when it is a shipped file."""
    data: dict[str, Any]
    digest: str
    tenant: str
    version: int
    people: tuple[str, ...]
    """The people it gives a profile (`person-<name>`): the console may act for them."""


def read_bundle_source(path: Path) -> BundleSource:
    """The bundle source at `path` (shipped files found from anywhere).

    Raises:
        ConfigError: the file is missing, not TOML, or not a bundle any gate could read.
    """
    found = shipped(path)
    try:
        raw = found.read_bytes()
        data = tomllib.loads(raw.decode())
    except FileNotFoundError:
        raise ConfigError(f"policy bundle source not found: {path}") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"policy bundle source {found} is not valid TOML: {exc}") from None
    try:
        bundle = decode_bundle(msgspec.json.encode(data))
    except BundleError as exc:
        raise ConfigError(f"policy bundle source {found} is not a valid bundle: {exc}") from None
    digest = hashlib.sha256(raw).hexdigest()
    shown = found.relative_to(SHIPPED_ROOT) if found.is_relative_to(SHIPPED_ROOT) else found
    people = tuple(name for name in bundle.profiles if name.startswith(PERSON_PREFIX))
    return BundleSource(shown, data, digest, bundle.tenant_id, bundle.version, people)


class PublishedRecord(msgspec.Struct, frozen=True, kw_only=True):
    """What `parley up` published last into one store."""

    source_sha256: str
    revision: int
    version: int


def _read_record(path: Path) -> PublishedRecord | None:
    """The record at `path`; None when there is none or it cannot be read (then the bucket's
    compare-and-set decides, never the record alone)."""
    try:
        return msgspec.json.decode(path.read_bytes(), type=PublishedRecord)
    except (OSError, msgspec.DecodeError):
        return None


def _write_record(path: Path, record: PublishedRecord) -> None:
    """Replace the record at once (a crash leaves the old one or the new one, never half)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(".partial")
    partial.write_bytes(msgspec.json.encode(record) + b"\n")
    os.replace(partial, path)


async def publish_system_policy(
    url: str,
    namespace: Namespace,
    source: BundleSource,
    *,
    locked: bool,
    record_file: Path,
    replace: bool = False,
    keys: Path = LOCAL_KEYS,
) -> str:
    """Make `source` the bundle in force unless another is; a line saying what was done.

    `record_file` lives in the server's store, so a second store (`--store`, a wiped one) has
    a record of its own. `replace` puts `source` in place of whatever bundle is stored.
    """
    record = _read_record(record_file)
    version = source.version if record is None else max(source.version, record.version + 1)
    if record is not None and record.source_sha256 == source.digest and not replace:
        version, last = record.version, -1  # in force already, unless the bucket is empty
    else:
        last = 0 if record is None else record.revision
    payload = msgspec.json.encode({**source.data, "version": version})
    signed = sign_payload(payload, BUNDLE_PAYLOAD_TYPE, key_pair(keys / "policy.key"))
    config = LOCAL_BROKER / "actors" / f"{POLICY_SIGNER}.toml" if locked else None
    settings = load_settings(config, nats_url=url, namespace=namespace.root)
    nc = await connect(settings, POLICY_SIGNER, reconnect_forever=False)
    try:
        kv = await jetstream(nc, settings).key_value(namespace.bucket("policy"))
        try:
            if replace:
                revision = await kv.put(BUNDLE_KEY, signed)
            else:
                revision = await _write_over(kv, signed, last)
        except KeyWrongLastSequenceError:
            if last == -1:
                return ""  # the bucket holds it: nothing to say at a restart
            try:
                stored = (await kv.get(BUNDLE_KEY)).value or b""
            except KeyNotFoundError:  # deleted (`nats kv del`): a marker, no bundle
                stored = b""
            return _kept_line(source, stored, keys)
    finally:
        await nc.close()
    published = PublishedRecord(source_sha256=source.digest, revision=revision, version=version)
    _write_record(record_file, published)
    signer = keys / "policy.key"
    return f"published {source.path} as policy version {version}, signed with {signer}"


def _kept_line(source: BundleSource, stored: bytes, keys: Path) -> str:
    """What `parley up` says when another bundle than `source` is stored: kept, if this
    system's gate trusts its signer; else that the gate will refuse everything under it (a
    standing system's bundle, signed with a key of its own, was said to be "in force" while
    every message was refused `POLICY_BUNDLE_INVALID`)."""
    public = key_pair(keys / "policy.key").public_key()
    try:
        verify_payload(stored, BUNDLE_PAYLOAD_TYPE, {key_id(public): public})
    except DsseError as exc:
        return (
            f"the policy bundle stored here is not this system's and its gate cannot use it "
            f"({exc}; this system signs with {key_id(public)}, {keys / 'policy.key'}): every "
            f"message will be refused until `parley up --replace-policy` publishes "
            f"{source.path}, or a bundle signed with that key is published"
        )
    return (
        f"kept the policy bundle in force, not {source.path}: the one this parley up "
        "published last was replaced (`parley policy publish`), or its record is "
        "lost; `parley up --replace-policy` puts it back"
    )


async def _write_over(kv: KeyValue, signed: bytes, last: int) -> int:
    """Write `signed` over revision `last` (-1: only into an empty bucket, 0: likewise), or
    into an empty bucket when `last` is gone with its store; the new revision.

    Raises:
        KeyWrongLastSequenceError: another bundle than the one at `last` is stored.
    """
    try:
        return await kv.update(BUNDLE_KEY, signed, last=max(last, 0))
    except KeyWrongLastSequenceError:
        if last <= 0:
            raise
        return await kv.update(BUNDLE_KEY, signed, last=0)
