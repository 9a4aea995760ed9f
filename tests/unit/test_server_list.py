"""NATS_URL as a list of a cluster's servers: every one is kept, each trimmed, none empty."""

from __future__ import annotations

import pytest

from bus import ConfigError, load_settings


def test_one_url_is_a_list_of_one(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NATS_URL", "nats://10.0.0.1:4222")
    settings = load_settings()
    assert settings.nats_servers == ("nats://10.0.0.1:4222",)
    assert settings.nats_url == "nats://10.0.0.1:4222"


def test_a_comma_separated_list_names_every_server(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NATS_URL", "nats://n1:4222, nats://n2:4222 ,nats://n3:4222")
    settings = load_settings()
    assert settings.nats_servers == ("nats://n1:4222", "nats://n2:4222", "nats://n3:4222")
    assert settings.nats_url == "nats://n1:4222,nats://n2:4222,nats://n3:4222"


def test_an_empty_entry_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match=r"nats_url: .*empty server URL"):
        load_settings(nats_url="nats://n1:4222,,nats://n3:4222")


def test_replicas_is_unset_unless_given(monkeypatch: pytest.MonkeyPatch) -> None:
    assert load_settings().replicas is None
    monkeypatch.setenv("PARLEY_REPLICAS", "3")
    assert load_settings().replicas == 3
    with pytest.raises(ConfigError, match="replicas"):
        load_settings(replicas=0)
