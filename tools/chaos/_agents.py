"""The agents of a chaos run with the delegation mix: the demo's, taught to delegate.

The mix needs an agent that calls agents, while the collaboration sessions keep needing the
demo's `gpt` and `claude` as they are. So the run writes its own agent folder into its work
directory (the deploy folder stays the demo's): copies of the demo profiles and scripts, the
`reviewer` specialist as a third agent, and `gpt` given the reviewer and claude as delegates
and three turns ahead of its demo script, matched only by the mix's objective:

- step 0, a fan-out: one request to claude and one to the reviewer, at once;
- step 1, a chain: one more request to claude, handed the fan-out's results (a second round
  to a target already called, which the checker must not take for a duplicate);
- step 2: the answer, from what came back.

The calls' deadlines are shorter than half the person's, so even two rounds that both time
out (an agent down for the whole round) leave gpt time to answer within the person's bound.
"""

from __future__ import annotations

from pathlib import Path

from bus import shipped

__all__ = (
    "DELEGATING_AGENT",
    "MIX_OBJECTIVE",
    "SPECIALIST",
    "agents_for",
    "write_agents",
)

DELEGATING_AGENT = "gpt"
"""The agent the mix delegates to; it fans out to claude and the specialist."""
SPECIALIST = "reviewer"
"""The third agent the mix adds (deploy/agents/reviewer.toml)."""
MIX_OBJECTIVE = "chaos survey"
"""The objective the load delegates; the delegating agent's mix turns match only it."""
CALL_DEADLINE_MS = 10_000
"""Each of the delegating agent's calls: under half the person's deadline (see above)."""

_DEPLOY_AGENTS = shipped("deploy/agents")

_MIX_TURNS = f"""\
# The chaos run's delegation mix (tools/chaos/_agents.py): fan out, chain, answer.
[[turn]]
kind = "delegation_request"
goal = "{MIX_OBJECTIVE}"
step = 0
calls = [
  {{ to = "claude", objective = "a draft of {{task}}", deadline_ms = {CALL_DEADLINE_MS} }},
  {{ to = "{SPECIALIST}", objective = "the risks of {{task}}", deadline_ms = {CALL_DEADLINE_MS} }},
]

[[turn]]
kind = "delegation_request"
goal = "{MIX_OBJECTIVE}"
step = 1
calls = [
  {{ to = "claude", objective = "reconcile the draft with the risks", chain = true, \
deadline_ms = {CALL_DEADLINE_MS} }},
]

[[turn]]
kind = "delegation_request"
goal = "{MIX_OBJECTIVE}"
message = "{DELEGATING_AGENT} gathered: {{results}}"
final = true

"""


def agents_for(agents: tuple[str, ...], delegations: int) -> tuple[str, ...]:
    """The agents a run starts: the collaboration's, plus the specialist when the mix is on."""
    if delegations <= 0 or SPECIALIST in agents:
        return agents
    return (*agents, SPECIALIST)


def write_agents(folder: Path, agents: tuple[str, ...]) -> Path:
    """Write the run's agent folder: each agent's demo profile and script, the delegating
    agent's with the mix's delegates and turns. Returns the folder.

    Raises:
        ValueError: the mix needs claude and the delegating agent among `agents`.
    """
    missing = {DELEGATING_AGENT, "claude", SPECIALIST} - set(agents)
    if missing:
        raise ValueError(f"the delegation mix needs the agents {sorted(missing)}")
    scripts = folder / "scripts"
    scripts.mkdir(parents=True, exist_ok=True)
    for agent in agents:
        profile = (_DEPLOY_AGENTS / f"{agent}.toml").read_text()
        script = (_DEPLOY_AGENTS / "scripts" / f"{agent}.toml").read_text()
        if agent == DELEGATING_AGENT:
            profile = _with_delegates(profile, ("claude", SPECIALIST))
            script = _MIX_TURNS + script
        (folder / f"{agent}.toml").write_text(profile)
        (scripts / f"{agent}.toml").write_text(script)
    return folder


def _with_delegates(profile: str, delegates: tuple[str, ...]) -> str:
    """`profile` with `delegates_to` set, placed before its first table (a TOML key after
    `[brain]` would belong to the brain)."""
    line = "delegates_to = [" + ", ".join(f'"{name}"' for name in delegates) + "]\n"
    head, table, rest = profile.partition("\n[")
    if "delegates_to" in head:
        raise ValueError("the delegating agent's demo profile names its own delegates already")
    return head + "\n" + line + table + rest
