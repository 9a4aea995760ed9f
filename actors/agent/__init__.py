"""The agent host: one process per agent profile, a brain behind seed 001's reply contract.

Public face: `AgentHost`, the process `parley run agent` runs, and `call_for`.

Inside: `_host` (the process), `_profile` (agent profiles), `_prompt` (what a brain is
asked), `_reply` (checking what it answers), and `brains/` (the backends).
"""

from actors.agent._host import AgentHost, call_for

__all__ = ("AgentHost", "call_for")
