"""The agent host: one process per agent profile, a brain behind seed 001's reply contract.

Public face: `AgentHost`, the process `parley run agent` runs, `call_for`, and what a brain
is asked (`AgentProfile`, `BrainCall`, `system_prompt`, `user_prompt`: `parley bench` counts
the tokens a host sends with them).

Inside: `_host` (the process), `_profile` (agent profiles), `_prompt` (what a brain is
asked), `_reply` (checking what it answers), and `brains/` (the backends).
"""

from actors.agent._host import AgentHost
from actors.agent._profile import AgentProfile
from actors.agent._prompt import BrainCall, call_for, system_prompt, user_prompt

__all__ = ("AgentHost", "AgentProfile", "BrainCall", "call_for", "system_prompt", "user_prompt")
