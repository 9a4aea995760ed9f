"""Configuration: pydantic settings from a TOML file plus `PARLEY_*` environment variables.

Precedence, highest first: values passed in code (the CLI's flags), the environment, the TOML
file, the defaults. `NATS_URL` (or `PARLEY_NATS_URL`) names an existing NATS deployment: one
URL, or a comma-separated list of a cluster's nodes (`nats_servers`), any of which will do.
Errors name the field, the problem and the value, in one readable line each.
"""

from __future__ import annotations

import contextvars
import re
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeVar

from pydantic import AliasChoices, BaseModel, Field, FilePath, ValidationError, field_validator
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    SettingsError,
    TomlConfigSettingsSource,
)

from bus._quotas import Quotas
from bus._retention import Retention
from schemas import DEFAULT_MAX_BYTES, check_token

Model = TypeVar("Model", bound=BaseModel)

__all__ = (
    "ConfigError",
    "Settings",
    "describe_invalid",
    "load_settings",
    "validated_options",
)

_config_file: contextvars.ContextVar[Path | None] = contextvars.ContextVar(
    "parley_config_file", default=None
)


_SERVER_SCHEMES = frozenset({"nats", "tls", "ws", "wss"})
"""The schemes nats-py connects with; a URL without one is `nats://`."""


class ConfigError(Exception):
    """The configuration cannot be used; the message lists every problem."""


