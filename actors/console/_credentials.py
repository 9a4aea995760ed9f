"""The settings of a principal the console connects as, besides itself: a person, the audit
reader.

The console process runs with its own `PARLEY_*` environment (`parley up` passes each actor
its actor id, nkey seed file and account settings that way), and the environment outranks a
settings file (bus/_settings.py). Read as any actor reads its config, a person's or the audit
reader's file would therefore connect with the console's own nkey under the other's inbox
prefix: the broker refuses every reply and nothing can be read. So here the file's values are
passed as explicit values, which outrank the environment.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

from bus import ConfigError, Settings, load_settings

__all__ = ("principal_settings",)


def principal_settings(path: Path, nats_url: str) -> Settings:
    """The settings in `path` (a `parley nats-config` settings file), its own values winning
    over the console's environment; `nats_url` is the console's server.

    Raises:
        ConfigError: the file is missing, unreadable or not valid TOML, or a value is invalid.
    """
    try:
        values = tomllib.loads(path.read_text())
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror or exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path} is not valid TOML: {exc}") from None
    return load_settings(path, **{**values, "nats_url": nats_url})
