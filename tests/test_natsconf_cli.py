"""`parley nats-config` and `parley provision` as commands: files, seeds, settings, errors."""

from __future__ import annotations

import json
from pathlib import Path

import nkeys
import pytest

from bus import load_settings
from tools.cli import main


def test_nats_config_writes_private_seeds_and_keeps_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "nats"
    assert (
        main(["nats-config", "--out", str(out), "--actors", "gate,gpt", "--namespace", "n1"]) == 0
    )
    assert "wrote config, seeds and settings" in capsys.readouterr().out
    first = json.loads((out / "actors.json").read_text())
    assert {a: e["role"] for a, e in first.items()} == {
        "gate": "gate",
        "gpt": "agent",
        "provisioner": "provisioner",
    }
    for actor, entry in first.items():
        seed_file = out / "seeds" / f"{actor}.nk"
        assert seed_file.stat().st_mode & 0o077 == 0, "a seed is readable by its owner only"
        pair = nkeys.from_seed(bytearray(seed_file.read_bytes().strip()))
        assert pair.public_key.decode() == entry["nkey"]
        assert seed_file.read_text() not in (out / "authorization.conf").read_text()
    settings = load_settings(out / "actors" / "gpt.toml")
    assert (settings.actor_id, settings.namespace, settings.provision) == ("gpt", "n1", False)
    assert settings.move_exhausted is False and settings.nkey_seed_file is not None
    assert settings.create_consumers is False
    gate = load_settings(out / "actors" / "gate.toml")
    assert gate.move_exhausted and gate.move_exhausted_of == ("deliver",)
    assert gate.create_consumers

    # Adding an actor later gives it a key and rotates nobody else's.
    assert main(["nats-config", "--out", str(out), "--actors", "gate,gpt,claude"]) == 0
    second = json.loads((out / "actors.json").read_text())
    assert {a: second[a] for a in first} == first
    assert second["claude"]["role"] == "agent"


def test_nats_config_refuses_a_bad_actor_id(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["nats-config", "--out", str(tmp_path), "--actors", "gate,a.b"]) == 2
    assert "actor id" in capsys.readouterr().err


def test_provision_without_a_server_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NATS_URL", "nats://127.0.0.1:9")  # discard port: nobody listens
    assert main(["provision"]) == 3
    assert "parley provision:" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("listen", "url"),
    [
        ("127.0.0.1:5333", "nats://127.0.0.1:5333"),
        ("0.0.0.0:6222", "nats://127.0.0.1:6222"),
        ("[::]:7222", "nats://[::1]:7222"),
        ("[::0]:7223", "nats://[::1]:7223"),
        (":7224", "nats://127.0.0.1:7224"),
        ("nats.example.com:4333", "nats://nats.example.com:4333"),
        ("10.1.2.3:4222", "nats://10.1.2.3:4222"),
    ],
)
def test_the_settings_name_the_address_the_server_listens_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, listen: str, url: str
) -> None:
    """A server told `--listen` elsewhere than the default was one the actors' settings did
    not reach: they named no URL, and connected to 127.0.0.1:4222."""
    for name in ("NATS_URL", "PARLEY_NATS_URL"):
        monkeypatch.delenv(name, raising=False)
    out = tmp_path / "nats"
    assert main(["nats-config", "--out", str(out), "--actors", "gate", "--listen", listen]) == 0
    assert f"listen: {json.dumps(listen)}" in (out / "nats-server.conf").read_text()
    assert load_settings(out / "actors" / "gate.toml").nats_url == url
    assert load_settings(out / "actors" / "provisioner.toml").nats_url == url


@pytest.mark.parametrize("listen", ["4222", "foo", "127.0.0.1:0", "127.0.0.1:65536", "h:x"])
def test_a_listen_address_that_is_no_host_and_port_is_refused_before_anything_is_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], listen: str
) -> None:
    out = tmp_path / "nats"
    assert main(["nats-config", "--out", str(out), "--actors", "gate", "--listen", listen]) == 2
    assert "is no HOST:PORT" in capsys.readouterr().err
    assert not out.exists()
