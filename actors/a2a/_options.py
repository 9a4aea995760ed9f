"""The A2A edge's `[options]`: where it listens, whose tokens it takes, which bundle it reads."""

from __future__ import annotations

from pathlib import Path
from typing import Final

from pydantic import BaseModel, ConfigDict, Field, field_validator

__all__ = ("DEFAULT_A2A_TOKENS_FILE", "A2aOptions")

DEFAULT_A2A_TOKENS_FILE: Final = Path(".parley/a2a/tokens.json")


class A2aOptions(BaseModel):
    """Loopback by default, like the console: each call acts as a client's own principal, so
    the edge is not a network service unless an operator puts a proxy with TLS in front."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    host: str = "127.0.0.1"
    port: int = Field(default=8490, ge=0, le=65535)
    """0 picks a free port (logged as `a2a listening` with its URL)."""
    public_url: str | None = None
    """The base URL clients reach the edge at, written into the Agent Cards (a proxy's);
    None: the address it listens on."""
    url_file: Path | None = None
    """Where to write the URL once listening (removed at stop), for a port chosen with 0."""
    policy_keys: list[str] = Field(min_length=1)
    """The policy signers' public keys: the edge verifies the bundle itself to know which
    agents are exposed (`a2a_exposed`), as the tool runtime and the LLM gateway do."""
    tenant: str = "default"
    bundle_refresh_s: float = Field(default=2.0, gt=0, le=3600)
    """How often the policy bundle is read again (by direct get: the edge may not watch)."""
    tokens_file: Path = DEFAULT_A2A_TOKENS_FILE
    """The clients' hashed bearer tokens (`parley a2a token --client NAME`)."""
    people_dir: Path = Path(".parley/broker/actors")
    """Where each client's settings file (`person-<client>.toml`, as `parley nats-config`
    writes it) is found: a client acts on the bus as that principal."""
    task_timeout_s: float = Field(default=300.0, gt=0, le=3600)
    """The longest a task is followed before it is told failed (its session may go on)."""
    max_tasks_per_client: int = Field(default=1000, ge=1, le=1_000_000)
    """Tasks the edge keeps for each client (for `GetTask`, `ListTasks`); past it the one
    saved longest ago is dropped (actors/a2a/_tasks.py). Its session stays in Parley."""
    max_task_bytes_per_client: int = Field(default=64 * 1024 * 1024, ge=64 * 1024)
    """The encoded bytes of the tasks kept for each client, bounded the same way."""

    @field_validator("policy_keys", mode="before")
    @classmethod
    def _one_or_many(cls, value: object) -> object:
        return [value] if isinstance(value, str) else value
