"""The console's `[options]`: where it listens and where it finds people's tokens and keys."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, field_validator

from actors.console._tokens import DEFAULT_TOKENS_FILE, MAX_SIGN_INS_PER_PERSON
from schemas import check_token

__all__ = ("ConsoleOptions",)


class ConsoleOptions(BaseModel):
    """Loopback by default: the console acts for people with their own credentials, so it is
    not a service for the network unless an operator puts a proxy with TLS in front of it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    host: str = "127.0.0.1"
    port: int = Field(default=8480, ge=0, le=65535)
    """0 picks a free port (logged as `console listening` with its URL)."""
    allowed_hosts: tuple[str, ...] = ("127.0.0.1", "localhost", "::1")
    """Host names a request may name (its Host header, without the port): a page served from
    a DNS name rebound to this machine is refused. Add the name a proxy serves it under."""
    url_file: Path | None = None
    """Where to write the URL once listening (removed at stop), so a person or a script finds
    a port chosen with `port = 0`: `parley up`'s default topology uses `.parley/console.url`."""
    audit_reader: Path | None = None
    """The audit reader's settings file (`audit-cli`, an operator role; `parley up` writes
    `.parley/broker/actors/audit-cli.toml`): with it, a person sees their own audit records
    and the trace trees of their sessions (actors/console/_audit.py says why only those)."""
    audit_tenant: str | None = None
    """The tenant the auditor records under (its own `tenant` option); unset, the console's
    `tenant`, since one deployment's gate and auditor are the same tenant's
    (`audit_tenant_in_force`)."""
    tokens_file: Path = DEFAULT_TOKENS_FILE
    max_sign_ins_per_person: int = Field(default=MAX_SIGN_INS_PER_PERSON, ge=1, le=10_000)
    """Sign-ins (12-hour tokens held in memory) one person may hold at once; one more revokes
    their oldest. Raise it for a person who works from more browsers or scripts than this."""
    workspaces: Path | None = None
    """The tool runtime's `workspaces` directory (`parley up`: `.parley/workspaces`), where
    GetPatchPreview reads a task's checkpoints; None: the method says it is not offered."""
    policy_keys: tuple[str, ...] = ()
    """The policy signers' public keys (the gate's `policy_keys`): with them, CreateSession
    checks the bundle in force and answers seed 002's handshake (actors/console/_handshake.py);
    without, it creates sessions with no handshake."""
    tenant: str = "default"
    """The tenant whose bundle the console checks (the gate's `tenant`)."""
    people_dir: Path = Path(".parley/broker/actors")
    """Where each person's settings file (`person-<name>.toml`: its nkey seed file and
    account settings, as `parley nats-config` writes them) is found."""

    @field_validator("tenant", "audit_tenant")
    @classmethod
    def _token(cls, value: str | None) -> str | None:
        """A tenant is a subject token (the audit subjects name it): never a wildcard."""
        return None if value is None else check_token(value, "tenant")

    @property
    def audit_tenant_in_force(self) -> str:
        """The tenant whose audit records the console reads: `audit_tenant`, else `tenant`."""
        return self.audit_tenant if self.audit_tenant is not None else self.tenant
