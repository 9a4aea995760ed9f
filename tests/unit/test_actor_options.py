"""Every actor's `[options]` is validated one way, and a bad one is named with its value."""

from __future__ import annotations

from pathlib import Path

import pytest

from actors import AuditorActor, GateActor, RouterActor
from bus import Actor, ConfigError, Settings


def _settings(**options: object) -> Settings:
    return Settings(actor_id="x", options=options)


@pytest.mark.parametrize(
    ("actor", "options", "named"),
    [
        (RouterActor, {"turn_timeout_s": 0}, "turn_timeout_s: Input should be greater than 0"),
        (RouterActor, {"turn_timout_s": 5}, "turn_timout_s: Extra inputs are not permitted"),
        (RouterActor, {"window_items": "many"}, "window_items: Input should be a valid integer"),
        (GateActor, {}, "policy_keys: Field required"),
        (GateActor, {"policy_keys": []}, "policy_keys: List should have at least 1 item"),
        (GateActor, {"policy_keys": ["k"], "cache_entries": 0}, "cache_entries: Input should be"),
        (GateActor, {"policy_keys": ["k"], "tennant": "t"}, "tennant: Extra inputs"),
    ],
)
def test_a_bad_option_is_named_with_its_value(
    actor: type[Actor], options: dict[str, object], named: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        actor(_settings(**options))
    text = str(caught.value)
    assert text.startswith(f"invalid {actor.kind} options:\n"), text
    assert named in text, text
    if options:
        assert "(got " in text, text


def test_every_actor_reports_options_in_the_same_format(tmp_path: Path) -> None:
    """The auditor too: one formatter for every pydantic error (bus `describe_invalid`)."""
    with pytest.raises(ConfigError) as caught:
        AuditorActor(_settings(signing_key=str(tmp_path / "k"), tenant="Not A Token"))
    text = str(caught.value)
    assert text.startswith("invalid auditor options:\n  tenant: "), text
