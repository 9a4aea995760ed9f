"""The LLM gateway's `[options]`: the providers, their keys, and which provider serves which
model. Validated at start like every actor's; the keys live here and nowhere else."""

from __future__ import annotations

import os
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

__all__ = ("LlmOptions", "ProviderSettings")


class ProviderSettings(BaseModel):
    """One provider: its API (OpenAI-compatible chat completions, or Anthropic's Messages),
    where it is, and its key."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    api: Literal["openai", "anthropic"]
    base_url: str
    api_key: str | None = Field(default=None, description="Prefer api_key_env.")
    api_key_env: str | None = None
    anthropic_version: str = "2023-06-01"

    def key(self) -> str | None:
        """The key from the settings, else from the environment variable they name, else
        none (a local OpenAI-compatible server needs none)."""
        if self.api_key:
            return self.api_key
        return os.environ.get(self.api_key_env) or None if self.api_key_env else None


class LlmOptions(BaseModel):
    """The gateway's `[options]`."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    policy_keys: list[str] = Field(min_length=1)
    """The policy signers' public keys: the gateway verifies the bundle itself."""
    tenant: str = "default"
    providers: dict[str, ProviderSettings] = Field(min_length=1)
    models: dict[str, str] = Field(min_length=1)
    """Which provider (by name) serves each model; `"claude-*"` every model whose name starts
    `claude-`; `"*"` names the provider of any other."""
    timeout_s: float = Field(default=60.0, gt=0, le=3600)
    """The longest one request may take, retries included (the call's own deadline, when
    sooner, wins)."""
    retries: int = Field(default=2, ge=0, le=10)
    """How many times a 429 or 5xx answer (or no connection) is tried again."""
    backoff_s: float = Field(default=0.5, gt=0, le=60)
    """The first wait before trying again; each next one doubles (or is the provider's
    `Retry-After`), never past the deadline."""

    @field_validator("policy_keys", mode="before")
    @classmethod
    def _one_or_many(cls, value: object) -> object:
        return [value] if isinstance(value, str) else value

    @model_validator(mode="after")
    def _known_providers(self) -> LlmOptions:
        unknown = sorted(set(self.models.values()) - set(self.providers))
        if unknown:
            raise ValueError(f"models name providers that are not configured: {unknown}")
        return self

    def provider_for(self, model: str) -> str | None:
        """The name of the provider that serves `model`, if any: its own entry, else the
        longest `prefix*` entry it starts with, else `"*"`'s."""
        if model in self.models:
            return self.models[model]
        prefixes = [k for k in self.models if k.endswith("*") and model.startswith(k[:-1])]
        return self.models[max(prefixes, key=len)] if prefixes else None
