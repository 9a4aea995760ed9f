"""`parley orchestrate --shared bob/byte-doc`: the owner/agent a person names resolves to the
local name the relay hosts the shared agent under, from `parley shared add`'s records."""

from __future__ import annotations

from pathlib import Path

import pytest

from actors.relay import DeviceKeys, save_shared_agent
from schemas import SharedAgent
from tools.share import UnknownSharedAgent, resolve_shared

BOB, CAROL = DeviceKeys.generate(), DeviceKeys.generate()


def _relay_dir(tmp_path: Path) -> Path:
    relay = tmp_path / "relay"
    save_shared_agent(relay, SharedAgent(name="bob-byte-doc", agent="byte-doc", device=BOB.public))
    save_shared_agent(relay, SharedAgent(name="reviewer", agent="byte-doc", device=CAROL.public))
    return relay


def test_owner_and_agent_resolve_to_the_local_name(tmp_path: Path) -> None:
    relay = _relay_dir(tmp_path)
    assert resolve_shared("bob/byte-doc", relay) == "bob-byte-doc"
    # the owner's device id (a prefix of it) names the owner whatever the local name is
    assert resolve_shared(f"{CAROL.device_id[:12]}/byte-doc", relay) == "reviewer"
    assert resolve_shared(f"{BOB.device_id.upper()[:16]}/byte-doc", relay) == "bob-byte-doc"


def test_a_bare_name_is_already_local(tmp_path: Path) -> None:
    assert resolve_shared("bob-byte-doc", _relay_dir(tmp_path)) == "bob-byte-doc"
    assert resolve_shared("local", tmp_path / "nowhere") == "local"


def test_an_unknown_shared_agent_is_a_clear_error(tmp_path: Path) -> None:
    relay = _relay_dir(tmp_path)
    for spec in ("dave/byte-doc", "bob/other-doc", f"{BOB.device_id[:7]}/byte-doc"):
        with pytest.raises(UnknownSharedAgent) as refused:
            resolve_shared(spec, relay)
        message = str(refused.value)
        assert f"no shared agent {spec}" in message and "parley shared add" in message
        assert "bob-byte-doc (byte-doc on" in message and "reviewer (byte-doc on" in message
    with pytest.raises(UnknownSharedAgent, match="shared agents here: none"):
        resolve_shared("bob/byte-doc", tmp_path / "nowhere")
