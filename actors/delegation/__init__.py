"""Agents that call agents: delegation (seed 003) and sub-agent calls (seed 004)."""

from actors.delegation._context import WorkspacePathError, build_filtered_context

__all__ = ("WorkspacePathError", "build_filtered_context")
