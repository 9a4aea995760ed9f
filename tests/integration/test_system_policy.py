"""The bundle `parley up` publishes for the system it runs (tools/_system_policy.py).

A person who runs one example and then another in the same directory must get the second
example's policy, not a gate that keeps refusing its flow; a bundle somebody else published
must be kept, and said to be kept at every start, until `--replace-policy` (and said to be
unusable when this system's gate does not trust its signer); and a store of its
own (`--store`, a wiped one) gets the bundle whatever another store's record says. Each is
decided against the real policy bucket of a real server, as the policy signer writes it.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from nats.aio.client import Client as NATS
from nats.js.kv import KeyValue

from actors.gate import BUNDLE_KEY
from bus import EmbeddedServer, provision
from schemas import BUNDLE_PAYLOAD_TYPE, Namespace, decode_bundle, sign_payload
from tools._local_system import key_pair
from tools._system_policy import BundleSource, publish_system_policy, read_bundle_source

COLLABORATE = read_bundle_source(Path("examples/collaborate/policy.toml"))
DELEGATE = read_bundle_source(Path("examples/delegate/policy.toml"))


def _version(signed: bytes | None) -> int:
    """The version inside a signed bundle as the bucket holds it."""
    envelope = json.loads(signed or b"{}")
    return decode_bundle(base64.b64decode(envelope["payload"])).version


class Up:
    """`parley up`'s publishing step against one store's record, as each start runs it."""

    def __init__(self, server: EmbeddedServer, ns: Namespace, store: Path) -> None:
        self.server, self.ns, self.record = server, ns, store / "parley-policy.json"
        self.keys = store.parent / "keys"

    async def start(self, source: BundleSource, *, replace: bool = False) -> str:
        return await publish_system_policy(
            self.server.url,
            self.ns,
            source,
            locked=False,
            record_file=self.record,
            replace=replace,
            keys=self.keys,
        )


async def _bucket(nc: NATS, namespace: Namespace) -> KeyValue:
    js = nc.jetstream()
    await provision(js, namespace)
    return await js.key_value(namespace.bucket("policy"))


async def test_up_publishes_replaces_its_own_and_keeps_another_bundle_until_told(
    nats_server: EmbeddedServer, nc: NATS, namespace: Namespace, tmp_path: Path
) -> None:
    kv = await _bucket(nc, namespace)
    up = Up(nats_server, namespace, tmp_path / "store")

    said = await up.start(COLLABORATE)
    assert said.startswith("published examples/collaborate/policy.toml as policy version 1")
    assert _version((await kv.get(BUNDLE_KEY)).value) == 1
    assert await up.start(COLLABORATE) == ""  # a restart is not a policy change
    assert (await kv.get(BUNDLE_KEY)).revision == 1

    said = await up.start(DELEGATE)  # another example: above the version a gate has passed
    assert "as policy version 2" in said, said
    assert _version((await kv.get(BUNDLE_KEY)).value) == 2

    own = sign_payload(
        b"a person's own bundle", BUNDLE_PAYLOAD_TYPE, key_pair(up.keys / "policy.key")
    )
    await kv.put(BUNDLE_KEY, own)  # as `parley policy publish` would, with the system's key
    for _ in range(2):  # said at every start, whichever source
        said = await up.start(COLLABORATE)
        assert said.startswith("kept the policy bundle in force"), said
        assert "--replace-policy" in said, said
    assert (await kv.get(BUNDLE_KEY)).value == own

    # A standing system's bundle, signed with a key this system's gate does not trust: not
    # "in force" (the gate refuses everything under it), and still not overwritten.
    foreign = sign_payload(b"another system's", BUNDLE_PAYLOAD_TYPE, Ed25519PrivateKey.generate())
    await kv.put(BUNDLE_KEY, foreign)
    said = await up.start(COLLABORATE)
    assert said.startswith("the policy bundle stored here is not this system's"), said
    assert "signed by no trusted key" in said and "--replace-policy" in said, said
    assert (await kv.get(BUNDLE_KEY)).value == foreign

    said = await up.start(COLLABORATE, replace=True)
    assert "as policy version 3" in said, said
    assert _version((await kv.get(BUNDLE_KEY)).value) == 3
    assert await up.start(COLLABORATE) == ""


async def test_a_store_of_its_own_gets_the_bundle_whatever_another_store_recorded(
    nats_server: EmbeddedServer, nc: NATS, namespace: Namespace, tmp_path: Path
) -> None:
    """`parley up --store elsewhere` after `parley up` in the same directory: the record of
    the first store must not make the second skip its bundle (a gate with no bundle)."""
    first = Up(nats_server, namespace, tmp_path / "first")
    await _bucket(nc, namespace)
    assert "as policy version 1" in await first.start(COLLABORATE)
    other = Namespace(f"{namespace.root}x")  # the second store's own, empty bucket
    kv = await _bucket(nc, other)
    second = Up(nats_server, other, tmp_path / "second")
    said = await second.start(COLLABORATE)
    assert "as policy version 1" in said, said
    assert _version((await kv.get(BUNDLE_KEY)).value) == 1


async def test_a_lost_or_unreadable_record_never_overwrites_and_never_crashes(
    nats_server: EmbeddedServer, nc: NATS, namespace: Namespace, tmp_path: Path
) -> None:
    kv = await _bucket(nc, namespace)
    up = Up(nats_server, namespace, tmp_path / "store")
    assert "as policy version 1" in await up.start(COLLABORATE)
    up.record.write_text('{"source_sha256": 1, "revision": "x"}')  # corrupt
    said = await up.start(DELEGATE)
    assert said.startswith("kept the policy bundle in force"), said
    up.record.unlink()  # lost
    said = await up.start(DELEGATE)
    assert said.startswith("kept the policy bundle in force"), said
    assert _version((await kv.get(BUNDLE_KEY)).value) == 1
