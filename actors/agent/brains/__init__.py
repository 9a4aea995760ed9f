"""Brains: what answers an agent's calls, behind one protocol.

Public face: the protocol (`Brain`, `BrainAnswer`, `BrainError`) and `make_brain`, which
builds the backend a profile names.

Inside: `_protocol`, `_registry`, `_scripted` (script files, for demos and tests),
`_subprocess` with `_bridge` (a local agent program over NDJSON), `_http` (the HTTP client's
lifecycle, keys and errors the hosted providers share), `_openai`, `_anthropic` (their wire
formats).
"""

from actors.agent.brains._protocol import Brain, BrainAnswer, BrainError
from actors.agent.brains._registry import make_brain

__all__ = ("Brain", "BrainAnswer", "BrainError", "make_brain")
