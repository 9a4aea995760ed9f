"""The bundle `parley up` signs and publishes for the system it runs, kept across restarts.

A system (tools/_local_system.py) names a bundle source; `parley up` signs it with the system's
own policy key and publishes it as the policy signer, whose broker grant lets it create and
update the bundle but never read it. What `parley up` published last is written down in
`.parley/policy.json` (the source's digest, the bucket revision and the version it signed), so
that the next `parley up`:

- publishes nothing when the same source is in force (a restart is not a policy change);
- replaces its own earlier bundle when the source changed (another example, an edited file),
  signed with a version above the last one, since a gate refuses any version it has already
  passed; the replacement is a compare-and-set on the revision it wrote, so
- a bundle a person published themselves since (`parley policy publish`) is never overwritten:
  the compare-and-set fails and `parley up` says which bundle stays in force.
"""

from __future__ import annotations

import hashlib
import json
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import msgspec
from nats.js.errors import KeyWrongLastSequenceError
from nats.js.kv import KeyValue

from actors.gate import BUNDLE_KEY
from bus import SHIPPED_ROOT, ConfigError, connect, jetstream, load_settings, shipped
from schemas import BUNDLE_PAYLOAD_TYPE, BundleError, Namespace, decode_bundle, sign_payload
from tools._local import LOCAL_BROKER, LOCAL_DIR, LOCAL_KEYS
from tools._local_system import key_pair
from tools.natsconf import POLICY_SIGNER

__all__ = ("PUBLISHED_RECORD", "BundleSource", "publish_system_policy", "read_bundle_source")

PERSON_PREFIX: Final = "person-"
"""A profile for a person at the console (actors/console `principal_of`)."""
PUBLISHED_RECORD: Final = LOCAL_DIR / "policy.json"
"""What `parley up` published last: {"source_sha256", "revision", "version"}."""


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


def _read_record() -> dict[str, Any] | None:
    try:
        record = json.loads(PUBLISHED_RECORD.read_text())
    except (FileNotFoundError, ValueError):
        return None
    return record if isinstance(record, dict) else None


def _write_record(source: BundleSource, revision: int, version: int) -> None:
    PUBLISHED_RECORD.parent.mkdir(parents=True, exist_ok=True)
    record = {"source_sha256": source.digest, "revision": revision, "version": version}
    PUBLISHED_RECORD.write_text(json.dumps(record) + "\n")


async def _replace(kv: KeyValue, signed: bytes, last: int) -> int:
    """Write `signed` over revision `last`, or as the first bundle when the store holds none
    (a store made afresh beside an old record); the new revision."""
    try:
        return await kv.update(BUNDLE_KEY, signed, last=last)
    except KeyWrongLastSequenceError:
        if last == 0:
            raise
        return await kv.update(BUNDLE_KEY, signed, last=0)


async def publish_system_policy(
    url: str, namespace: Namespace, source: BundleSource, *, locked: bool, keys: Path = LOCAL_KEYS
) -> str:
    """Make `source` the bundle in force unless a person's own is; a line saying what was done."""
    record = _read_record()
    if record is not None and record.get("source_sha256") == source.digest:
        return ""  # what this source gave is in force, or a person's own bundle replaced it
    last = int(record.get("revision", 0)) if record is not None else 0
    version = source.version
    if record is not None:
        version = max(version, int(record.get("version", 0)) + 1)
    payload = msgspec.json.encode({**source.data, "version": version})
    signed = sign_payload(payload, BUNDLE_PAYLOAD_TYPE, key_pair(keys / "policy.key"))
    config = LOCAL_BROKER / "actors" / f"{POLICY_SIGNER}.toml" if locked else None
    settings = load_settings(config, nats_url=url, namespace=namespace.root)
    nc = await connect(settings, POLICY_SIGNER, reconnect_forever=False)
    try:
        kv = await jetstream(nc, settings).key_value(namespace.bucket("policy"))
        try:
            revision = await _replace(kv, signed, last)
        except KeyWrongLastSequenceError:
            _write_record(source, last, version - 1)  # stop asking: theirs stays
            return (
                f"kept the policy bundle stored before (not {source.path}): one was published "
                "with `parley policy publish`; publish again to change it"
            )
    finally:
        await nc.close()
    _write_record(source, revision, version)
    signer = keys / "policy.key"
    return f"published {source.path} as policy version {version}, signed with {signer}"