class Settings(BaseSettings):
    """Everything an actor process needs to know to join the bus."""

    model_config = SettingsConfigDict(env_prefix="PARLEY_", extra="forbid", frozen=True)

    actor_id: str = Field(default="", description="This actor's id, its subject token.")
    nats_url: str = Field(
        default="nats://127.0.0.1:4222",
        validation_alias=AliasChoices("NATS_URL", "PARLEY_NATS_URL", "nats_url"),
        description="A server URL, or a comma-separated list of a cluster's servers.",
    )
    namespace: str = "parley"
    monitor_url: str | None = Field(
        default=None,
        description="nats-server monitoring URL (a cluster's, comma-separated), used to check "
        "sync_always.",
    )
    allow_lazy_fsync: bool = False
    user: str | None = None
    password: str | None = None
    creds_file: Path | None = None
    nkey_seed_file: FilePath | None = Field(
        default=None, description="This actor's NATS nkey seed (`parley nats-config` writes it)."
    )
    provision: bool = Field(default=True, description="Create or update streams and buckets.")
    replicas: int | None = Field(
        default=None,
        ge=1,
        le=5,
        description="Replicas of every stream and bucket `parley provision` creates; unset: 3 "
        "on a cluster of 3 or more JetStream nodes, else 1.",
    )
    ack_wait_s: float = Field(default=30.0, gt=0)
    max_deliver: int = Field(default=5, ge=1)
    backoff_s: tuple[float, ...] = (0.25, 1.0, 5.0)
    fetch_batch: int = Field(default=64, ge=1, le=1024)
    max_in_flight: int = Field(
        default=64,
        ge=1,
        description="Messages handled at once per input; twice that for an actor that settles "
        "one batch behind the one it handles (the gate).",
    )
    fetch_timeout_s: float = Field(
        default=5.0,
        gt=0,
        description="How long an idle consumer's pull request lingers on the server.",
    )
    fetch_heartbeat_s: float = Field(
        default=1.0,
        gt=0,
        description="Idle heartbeat of a lingering pull request (at most half the fetch "
        "timeout): a request whose heartbeats stop was lost and is replaced.",
    )
    watchdog_idle_fetches: int = Field(default=3, ge=1)
    marks_bucket: str | None = Field(
        default=None,
        description="The bucket of this actor's quarantine marks: an agent's own under least "
        "privilege (`parley nats-config` sets it), else the shared `handling` bucket.",
    )
    poison_deaths: int = Field(
        default=3,
        ge=2,
        description="Most process deaths one message may cost: its delivery after that many "
        "unsettled ones is handled alone under a mark, and dead-lettered as `quarantined` if "
        "the one before died under it (bus/_quarantine.py). Each possible death is alerted.",
    )
    grace_s: float = Field(default=10.0, ge=0)
    max_handler_s: float = Field(
        default=600.0, gt=0, description="Longest a message is kept in progress for a handler."
    )
    heartbeat_s: float = Field(default=5.0, gt=0, description="Registry heartbeat period.")
    server_wait_s: float = Field(
        default=30.0,
        ge=0,
        description="How long an actor starting while its server is unreachable waits for it "
        "(a server being restarted) before it exits unavailable.",
    )
    max_payload: int = Field(default=DEFAULT_MAX_BYTES, ge=1024)
    quotas: Quotas = Field(
        default_factory=Quotas,
        description="What every stream and bucket may hold, per stream, bucket and sender "
        "(`[quotas]`; docs/quotas.md); `parley provision` applies them.",
    )
    retention: Retention = Field(
        default_factory=Retention,
        description="How long ended sessions, traces, waits and the audit history are kept "
        "(`[retention]`; docs/settings.md); `parley provision` applies it.",
    )
    metrics_port: int | None = Field(default=None, ge=0, le=65535)
    metrics_host: str = "127.0.0.1"
    log_level: str = "INFO"
    create_consumers: bool = Field(
        default=True,
        description="Create or update this actor's durable consumers at start; false: bind to "
        "the ones `parley provision` created (an actor that may create a consumer could make it "
        "push its messages onto subjects it may not publish to).",
    )
    move_exhausted: bool = Field(
        default=True,
        description="Move this actor's own inputs' exhausted messages to PARLEY_DEAD (needs "
        "STREAM.MSG.GET and MSG.DELETE on its input streams).",
    )
    move_exhausted_of: tuple[str, ...] = Field(
        default=(),
        description="Stream families (`deliver`) whose every consumer's exhausted messages this "
        "actor moves to PARLEY_DEAD, for receivers the broker does not trust to do it.",
    )
    js_api_prefix: str = Field(
        default="$JS.API",
        pattern=r"^\$JS(\.[A-Za-z0-9_-]+)*\.API$",
        description="Where this actor's JetStream API requests go: `$JS.API` in the account "
        "that holds JetStream; the prefix its own account imports the API under otherwise "
        "(`parley nats-config` writes it for agents and persons).",
    )
    options: dict[str, Any] = Field(
        default_factory=dict, description="Actor-specific settings ([options] in TOML)."
    )

    @field_validator("nats_url")
    @classmethod
    def _server_list(cls, value: str) -> str:
        servers = [url.strip() for url in value.split(",")]
        if not all(servers):
            raise ValueError("an empty server URL in the list")
        for url in servers:  # `htp://x` was said as "no NATS server answers"
            scheme = url.partition("://")[0] if "://" in url else "nats"
            if scheme not in _SERVER_SCHEMES:
                raise ValueError(
                    f"{url!r} is no NATS server URL: nats://HOST:PORT (or tls://, ws://, wss://)"
                )
        return ",".join(servers)

    @property
    def nats_servers(self) -> tuple[str, ...]:
        """The servers of `nats_url`: a client connects to any and fails over to the others
        (and to the cluster's nodes each server announces)."""
        return tuple(self.nats_url.split(","))

    @field_validator("actor_id")
    @classmethod
    def _actor_token(cls, value: str) -> str:
        return check_token(value, "actor id") if value else value

    @field_validator("namespace")
    @classmethod
    def _namespace_token(cls, value: str) -> str:
        return check_token(value, "namespace")

    @field_validator("move_exhausted_of")
    @classmethod
    def _family_tokens(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        return tuple(check_token(family, "stream family") for family in value)

    @field_validator("backoff_s")
    @classmethod
    def _positive_backoff(cls, value: tuple[float, ...]) -> tuple[float, ...]:
        if not value or any(step < 0 for step in value):
            raise ValueError("backoff_s needs at least one non-negative step")
        return value

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        path = _config_file.get()
        sources: list[PydanticBaseSettingsSource] = [init_settings, env_settings]
        if path is not None:
            sources.append(TomlConfigSettingsSource(settings_cls, toml_file=path))
        return tuple(sources)


def describe_invalid(title: str, error: ValidationError, whole: str = "(value)") -> str:
    """A pydantic error as Parley reports every invalid configuration (settings, profiles,
    topologies, scripts, actors' `[options]`): `title:` and one line per problem, `where: what
    (got value)`; `whole` names a problem with the whole value rather than one field."""
    lines = [f"{title}:"]
    for item in error.errors():
        where = ".".join(str(part) for part in item["loc"]) or whole
        value = item.get("input")
        shown = "" if isinstance(value, dict) else f" (got {value!r})"
        lines.append(f"  {where}: {item['msg']}{shown}")
    return "\n".join(lines)


def validated_options(model: type[Model], options: Mapping[str, Any], actor: str) -> Model:
    """An actor's `[options]` as its pydantic model.

    Raises:
        ConfigError: a value is missing, unknown or invalid (each named, with its value).
    """
    try:
        return model.model_validate(dict(options))
    except ValidationError as exc:
        raise ConfigError(describe_invalid(f"invalid {actor} options", exc, "(options)")) from None


def load_settings(config: Path | None = None, **overrides: Any) -> Settings:
    """Build settings from `config` (TOML), the environment and `overrides`.

    Raises:
        ConfigError: the file is missing or not TOML, or a value is invalid.
    """
    if config is not None:
        if not config.is_file():
            raise ConfigError(f"config file not found: {config}")
        try:
            tomllib.loads(config.read_text())
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"config file {config} is not valid TOML: {exc}") from None
    token = _config_file.set(config)
    try:
        return Settings(**{k: v for k, v in overrides.items() if v is not None})
    except ValidationError as exc:
        raise ConfigError(describe_invalid("invalid configuration", exc, "(settings)")) from None
    except SettingsError as exc:  # a variable of a table (PARLEY_QUOTAS) that is no JSON
        raise ConfigError(f"invalid configuration: {_unparsed(exc)}") from None
    finally:
        _config_file.reset(token)


def _unparsed(error: SettingsError) -> str:
    """pydantic-settings' "error parsing value for field "quotas" from source …", said as
    the variable that holds it and what it must be (docs/settings.md)."""
    found = re.search(r'field "(\w+)"', str(error))
    if found is None:
        return str(error)
    field = found.group(1)
    return f"PARLEY_{field.upper()}: not a JSON object ({error.__cause__ or error})"
