"""The LLM gateway's settings under `parley up`: the one place the provider keys go.

`parley up` takes `OPENAI_API_KEY` and `ANTHROPIC_API_KEY` from its own environment, writes
them into the gateway's settings file (`.parley/llm.toml`, readable by its owner alone, written
afresh at each start) and removes them from the environment every child inherits: an agent
host never holds a key, and a profile with `backend = "gateway"` reaches the providers through
the gate and the gateway (docs/llm-gateway.md). `OPENAI_BASE_URL` points the OpenAI provider at
any OpenAI-compatible server (vLLM, Ollama, llama.cpp) instead, `ANTHROPIC_BASE_URL` the
Anthropic one elsewhere.

Which provider serves a model: `claude-*` Anthropic, any other OpenAI's.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, MutableMapping
from pathlib import Path
from typing import Final

__all__ = ("PROVIDER_KEYS", "take_provider_keys", "write_gateway_settings")

PROVIDER_KEYS: Final = ("OPENAI_API_KEY", "ANTHROPIC_API_KEY")
"""The variables whose keys only the gateway gets."""

_OPENAI_URL: Final = "https://api.openai.com/v1"
_ANTHROPIC_URL: Final = "https://api.anthropic.com"


def take_provider_keys(env: MutableMapping[str, str]) -> dict[str, str]:
    """Remove the provider keys from `env` (what the children inherit); return them."""
    return {name: env.pop(name) for name in PROVIDER_KEYS if env.get(name)}


def _toml(value: str) -> str:
    return json.dumps(value)  # a JSON string is a valid TOML basic string


def write_gateway_settings(
    path: Path, policy_key: Path, tenant: str, keys: Mapping[str, str], urls: Mapping[str, str]
) -> Path:
    """Write the gateway's `[options]` with `keys` to `path`, owner-readable only; `urls`: the
    environment's `OPENAI_BASE_URL` and `ANTHROPIC_BASE_URL`, when set."""
    lines = [
        "# Written by `parley up` at each start: the provider keys live here and nowhere else.",
        "[options]",
        f"policy_keys = [{_toml(str(policy_key.resolve()))}]",
        f"tenant = {_toml(tenant)}",
        "",
        "[options.providers.openai]",
        'api = "openai"',
        f"base_url = {_toml(urls.get('OPENAI_BASE_URL') or _OPENAI_URL)}",
    ]
    if keys.get("OPENAI_API_KEY"):
        lines.append(f"api_key = {_toml(keys['OPENAI_API_KEY'])}")
    lines += [
        "",
        "[options.providers.anthropic]",
        'api = "anthropic"',
        f"base_url = {_toml(urls.get('ANTHROPIC_BASE_URL') or _ANTHROPIC_URL)}",
    ]
    if keys.get("ANTHROPIC_API_KEY"):
        lines.append(f"api_key = {_toml(keys['ANTHROPIC_API_KEY'])}")
    lines += ["", "[options.models]", '"claude-*" = "anthropic"', '"*" = "openai"', ""]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.unlink(missing_ok=True)  # created afresh, so its mode is ours from the first byte
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "w") as file:
        file.write("\n".join(lines))
    return path
