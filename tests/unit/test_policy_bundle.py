"""Signed policy bundles: what a gate must refuse, and why, before it reads a single field."""

from __future__ import annotations

import base64
import json
from datetime import UTC, datetime, timedelta
from typing import Any

import msgspec
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from schemas import (
    BUNDLE_PAYLOAD_TYPE,
    BundleError,
    ErrorCode,
    ProfilePolicy,
    key_id,
    pae,
    sign_payload,
    verify_bundle,
)

NOW = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)
SIGNER = Ed25519PrivateKey.generate()
TRUSTED: dict[str, Ed25519PublicKey] = {key_id(SIGNER.public_key()): SIGNER.public_key()}


def bundle(**changes: Any) -> bytes:
    fields: dict[str, Any] = {
        "schema_version": "1.0",
        "version": 3,
        "tenant_id": "acme",
        "expires_at": (NOW + timedelta(days=1)).isoformat(),
        "profiles": {"gpt": {"allowed_targets": ["router"]}},
    }
    fields.update(changes)
    return json.dumps(fields).encode()


def signed(payload: bytes, key: Ed25519PrivateKey = SIGNER) -> bytes:
    return sign_payload(payload, BUNDLE_PAYLOAD_TYPE, key)


def refused(data: bytes, **kwargs: Any) -> BundleError:
    with pytest.raises(BundleError) as caught:
        verify_bundle(data, TRUSTED, now=NOW, **kwargs)
    return caught.value


def test_a_good_bundle_verifies_with_seed_defaults() -> None:
    result, signer = verify_bundle(signed(bundle()), TRUSTED, now=NOW, tenant="acme", min_version=3)
    assert signer == key_id(SIGNER.public_key())
    assert result.version == 3
    gpt = result.profiles["gpt"]
    assert gpt == ProfilePolicy(allowed_targets=("router",))
    # Every default is the seeds' and denies.
    assert (gpt.allow_shared_agent_calls, gpt.max_concurrent_shared_calls, gpt.max_hop_count) == (
        False,
        3,
        2,
    )
    assert (gpt.max_depth, gpt.max_fan_out, gpt.deadline_ms, gpt.max_tokens) == (2, 3, 15000, 1200)
    assert (gpt.allow_sub_agent_calls, gpt.max_sub_agent_depth) == (False, 5)


def test_an_edited_payload_byte_breaks_the_signature() -> None:
    envelope = json.loads(signed(bundle()))
    payload = bytearray(base64.b64decode(envelope["payload"]))
    payload[payload.index(b"3")] = ord("9")  # version 3 -> 9
    envelope["payload"] = base64.b64encode(bytes(payload)).decode()
    error = refused(json.dumps(envelope).encode())
    assert (error.code, error.reason) == (ErrorCode.POLICY_BUNDLE_INVALID, "bad_signature")


def test_an_unknown_key_is_refused() -> None:
    error = refused(signed(bundle(), Ed25519PrivateKey.generate()))
    assert error.reason == "unknown_key"


def test_a_trusted_key_id_on_a_foreign_signature_is_refused() -> None:
    envelope = json.loads(signed(bundle(), Ed25519PrivateKey.generate()))
    envelope["signatures"][0]["keyid"] = key_id(SIGNER.public_key())
    assert refused(json.dumps(envelope).encode()).reason == "bad_signature"


def test_the_payload_type_is_bound_into_the_signature() -> None:
    envelope = json.loads(sign_payload(bundle(), "application/json", SIGNER))
    assert refused(json.dumps(envelope).encode()).reason == "wrong_type"
    envelope["payloadType"] = BUNDLE_PAYLOAD_TYPE  # relabelled: PAE differs, signature fails
    assert refused(json.dumps(envelope).encode()).reason == "bad_signature"


def test_pae_is_dsse_v1() -> None:
    assert pae("t", b"ab") == b"DSSEv1 1 t 2 ab"


@pytest.mark.parametrize(
    ("payload", "code", "reason"),
    [
        (bundle(expires_at=NOW.isoformat()), ErrorCode.POLICY_EXPIRED, "expired"),
        (bundle(schema_version="2.0"), ErrorCode.POLICY_BUNDLE_INVALID, "schema_version"),
        (bundle(tenant_id="other"), ErrorCode.POLICY_BUNDLE_INVALID, "tenant"),
        (bundle(version=2), ErrorCode.POLICY_BUNDLE_INVALID, "rollback"),
        (bundle(unknown_control=True), ErrorCode.POLICY_BUNDLE_INVALID, "invalid"),
        (bundle(version=0), ErrorCode.POLICY_BUNDLE_INVALID, "invalid"),
        (b"{not json", ErrorCode.POLICY_BUNDLE_INVALID, "malformed"),
    ],
)
def test_refusals(payload: bytes, code: ErrorCode, reason: str) -> None:
    error = refused(signed(payload), tenant="acme", min_version=3)
    assert (error.code, error.reason) == (code, reason)
    assert str(error)


def test_garbage_envelopes_are_malformed() -> None:
    for data in (
        b"",
        b"[]",
        b'{"payloadType":"x"}',
        b'{"payloadType":"x","payload":"***","signatures":[]}',
    ):
        assert refused(data).reason == "malformed"


def test_the_signed_bytes_are_what_is_decoded() -> None:
    """Duplicate keys are decided by the signed bytes, never by a re-serialisation."""
    payload = bundle()[:-1] + b', "version": 7}'
    result, _ = verify_bundle(signed(payload), TRUSTED, now=NOW)
    assert result.version == 7
    assert msgspec.json.decode(payload)["version"] == 7
