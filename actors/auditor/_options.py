"""The auditor's `[options]` and its checkpoint signing key, checked when it starts."""

from __future__ import annotations

from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from pydantic import BaseModel, ConfigDict, Field, field_validator

from bus import ConfigError, KeyFileError, load_private_key
from schemas import PII_KINDS, check_token

__all__ = ("AuditorOptions", "load_signing_key")


class AuditorOptions(BaseModel):
    """The auditor's `[options]`, checked when it starts."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    signing_key: Path
    tenant: str = "default"
    checkpoint_every: int = Field(default=1000, ge=1)
    checkpoint_s: float = Field(default=10.0, gt=0)
    redact_pii: tuple[str, ...] = ("*",)
    pii_kinds: tuple[str, ...] | None = None
    session_profile: str = "router"
    recent_window: int = Field(default=4096, ge=16)
    lease_s: float = Field(default=5.0, gt=0)

    @field_validator("tenant", "session_profile")
    @classmethod
    def _token(cls, value: str) -> str:
        return check_token(value, "tenant or profile")

    @field_validator("pii_kinds")
    @classmethod
    def _known_kinds(cls, value: tuple[str, ...] | None) -> tuple[str, ...] | None:
        unknown = set(value or ()) - PII_KINDS
        if unknown:
            raise ValueError(f"unknown PII kinds {sorted(unknown)}; known: {sorted(PII_KINDS)}")
        return value


def load_signing_key(path: Path) -> Ed25519PrivateKey:
    """Read the checkpoint signing key.

    Raises:
        ConfigError: unreadable, or not an Ed25519 private key.
    """
    try:
        return load_private_key(path)
    except KeyFileError as exc:
        raise ConfigError(f"auditor: {exc}") from None
