"""The tools a brain is offered for the capabilities its profile names (seed 002 §9).

Each capability becomes one tool: its arguments' JSON Schema from the runtime's own argument
Structs (actors/tools/), so what the model is told cannot drift from what the runtime
decodes. Providers allow only `[A-Za-z0-9_-]` in a tool's name, so `File.Read` is offered as
`File_Read`; a model's call is mapped back through the offered names only, so a name the
call did not offer never becomes a request. An MCP tool's arguments are whatever its server
takes, so it is offered with an open object schema; the runtime checks them.
"""

from __future__ import annotations

from typing import Any, Final

from actors.agent.brains._toolspec import ToolSpec
from actors.llm import provider_tool_name
from actors.tools import ARGUMENTS, arguments_schema

__all__ = ("capability_named", "capability_specs", "provider_name")

_DESCRIPTIONS: Final = {
    "File.Read": "Read a text file (paths relative to your workspace).",
    "File.Write": "Create or replace a text file with the given content.",
    "File.Delete": "Delete a file.",
    "Shell.Exec": "Run one program with arguments (argv; no shell) in your workspace.",
    "Network.Http": "Make an HTTP request to an allowed domain.",
    "Git.Status": "Show a git repository's status.",
    "Git.Diff": "Show a git repository's diff.",
    "Git.Commit": "Commit changes in a git repository.",
    "Git.Push": "Push a branch of a git repository to its remote.",
    "Workspace.Upload": "Store a workspace file as an artifact of the session.",
}


def provider_name(capability: str) -> str:
    """The name a capability's tool has in a provider's tool list (the gateway flags a tool
    call by the same name: actors/llm/_wire.py)."""
    return provider_tool_name(capability)


def _inlined(schema: dict[str, Any]) -> dict[str, Any]:
    """msgspec's schema with its one `$ref` resolved: providers want the object itself."""
    ref = schema.get("$ref", "")
    definitions = schema.get("$defs", {})
    body = definitions.get(ref.rsplit("/", 1)[-1], schema)
    return {key: value for key, value in body.items() if key not in ("title", "$defs")}


def capability_specs(capabilities: tuple[str, ...]) -> tuple[ToolSpec, ...]:
    """One tool per capability; of two whose provider names collide, the first."""
    specs: dict[str, ToolSpec] = {}
    for capability in capabilities:
        name = provider_name(capability)
        if name in specs:
            continue
        if capability in ARGUMENTS:
            parameters = _inlined(arguments_schema(capability))
            description = _DESCRIPTIONS.get(capability, capability)
        else:
            parameters = {"type": "object"}
            description = f"The tool {capability} (its server's own arguments, as an object)."
        specs[name] = ToolSpec(
            name=name, description=f"{description} [{capability}]", parameters=parameters
        )
    return tuple(specs.values())


def capability_named(tool_name: str, capabilities: tuple[str, ...]) -> str | None:
    """The offered capability a model's tool call names, if it names one."""
    return next((c for c in capabilities if provider_name(c) == tool_name), None)
