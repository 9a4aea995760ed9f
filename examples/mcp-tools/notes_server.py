"""A small MCP server, written with the official `mcp` SDK: the notes of this directory.

The tool runtime of `parley up examples/mcp-tools` starts it over stdio (`system.toml`'s
`[[mcp_servers]]`), and its tools become the capabilities `Mcp.notes.list_notes` and
`Mcp.notes.read_note`, which the bundle grants to the agent `scribe` alone (`policy.toml`).

It reads only the `*.md` files of its `notes/` directory, by name: the server bounds what it
reaches by its own configuration, as docs/tools.md asks of an MCP server, since a bundle's
path scopes govern only the arguments named as paths, and a `name` is none.
"""

from __future__ import annotations

from pathlib import Path

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

NOTES = Path(__file__).resolve().parent / "notes"

server = MCPServer("notes")


@server.tool(description="The names of the notes, one a line.")
def list_notes() -> str:
    return "\n".join(sorted(note.stem for note in NOTES.glob("*.md")))


@server.tool(description="The text of the note called `name` (as list_notes gives it).")
def read_note(name: str) -> str:
    known = {note.stem: note for note in NOTES.glob("*.md")}
    if name not in known:
        raise ToolError(f"no note called {name!r}: list_notes names those there are")
    return known[name].read_text(encoding="utf-8")


if __name__ == "__main__":
    server.run("stdio")
