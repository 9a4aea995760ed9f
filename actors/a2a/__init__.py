"""The A2A edge (`parley run a2a`): Parley's exposed agents as A2A agents, over `a2a-sdk`.

Public face: `A2aActor`, `A2aOptions`, `DEFAULT_A2A_TOKENS_FILE`, `agent_card`, `SESSION_KEY`.

Inside: `_options`, `_clients` (clients' hashed tokens and their principals' links, reusing
the console's), `_executor` (an A2A task as a Parley session), `_app` (HTTP: cards, JSON-RPC,
bearer tokens) and `_actor` (the process).
"""

from typing import TYPE_CHECKING

from actors.a2a._options import DEFAULT_A2A_TOKENS_FILE, A2aOptions
from bus import lazy_exports

if TYPE_CHECKING:
    from actors.a2a._actor import A2aActor
    from actors.a2a._app import agent_card
    from actors.a2a._executor import SESSION_KEY

# The A2A SDK (over a second to import) only for a process that serves A2A.
__getattr__ = lazy_exports(
    __name__,
    {
        "A2aActor": "actors.a2a._actor",
        "agent_card": "actors.a2a._app",
        "SESSION_KEY": "actors.a2a._executor",
    },
)

__all__ = ("DEFAULT_A2A_TOKENS_FILE", "SESSION_KEY", "A2aActor", "A2aOptions", "agent_card")
