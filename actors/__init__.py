"""The actors: one package per actor, each a thin shell around a pure core.

`ACTORS` maps the names `parley run` accepts to their classes; every actor registers here.
Each class is imported when it is first looked up, not with this package: a process runs one
actor, and importing every one of them (the A2A SDK alone takes over a second) made each actor
process and each `parley` command pay for all the others at start.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING

from bus import Actor

if TYPE_CHECKING:
    from actors.a2a import A2aActor
    from actors.agent import AgentHost
    from actors.auditor import AuditorActor
    from actors.console import ConsoleActor
    from actors.echo import EchoActor
    from actors.gate import GateActor
    from actors.llm import LlmActor
    from actors.relay import RelayActor
    from actors.router import RouterActor
    from actors.tools import ToolsActor

_CLASSES: dict[str, tuple[str, str]] = {
    "echo": ("actors.echo", "EchoActor"),
    "gate": ("actors.gate", "GateActor"),
    "router": ("actors.router", "RouterActor"),
    "agent": ("actors.agent", "AgentHost"),
    "auditor": ("actors.auditor", "AuditorActor"),
    "console": ("actors.console", "ConsoleActor"),
    "relay": ("actors.relay", "RelayActor"),
    "tools": ("actors.tools", "ToolsActor"),
    "llm": ("actors.llm", "LlmActor"),
    "a2a": ("actors.a2a", "A2aActor"),
}
"""Each actor kind (its class's `kind`, which tests/unit/test_actor_registry.py checks) and
where its class lives."""


class _Registry(Mapping[str, type[Actor]]):
    """The actor classes by kind, each imported on its first lookup."""

    def __getitem__(self, kind: str) -> type[Actor]:
        module, name = _CLASSES[kind]
        actor: type[Actor] = getattr(importlib.import_module(module), name)
        return actor

    def __iter__(self) -> Iterator[str]:
        return iter(_CLASSES)

    def __len__(self) -> int:
        return len(_CLASSES)


ACTORS: Mapping[str, type[Actor]] = _Registry()

_BY_CLASS = {name: kind for kind, (_module, name) in _CLASSES.items()}


def __getattr__(name: str) -> type[Actor]:
    """`from actors import GateActor` imports that actor's package alone."""
    if name in _BY_CLASS:
        return ACTORS[_BY_CLASS[name]]
    raise AttributeError(f"module 'actors' has no attribute {name!r}")


__all__ = (
    "ACTORS",
    "A2aActor",
    "AgentHost",
    "AuditorActor",
    "ConsoleActor",
    "EchoActor",
    "GateActor",
    "LlmActor",
    "RelayActor",
    "RouterActor",
    "ToolsActor",
)
