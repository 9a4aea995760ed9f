"""How loudly a gate says it ignored a trusted-version record it cannot verify (bus/_bundles.py).

A record signed by a key this gate does not trust is another system's gate in the same store,
or a key rotated out (a newcomer published a bundle by hand, as docs/collaboration.md shows,
and every later `parley up` logged an error at start): a warning. A record that is no signed
bundle at all is still an error. Both are ignored, on a real server's policy bucket.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from nats.aio.client import Client as NATS

from bus import TRUSTED_VERSION_KEY, BundleStore, load_public_keys
from schemas import Namespace
from tests.support.gate import Signer, make_bundle, publish_bundle


@pytest.mark.parametrize(
    ("foreign", "level", "reason"),
    [("another key's bundle", logging.WARNING, "unknown_key"), ("garbage", logging.ERROR, "")],
)
async def test_a_foreign_floor_record_is_a_warning_unless_it_is_no_bundle(
    nc: NATS,
    namespace: Namespace,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    foreign: str,
    level: int,
    reason: str,
) -> None:
    js = nc.jetstream()
    ours, theirs = Signer.create(tmp_path, "ours"), Signer.create(tmp_path, "theirs")
    await publish_bundle(js, namespace, ours.sign(make_bundle(1)))
    kv = await js.key_value(namespace.bucket("policy"))
    record = theirs.sign(make_bundle(5)) if foreign != "garbage" else b"not a bundle"
    await kv.put(TRUSTED_VERSION_KEY, record)
    store = BundleStore(kv, load_public_keys([str(ours.pub_path)]), "test")
    with caplog.at_level(logging.WARNING, logger="parley.bus.bundles"):
        await store.load()
    assert store.bundle is not None and store.bundle.version == 1  # ignored either way
    (said,) = [
        r for r in caplog.records if r.getMessage() == "foreign trusted-version record ignored"
    ]
    assert said.levelno == level
    if reason:
        assert said.reason == reason  # type: ignore[attr-defined]  # the log record's extra
