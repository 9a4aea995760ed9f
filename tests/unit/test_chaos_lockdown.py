"""A chaos run's refusal count: the server's violation lines, attributed to the actor whose
nkey they name (lines in the format nats-server writes them)."""

from __future__ import annotations

import json
from pathlib import Path

from schemas import Namespace
from tools.chaos._lockdown import UNKNOWN_USER, LockedBroker

_PREFIX = '[3697] 2026/11/22 22:29:41.924917 [ERR] 127.0.0.1:39378 - cid:6 - "v2.16.0:python3:x"'


def _broker(tmp_path: Path) -> tuple[LockedBroker, dict[str, str]]:
    broker = LockedBroker(tmp_path / "cfg", ["gate", "gpt", "cli"], Namespace("parley"))
    manifest = json.loads((tmp_path / "cfg" / "actors.json").read_text())
    return broker, {actor: entry["nkey"] for actor, entry in manifest.items()}


def test_each_refusal_counts_against_the_actor_whose_key_it_names(tmp_path: Path) -> None:
    broker, nkeys = _broker(tmp_path)
    broker.on_server_log(
        f'{_PREFIX} - "$G/nkey:{nkeys["gpt"]}" - Publish Violation - Subject "a.b"'
    )
    broker.on_server_log(
        f'{_PREFIX} - "$G/nkey:{nkeys["gpt"]}" - Subscription Violation - Subject "x.>", SID 1'
    )
    broker.on_server_log(f'{_PREFIX} - "$G/nkey:{nkeys["cli"]}" - Publish Violation - Subject "y"')
    assert dict(broker.refused) == {"gate": 0, "gpt": 2, "cli": 1, "provisioner": 0}


def test_other_errors_are_not_refusals_and_a_stranger_is_still_counted(tmp_path: Path) -> None:
    broker, _ = _broker(tmp_path)
    broker.on_server_log(
        "[1] 2026/11/22 22:29:41.918928 [ERR] 127.0.0.1:1 - cid:5 - authentication error"
    )
    broker.on_server_log("[1] 2026/11/22 22:29:41.918928 [INF] Server is ready")
    assert sum(broker.refused.values()) == 0
    stranger = "U" + "A" * 55
    broker.on_server_log(f'{_PREFIX} - "$G/nkey:{stranger}" - Publish Violation - Subject "z"')
    assert broker.refused[UNKNOWN_USER] == 1


def test_the_generated_settings_and_authorization_are_where_the_run_looks(tmp_path: Path) -> None:
    broker, nkeys = _broker(tmp_path)
    assert broker.authorization.is_file()
    assert nkeys["gpt"] in broker.authorization.read_text()
    assert 'actor_id = "gpt"' in broker.settings_file("gpt").read_text()
    credentials = broker.credentials("gpt")
    assert Path(credentials["nkeys_seed"]).read_text().startswith("SU")
    assert credentials["inbox_prefix"] == b"_INBOX_gpt"
