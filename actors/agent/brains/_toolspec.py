"""A tool as a model is told of it, whatever the provider and whatever runs it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ("ToolSpec",)


@dataclass(frozen=True, slots=True)
class ToolSpec:
    """One tool as a model is told of it: each provider wraps these three in its own shape."""

    name: str
    description: str
    parameters: dict[str, Any]
    """The JSON Schema of the tool's arguments."""
