"""The A2A edge (`parley run a2a`): Parley's exposed agents as A2A agents, over `a2a-sdk`.

Public face: `A2aActor`, `A2aOptions`, `DEFAULT_A2A_TOKENS_FILE`, `agent_card`, `SESSION_KEY`.

Inside: `_options`, `_clients` (clients' hashed tokens and their principals' links, reusing
the console's), `_executor` (an A2A task as a Parley session), `_app` (HTTP: cards, JSON-RPC,
bearer tokens) and `_actor` (the process).
"""

from actors.a2a._actor import A2aActor
from actors.a2a._app import agent_card
from actors.a2a._executor import SESSION_KEY
from actors.a2a._options import DEFAULT_A2A_TOKENS_FILE, A2aOptions

__all__ = ("DEFAULT_A2A_TOKENS_FILE", "SESSION_KEY", "A2aActor", "A2aOptions", "agent_card")
