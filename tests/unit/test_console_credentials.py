"""The console connects as a person or as the audit reader with that principal's own settings
file, whatever its own process's `PARLEY_*` environment says; and an audit read that fails
always says why."""

from __future__ import annotations

from pathlib import Path

import pytest

from actors.console._audit import reason_of
from actors.console._credentials import principal_settings
from bus import ConfigError
from tools.cli import main


def test_the_files_values_win_over_the_consoles_own_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    console_seed, reader_seed = tmp_path / "console.nk", tmp_path / "audit-cli.nk"
    console_seed.write_text("SUconsole\n")
    reader_seed.write_text("SUreader\n")
    monkeypatch.setenv("PARLEY_ACTOR_ID", "console")  # as `parley up` starts the console
    monkeypatch.setenv("PARLEY_NKEY_SEED_FILE", str(console_seed))
    settings_file = tmp_path / "audit-cli.toml"
    settings_file.write_text(
        f'actor_id = "audit-cli"\nnamespace = "parley"\nnkey_seed_file = "{reader_seed}"\n'
    )
    settings = principal_settings(settings_file, "nats://127.0.0.1:4999")
    assert settings.actor_id == "audit-cli"
    assert settings.nkey_seed_file == reader_seed
    assert settings.nats_url == "nats://127.0.0.1:4999"


def test_a_missing_or_broken_settings_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read"):
        principal_settings(tmp_path / "nowhere.toml", "nats://127.0.0.1:4999")
    broken = tmp_path / "broken.toml"
    broken.write_text("actor_id = \n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        principal_settings(broken, "nats://127.0.0.1:4999")


def test_an_error_without_a_message_is_named_by_its_type() -> None:
    assert reason_of(TimeoutError()) == "TimeoutError (raised without a message)"
    assert reason_of(ConnectionError("closed")) == "closed"


def test_a_token_issued_where_no_system_runs_says_where_it_signs_in(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A newcomer issued a token outside the directory `parley up` ran in: a new, empty
    store was written there and the token printed, and the running console refused it as
    unknown, with no word of why."""
    monkeypatch.chdir(tmp_path)  # no `.parley/` here: no system runs in this directory
    assert main(["console", "token", "--person", "alice"]) == 0
    out, err = capsys.readouterr()
    assert out.strip()  # the token, for a `parley up` started here later
    assert "no `parley up` runs in this directory yet" in err, err
    assert main(["console", "token", "--person", "bob", "--tokens", "own.json"]) == 0
    assert "no `parley up` runs" not in capsys.readouterr().err  # a store named on purpose
