"""The relay's grants at home and on the gateway: only the names it serves, only its device."""

from __future__ import annotations

from schemas import Namespace
from tools.natsconf import (
    CORE_ACCOUNT,
    account_of,
    gateway_permissions,
    permissions_for,
    settings_for,
)

NS = Namespace("parley")
DEVICE = "ab" * 32
OTHER = "cd" * 32


def test_the_relay_reads_and_submits_only_as_the_names_it_serves() -> None:
    perms = permissions_for("relay", NS, ("bob-byte-doc", "device-0123456789abcdef"))
    allowed = set(perms.publish_allow)
    assert {"parley.submit.bob-byte-doc", "parley.submit.device-0123456789abcdef"} <= allowed
    for name in ("bob-byte-doc", "device-0123456789abcdef"):
        assert f"$JS.API.CONSUMER.MSG.NEXT.PARLEY_DELIVER.{name}" in allowed
        assert f"$JS.ACK.PARLEY_DELIVER.{name}.>" in allowed
    assert "$KV.parley_relay.>" in allowed
    assert not any("CONSUMER.CREATE" in s for s in allowed)  # the provisioner creates them
    assert not any(s.startswith("parley.deliver") for s in allowed)
    assert not any(s.startswith("parley.submit.gpt") for s in allowed)
    assert "parley.deliver.>" in perms.publish_deny
    assert perms.account != CORE_ACCOUNT and account_of("relay") == perms.account
    settings = settings_for("relay", NS)
    assert settings["create_consumers"] is False and settings["provision"] is False


def test_a_relay_on_the_gateway_speaks_and_reads_only_for_its_own_device() -> None:
    perms = gateway_permissions(DEVICE, "parleygw")
    publish = perms["publish"]["allow"]  # type: ignore[index]
    assert f"parleygw.*.{DEVICE}" in publish
    assert not any(OTHER in s for s in publish)
    assert not any("STREAM.CREATE" in s or "STREAM.DELETE" in s for s in publish)
    assert f"$JS.API.CONSUMER.CREATE.PARLEYGW.relay-{DEVICE[:16]}.parleygw.{DEVICE}.*" in publish
    assert perms["subscribe"] == {"allow": [f"_INBOX_{DEVICE[:16]}.>"], "deny": ["_INBOX.>"]}
