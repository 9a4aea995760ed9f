"""Settings: TOML, environment and code in that order of precedence, readable errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from bus import ConfigError, load_settings


def test_precedence(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = tmp_path / "actor.toml"
    config.write_text('ack_wait_s = 7\nmax_deliver = 9\n[options]\nprofile = "gpt"\n')
    monkeypatch.setenv("PARLEY_MAX_DELIVER", "4")
    settings = load_settings(config, actor_id="gpt")
    assert settings.ack_wait_s == 7
    assert settings.max_deliver == 4
    assert settings.options == {"profile": "gpt"}
    assert settings.actor_id == "gpt"


def test_nats_url_from_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NATS_URL", "nats://10.0.0.1:4222")
    assert load_settings().nats_url == "nats://10.0.0.1:4222"


def test_a_server_url_is_a_nats_url(monkeypatch: pytest.MonkeyPatch) -> None:
    """`nats_url = "htp://x"` was said as "no NATS server answers" (a walk's typo)."""
    monkeypatch.setenv("NATS_URL", "htp://x:4222")
    with pytest.raises(ConfigError, match="'htp://x:4222' is no NATS server URL"):
        load_settings()
    for fine in ("nats://a:1,tls://b:2", "127.0.0.1:4222", "wss://c:443"):
        monkeypatch.setenv("NATS_URL", fine)
        assert load_settings().nats_url == fine


def test_errors_name_field_and_value(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PARLEY_ACK_WAIT_S", "-3")
    with pytest.raises(ConfigError) as caught:
        load_settings(actor_id="a.b")
    text = str(caught.value)
    assert "ack_wait_s" in text and "'-3'" in text
    assert "actor_id" in text and "a.b" in text


@pytest.mark.parametrize("variable", ["PARLEY_QUOTAS", "PARLEY_RETENTION"])
def test_a_table_variable_that_is_no_json_is_named(
    variable: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """pydantic-settings' own SettingsError escaped (exit 1, "error parsing value for field …
    from source EnvSettingsSource"): an operator's walk."""
    monkeypatch.setenv(variable, "{bad")
    with pytest.raises(ConfigError) as caught:
        load_settings()
    assert str(caught.value).startswith(f"invalid configuration: {variable}: not a JSON object")


def test_bad_files(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not found"):
        load_settings(tmp_path / "missing.toml")
    broken = tmp_path / "broken.toml"
    broken.write_text("ack_wait_s = = 1")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_settings(broken)
    unknown = tmp_path / "unknown.toml"
    unknown.write_text("ack_wayt_s = 1")
    with pytest.raises(ConfigError, match="ack_wayt_s"):
        load_settings(unknown)
