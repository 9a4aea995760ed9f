"""The bundle `parley up` publishes for the system it runs (tools/_system_policy.py).

A person who runs one example and then another in the same directory must get the second
example's policy, not a gate that keeps refusing its flow; a person who published a bundle of
their own must keep it, whatever `parley up` runs next. Both are decided against the real
policy bucket of a real server, as the policy signer would write it.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest
from nats.aio.client import Client as NATS

from actors.gate import BUNDLE_KEY
from bus import EmbeddedServer, provision
from schemas import Namespace, decode_bundle
from tools._system_policy import (
    PUBLISHED_RECORD,
    BundleSource,
    publish_system_policy,
    read_bundle_source,
)


def _version(signed: bytes) -> int:
    """The version inside a signed bundle as the bucket holds it."""
    envelope = json.loads(signed)
    return decode_bundle(base64.b64decode(envelope["payload"])).version


async def test_up_publishes_replaces_its_own_and_keeps_a_persons_bundle(
    nats_server: EmbeddedServer,
    nc: NATS,
    namespace: Namespace,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(tmp_path)
    js = nc.jetstream()
    await provision(js, namespace)
    kv = await js.key_value(namespace.bucket("policy"))
    keys = tmp_path / "keys"
    collaborate = read_bundle_source(Path("examples/collaborate/policy.toml"))
    delegate = read_bundle_source(Path("examples/delegate/policy.toml"))

    async def publish(source: BundleSource) -> str:
        return await publish_system_policy(
            nats_server.url, namespace, source, locked=False, keys=keys
        )

    said = await publish(collaborate)
    assert said.startswith("published examples/collaborate/policy.toml as policy version 1")
    assert _version((await kv.get(BUNDLE_KEY)).value or b"") == 1
    assert await publish(collaborate) == ""  # a restart is not a policy change
    assert (await kv.get(BUNDLE_KEY)).revision == 1

    said = await publish(delegate)  # another example: above the version a gate has passed
    assert "as policy version 2" in said, said
    assert _version((await kv.get(BUNDLE_KEY)).value or b"") == 2
    record = json.loads(PUBLISHED_RECORD.read_text())
    assert record["version"] == 2 and record["source_sha256"] == delegate.digest

    await kv.put(BUNDLE_KEY, b"a person's own bundle")  # as `parley policy publish` would
    said = await publish(collaborate)
    assert said.startswith("kept the policy bundle stored before"), said
    assert (await kv.get(BUNDLE_KEY)).value == b"a person's own bundle"
    assert await publish(collaborate) == ""  # said once, not at every start


async def test_a_store_made_afresh_beside_an_old_record_gets_the_bundle(
    nats_server: EmbeddedServer,
    nc: NATS,
    namespace: Namespace,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(tmp_path)
    js = nc.jetstream()
    await provision(js, namespace)
    kv = await js.key_value(namespace.bucket("policy"))
    PUBLISHED_RECORD.parent.mkdir()
    PUBLISHED_RECORD.write_text(json.dumps({"source_sha256": "x", "revision": 7, "version": 3}))
    source = read_bundle_source(Path("examples/collaborate/policy.toml"))
    said = await publish_system_policy(
        nats_server.url, namespace, source, locked=False, keys=tmp_path / "keys"
    )
    assert "as policy version 4" in said, said
    assert _version((await kv.get(BUNDLE_KEY)).value or b"") == 4
