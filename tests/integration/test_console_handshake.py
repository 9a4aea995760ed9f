"""Seed 002 §6's handshake at CreateSession (actors/console/_handshake.py), over the policy
bucket of a real nats-server: what the bundle in force says of a session, and no session
without a bundle a trusted signer signed, or once it expired.

Through the console's HTTP API under least privilege: tests/integration/test_console_rpc.py.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import msgspec
import pytest
from nats.aio.client import Client as NATS

from actors.console._handshake import Handshake
from actors.console._rpc_errors import RpcError
from bus import TRUSTED_VERSION_KEY, BundleReader, load_public_keys
from schemas import ApprovalRule, Capability, Namespace, utc_now
from tests.support.gate import Signer, make_bundle, publish_bundle


async def _handshake(
    nc: NATS, namespace: Namespace, signer: Signer, **clock: timedelta
) -> Handshake:
    kv = await nc.jetstream().key_value(namespace.bucket("policy"))
    reader = BundleReader(kv, load_public_keys([str(signer.pub_path)]), "test")
    later = clock.get("later", timedelta())
    return Handshake(reader, {"patchPreview": True}, clock=lambda: utc_now() + later)


async def test_the_handshake_says_what_the_bundle_in_force_says_of_the_session(
    nc: NATS, namespace: Namespace, tmp_path: Path
) -> None:
    signer = Signer.create(tmp_path)
    shell = Capability(
        name="Shell.Exec", requires_approval=True, approval_rule_id="approval_shell_exec"
    )
    bundle = make_bundle(
        4,
        gpt={"capabilities": ("File.Read", "Shell.Exec"), "scopes": (shell,), "max_depth": 1},
        claude={},
    )
    bundle = msgspec.structs.replace(
        bundle,
        approval_rules=(
            ApprovalRule(
                approval_rule_id="approval_shell_exec",
                title="Local command execution",
                description="User approval required for shell commands",
            ),
        ),
    )
    await publish_bundle(nc.jetstream(), namespace, signer.sign(bundle))
    handshake = await _handshake(nc, namespace, signer)

    said = await handshake.answer(["gpt", "claude"], ["File.Read", "Git.Status"])
    assert said["compatibility"] == {
        "status": "degraded",
        "unsupportedCapabilities": ["Shell.Exec"],
    }
    assert said["policyBundle"]["version"] == 4
    assert said["policyBundle"]["tenantId"] == "test"
    assert said["capabilities"] == {"gpt": ["File.Read", "Shell.Exec"], "claude": []}
    assert said["limits"]["agents"]["gpt"]["maxDepth"] == 1
    assert said["approvalRules"] == [
        {
            "approvalRuleId": "approval_shell_exec",
            "title": "Local command execution",
            "description": "User approval required for shell commands",
            "timeoutS": 300,
            "capabilities": ["Shell.Exec"],
        }
    ]
    assert said["featureFlags"] == {"patchPreview": True}
    everything = await handshake.answer(["gpt"], ["File.Read", "Shell.Exec"])
    assert everything["compatibility"]["status"] == "compatible"
    assert (await handshake.answer(["gpt"], None))["compatibility"]["status"] == "compatible"

    # A newer bundle is read at the next CreateSession, without a restart.
    await publish_bundle(nc.jetstream(), namespace, signer.sign(make_bundle(5, gpt={})))
    assert (await handshake.answer(["gpt"], None))["policyBundle"]["version"] == 5


async def test_no_session_starts_without_a_trusted_bundle_or_once_it_expired(
    nc: NATS, namespace: Namespace, tmp_path: Path
) -> None:
    signer, forger = Signer.create(tmp_path), Signer.create(tmp_path, "forger")
    handshake = await _handshake(nc, namespace, signer)
    with pytest.raises(RpcError, match="no policy bundle is trusted") as none:
        await handshake.answer(["gpt"], None)
    assert none.value.data is not None and none.value.data["code"] == "POLICY_BUNDLE_INVALID"

    await publish_bundle(nc.jetstream(), namespace, forger.sign(make_bundle(1, gpt={})))
    with pytest.raises(RpcError, match=r"no policy bundle is trusted.*no trusted key") as forged:
        await handshake.answer(["gpt"], None)
    assert forged.value.data is not None and forged.value.data["code"] == "POLICY_BUNDLE_INVALID"

    await publish_bundle(nc.jetstream(), namespace, signer.sign(make_bundle(2, gpt={})))
    assert (await handshake.answer(["gpt"], None))["policyBundle"]["version"] == 2
    expired = await _handshake(nc, namespace, signer, later=timedelta(days=2))
    with pytest.raises(RpcError, match="expired") as late:
        await expired.answer(["gpt"], None)
    assert late.value.data is not None and late.value.data["code"] == "POLICY_EXPIRED"


async def test_the_console_keeps_what_the_gates_keep_when_the_newest_bundle_fails(
    nc: NATS, namespace: Namespace, tmp_path: Path
) -> None:
    """A console started after a foreign or a rolled-back value was stored: the gates keep
    the bundle their floor (`trusted.version`) proves, and so does the console, rather than
    refuse every session or take the rollback."""
    signer, forger = Signer.create(tmp_path), Signer.create(tmp_path, "forger")
    js = nc.jetstream()
    trusted = signer.sign(make_bundle(2, gpt={}))
    await publish_bundle(js, namespace, trusted)
    policy = await js.key_value(namespace.bucket("policy"))
    await policy.put(TRUSTED_VERSION_KEY, trusted)  # as a gate that trusted it writes it
    await publish_bundle(js, namespace, forger.sign(make_bundle(3, gpt={})))
    assert (await (await _handshake(nc, namespace, signer)).answer(["gpt"], None))["policyBundle"][
        "version"
    ] == 2
    await publish_bundle(js, namespace, signer.sign(make_bundle(1, gpt={})))  # a rollback
    console = await _handshake(nc, namespace, signer)
    assert (await console.answer(["gpt"], None))["policyBundle"]["version"] == 2
