"""The bearer token file of `parley mcp --http` (tools/_mcp_serve.py): made owner-only when
missing, and used only when it is this user's own and no one else may read or write it. An
attack review found an existing file trusted whatever its owner, mode or length: one under a
shared directory, made by another local user, named a token that user knew."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from bus import ConfigError
from tools._mcp_serve import token_of


def test_a_missing_file_is_made_owner_only_with_a_strong_token(tmp_path: Path) -> None:
    path = tmp_path / "dir" / "mcp.token"
    token = token_of(path)
    assert len(token) >= 43
    assert path.stat().st_mode & 0o777 == 0o600
    assert token_of(path) == token  # the same, read back


@pytest.mark.parametrize("mode", [0o644, 0o660, 0o606])
def test_a_file_others_may_read_or_write_is_refused(tmp_path: Path, mode: int) -> None:
    path = tmp_path / "mcp.token"
    path.write_text("x" * 43 + "\n")
    path.chmod(mode)
    with pytest.raises(ConfigError, match="may be read or written by others"):
        token_of(path)


def test_a_short_token_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "mcp.token"
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
    with os.fdopen(descriptor, "w") as out:
        out.write("secret\n")
    with pytest.raises(ConfigError, match="fewer than 32"):
        token_of(path)


def test_another_users_file_is_refused(tmp_path: Path) -> None:
    if os.getuid() != 0:
        pytest.skip("only root can give a file to another user here")
    path = tmp_path / "mcp.token"
    path.write_text("x" * 43 + "\n")
    path.chmod(0o600)
    os.chown(path, 12345, 12345)
    with pytest.raises(ConfigError, match="is not yours"):
        token_of(path)


def test_a_link_is_never_followed(tmp_path: Path) -> None:
    """A link in a directory others may write could be swapped between a check and a read."""
    real = tmp_path / "real.token"
    token_of(real)
    link = tmp_path / "mcp.token"
    link.symlink_to(real)
    with pytest.raises(ConfigError, match="cannot use the token file"):
        token_of(link)


def test_a_fifo_in_its_place_is_refused_not_waited_on(tmp_path: Path) -> None:
    """Another local user's FIFO at the path hung the start before any check."""
    path = tmp_path / "mcp.token"
    os.mkfifo(path, 0o600)
    with pytest.raises(ConfigError, match="not a regular file"):
        token_of(path)
