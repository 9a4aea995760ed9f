"""`actors.ACTORS` names each actor by its class's own kind, and loads only what is asked."""

from __future__ import annotations

import subprocess
import sys

from actors import ACTORS


def test_each_kind_names_its_own_class() -> None:
    for kind, actor in ACTORS.items():
        assert actor.kind == kind


def test_a_command_does_not_import_every_actor() -> None:
    """The parley command and a gate process load neither the A2A SDK, the MCP SDK nor the
    console's web server: each cost every process that imported it a large share of its start
    (together, half of `import tools.cli`'s CPU)."""
    heavy = ("a2a", "mcp", "uvicorn", "starlette", "actors.a2a._actor", "actors.console._app")
    probe = (
        "import sys, tools.cli; from actors import ACTORS; ACTORS['gate']; "
        f"print(sorted(m for m in {heavy!r} if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], check=True, capture_output=True, text=True
    ).stdout
    assert out.strip() == "[]"
