"""Pieces of `parley collab`: where it finds NATS, and how it prints a session's events."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from actors.router._session import EventName
from bus import ConfigError, load_settings, load_topology
from schemas import SessionEvent
from tests.support.processes import REPO
from tools._local import LOCAL_OWNER_FILE, local_url, record_local_system
from tools.collab import render

T0 = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)


def test_nats_url_wins_then_the_url_parley_up_wrote_then_the_default(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("NATS_URL", raising=False)
    monkeypatch.delenv("PARLEY_NATS_URL", raising=False)
    assert local_url(load_settings()) == "nats://127.0.0.1:4222"
    record_local_system("nats://127.0.0.1:40001")  # this process plays the running `parley up`
    assert local_url(load_settings()) == "nats://127.0.0.1:40001"
    pid, started = LOCAL_OWNER_FILE.read_text().split()
    LOCAL_OWNER_FILE.write_text(f"{pid} {int(started) - 1}\n")  # its pid, another process
    with pytest.raises(ConfigError, match=r"^no local system running: start it with `parley up`"):
        local_url(load_settings())  # the URL of a `parley up` that is gone is never followed
    monkeypatch.setenv("NATS_URL", "nats://10.0.0.7:4222")
    assert local_url(load_settings()) == "nats://10.0.0.7:4222"


def _event(event_type: EventName, **fields: Any) -> SessionEvent:
    return SessionEvent(id="e", created_at=T0, session_id="s", event_type=event_type, **fields)


def test_a_turn_prints_speaker_round_of_cap_message_and_handoff() -> None:
    event = _event(
        "step_completed",
        round=2,
        speaker="gpt",
        payload={"message": "Edited.", "handoff": {"to": "claude", "task": "Finish."}},
    )
    assert render(event, 4) == "[gpt · 2/4] Edited.\n    → claude: Finish."


def test_a_handoff_in_the_last_round_is_not_shown_as_if_followed() -> None:
    """A single call (`parley say`, one round) whose agent named someone to go on: the
    session ends with the answer, so no arrow to an agent that is never called."""
    event = _event(
        "step_completed",
        round=1,
        speaker="gpt",
        payload={"message": "Edited.", "handoff": {"to": "claude", "task": "Continue."}},
    )
    assert render(event, 1) == "[gpt · 1/1] Edited."


def test_the_end_prints_the_stop_reason_and_why() -> None:
    failed = _event(
        "session_failed",
        round=1,
        stop_reason="error",
        payload={"code": "AGENT_UNAVAILABLE", "message": "gpt is down"},
    )
    assert (
        render(failed, 6) == "stopped: error (round 1)\n    error: AGENT_UNAVAILABLE: gpt is down"
    )
    malformed = _event(
        "session_completed", round=1, stop_reason="malformed", payload={"warning": "not JSON"}
    )
    assert render(malformed, 6) == "stopped: malformed (round 1)\n    warning: not JSON"
    assert render(_event("step_started", round=1, speaker="gpt"), 6) is None


def test_the_collab_topology_runs_gate_router_and_both_agents() -> None:
    topology = load_topology(REPO / "deploy/topologies/collab.toml")
    assert [(a.name, a.run) for a in topology.actor] == [
        ("gate", "gate"),
        ("router", "router"),
        ("gpt", "agent"),
        ("claude", "agent"),
    ]
    gate = topology.actor[0]
    assert gate.config is not None and gate.config.is_file()


def test_the_opening_counts_its_rounds_in_words() -> None:
    opened = _event("session_created", payload={"participants": ["gpt"]})
    assert render(opened, 1) == "session s: gpt, up to 1 round"
    assert render(opened, 6) == "session s: gpt, up to 6 rounds"


def test_an_agents_escape_sequences_are_shown_not_obeyed() -> None:
    """A model's message may carry terminal escapes (a clipboard write, a cleared line): the
    terminal shows them as text; line breaks stay."""
    said = _event(
        "step_completed",
        speaker="gpt",
        round=1,
        payload={"message": "ok\x1b]52;c;ZXZpbA==\x07\x1b[2K\nnext \u202eevil"},
    )
    line = render(said, 4)
    assert line == "[gpt · 1/4] ok\\u001b]52;c;ZXZpbA==\\u0007\\u001b[2K\nnext \\u202eevil"
