"""The gate's `[options]`, validated at start like every actor's (bus `validated_options`)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, field_validator

from actors.gate._refusal_budget import DEFAULT_EXEMPT

__all__ = ("GateOptions",)


class GateOptions(BaseModel):
    """The gate's `[options]`."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    policy_keys: list[str] = Field(min_length=1)
    """The policy signers' public keys (`parley policy keygen`): bundles must verify."""
    tenant: str = "default"
    """The tenant whose bundles this gate accepts."""
    redaction_key_file: str | None = None
    """The deployment secret keying redaction markers (actors/gate/_redaction.py)."""
    cache_entries: int = Field(default=200_000, ge=1)
    """Records (and id claims) each cache holds."""
    refusals_per_minute: int = Field(default=60, ge=1)
    """Refusals of one sender's submissions recorded a minute; past it, until the minute
    ends, its refusals record nothing (actors/gate/_refusal_budget.py)."""
    refusals_exempt: tuple[str, ...] = DEFAULT_EXEMPT
    """Senders whose refusals are always recorded: those that submit for many principals."""

    @field_validator("policy_keys", mode="before")
    @classmethod
    def _one_or_many(cls, value: object) -> object:
        return [value] if isinstance(value, str) else value
