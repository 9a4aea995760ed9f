"""Share records: signed by the owner's device, found or refused by name, revocable."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import msgspec
import pytest

from actors.relay import (
    DeviceKeys,
    ShareRefused,
    find_share,
    load_shares,
    share_path,
    write_share,
)
from schemas import ShareRecord, device_principal, new_id, parse_device_pub, utc_now

BOB, ALICE, MALLORY = DeviceKeys.generate(), DeviceKeys.generate(), DeviceKeys.generate()


def _share(**changes: object) -> ShareRecord:
    now = utc_now()
    share = ShareRecord(
        share_id=new_id(),
        agent="byte-doc",
        device=ALICE.public,
        principal=device_principal(ALICE.device_id),
        owner_device=BOB.device_id,
        created_at=now,
        expires_at=now + timedelta(days=1),
    )
    return msgspec.structs.replace(share, **changes)


def test_a_share_is_found_and_each_refusal_is_named(tmp_path: Path) -> None:
    share = _share()
    write_share(tmp_path, share, BOB.signing)
    now = utc_now()
    (loaded,) = load_shares(tmp_path, BOB.device_id)
    assert loaded == share
    assert find_share([loaded], ALICE.device_id, "byte-doc", now) == share
    with pytest.raises(ShareRefused) as missing:
        find_share([loaded], ALICE.device_id, "other-agent", now)
    assert (missing.value.reason, missing.value.share) == ("share_missing", None)
    revoked = msgspec.structs.replace(share, revoked_at=now)
    with pytest.raises(ShareRefused) as refused:
        find_share([revoked], ALICE.device_id, "byte-doc", now)
    assert (refused.value.reason, refused.value.share) == ("share_revoked", revoked)
    with pytest.raises(ShareRefused) as expired:
        find_share([share], ALICE.device_id, "byte-doc", now + timedelta(days=2))
    assert expired.value.reason == "share_expired"


def test_a_share_not_signed_by_the_owner_is_not_trusted(tmp_path: Path) -> None:
    write_share(tmp_path, _share(), MALLORY.signing)  # someone who could write the directory
    forged = _share(owner_device=MALLORY.device_id)
    write_share(tmp_path, forged, MALLORY.signing)
    assert load_shares(tmp_path, BOB.device_id) == []
    good = _share()
    path = write_share(tmp_path, good, BOB.signing)
    assert path == share_path(tmp_path, good.share_id)
    assert path.stat().st_mode & 0o077 == 0
    assert load_shares(tmp_path, BOB.device_id) == [good]


def test_device_public_ids_round_trip_and_refuse_garbage() -> None:
    assert parse_device_pub(str(ALICE.public)) == ALICE.public
    with pytest.raises(ValueError, match="public id"):
        parse_device_pub(ALICE.device_id)


def test_device_keys_are_owner_only_and_refused_when_open(tmp_path: Path) -> None:
    ALICE.save(tmp_path / "dev")
    assert DeviceKeys.load(tmp_path / "dev").public == ALICE.public
    (tmp_path / "dev" / "device.x25519").chmod(0o644)
    with pytest.raises(Exception, match="readable by others"):
        DeviceKeys.load(tmp_path / "dev")
