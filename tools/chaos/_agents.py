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

With the tool mix (`--tools N`, tools/chaos/_tools.py) the folder also holds `toolsmith`, an
agent made for the run (no demo profile is like it): offered File.Write and Shell.Exec, it
answers each of the person's delegations in three turns:

- step 0: File.Write appends a line naming the delegation to `writes.log`;
- step 1: Shell.Exec runs perl (a program under /usr/bin, the one the bundle allows), which
  appends such a line to `commands.log` and lingers `COMMAND_S`, so a runtime SIGKILLed
  during the run is most likely killed mid-command, after its effect;
- step 2: the answer, from what came back (a step cut short comes back `failed`).

The delegation's input is its own envelope id (the tool worker sets it): the brain writes it
as `{task}`, so each line names the call its step served, and the checker counts the lines
per step (tools/chaos/_tool_check.py).

With the LLM mix (`--llm N`, tools/chaos/_llm_mix.py) the folder also holds `narrator`, whose
brain is no script: a `gateway` brain streaming each answer from the LLM gateway, which the
run starts with a slow local provider (tools/chaos/_llm_provider.py).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

from bus import shipped

__all__ = (
    "COMMANDS_LOG",
    "DELEGATING_AGENT",
    "LLM_AGENT",
    "LLM_MODEL",
    "MIX_OBJECTIVE",
    "PERL",
    "SPECIALIST",
    "TOOLS_OBJECTIVE",
    "TOOL_AGENT",
    "WRITES_LOG",
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

TOOL_AGENT = "toolsmith"
"""The tool mix's agent: it uses the tool runtime for each delegation it answers."""
TOOLS_OBJECTIVE = "chaos tools"
"""The objective of the tool mix's delegations; the toolsmith's turns match only it."""
WRITES_LOG = "writes.log"
COMMANDS_LOG = "commands.log"
"""The workspace files the File.Write and Shell.Exec steps append their line to."""
PERL = "/usr/bin/perl"
"""The program the command step runs: the only one the bundle's scope allows
(deploy/policy/chaos.toml). A command is an argv, never a shell line: perl appends and lingers
in one process, which a shell could do only from a string (`sh -c`, refused)."""
COMMAND_S = 2.0
"""How long the command step lingers after its line: most of a step's time, so a kill of
the runtime most likely lands mid-command."""
TOOL_DEADLINE_MS = 12_000
"""Each tool step's wait: under half the person's deadline, as the delegation mix's calls."""

LLM_AGENT = "narrator"
"""The LLM mix's agent: each delegation it answers is one streamed model call."""
LLM_MODEL = "chaos-stream"
"""The model it asks for: allowed by the chaos bundle, served by the run's local provider."""
LLM_TIMEOUT_S = 20
"""How long its brain waits for the gateway's answer: under the person's deadline, so a call
that never comes back still ends the delegation with its reason."""

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


def agents_for(
    agents: tuple[str, ...], delegations: int, tools: int = 0, llm: int = 0
) -> tuple[str, ...]:
    """The agents a run starts: the collaboration's, plus the specialist when the delegation
    mix is on, the toolsmith when the tool mix is, and the narrator when the LLM mix is."""
    if delegations > 0 and SPECIALIST not in agents:
        agents = (*agents, SPECIALIST)
    if tools > 0 and TOOL_AGENT not in agents:
        agents = (*agents, TOOL_AGENT)
    if llm > 0 and LLM_AGENT not in agents:
        agents = (*agents, LLM_AGENT)
    return agents


def write_agents(folder: Path, agents: tuple[str, ...], *, delegating: bool = True) -> Path:
    """Write the run's agent folder: each agent's demo profile and script, the delegating
    agent's with the mix's delegates and turns (`delegating`), and the toolsmith's own.
    Returns the folder.

    Raises:
        ValueError: the delegation mix needs claude and the delegating agent among `agents`.
    """
    missing = {DELEGATING_AGENT, "claude", SPECIALIST} - set(agents)
    if delegating and missing:
        raise ValueError(f"the delegation mix needs the agents {sorted(missing)}")
    scripts = folder / "scripts"
    scripts.mkdir(parents=True, exist_ok=True)
    for agent in agents:
        if agent == TOOL_AGENT:
            (folder / f"{agent}.toml").write_text(_TOOL_PROFILE)
            (scripts / f"{agent}.toml").write_text(_tool_turns())
            continue
        if agent == LLM_AGENT:
            (folder / f"{agent}.toml").write_text(_LLM_PROFILE)
            continue
        profile = (_DEPLOY_AGENTS / f"{agent}.toml").read_text()
        script = (_DEPLOY_AGENTS / "scripts" / f"{agent}.toml").read_text()
        if agent == DELEGATING_AGENT and delegating:
            profile = _with_delegates(profile, ("claude", SPECIALIST))
            script = _MIX_TURNS + script
        (folder / f"{agent}.toml").write_text(profile)
        (scripts / f"{agent}.toml").write_text(script)
    return folder


_TOOL_PROFILE = f"""\
# The chaos run's tool mix (tools/chaos/_agents.py): a write and a command per delegation.
name = "{TOOL_AGENT}"
description = "Runs the chaos tool mix's steps through the tool runtime."
model = "scripted"
capabilities = ["delegate_target"]
tools = ["File.Write", "Shell.Exec"]

[brain]
backend = "scripted"
script = "scripts/{TOOL_AGENT}.toml"
"""

_LLM_PROFILE = f"""\
# The chaos run's LLM mix (tools/chaos/_agents.py): one streamed model call per delegation.
name = "{LLM_AGENT}"
description = "Answers the chaos LLM mix's delegations with a model streamed through the gateway."
model = "{LLM_MODEL}"
capabilities = ["delegate_target"]

[brain]
backend = "gateway"
api = "openai"
stream = true
timeout_s = {LLM_TIMEOUT_S}
"""

_COMMAND = (
    'my $line = <STDIN>; open(my $log, ">>", "' + COMMANDS_LOG + '") or die "$!"; '
    'print $log $line; close($log) or die "$!"; '
    f"select(undef, undef, undef, {COMMAND_S})"
)
"""Append stdin's line to the log, then linger (no braces: arguments are templates)."""


def _tool_turns() -> str:
    """The toolsmith's script. Its strings are JSON's, which TOML reads alike."""
    write = {"path": WRITES_LOG, "content": "{task} File.Write\n", "append": True}
    command = {"argv": [PERL, "-e", _COMMAND], "stdin": "{task} Shell.Exec\n"}

    def call(capability: str, arguments: Mapping[str, object]) -> str:
        pairs = ", ".join(f"{key} = {json.dumps(value)}" for key, value in arguments.items())
        return (
            f'calls = [{{ tool = "use_tool", to = "{capability}", '
            f"deadline_ms = {TOOL_DEADLINE_MS}, arguments = {{ {pairs} }} }}]"
        )

    head = f'[[turn]]\nkind = "delegation_request"\ngoal = "{TOOLS_OBJECTIVE}"\n'
    return (
        "# The chaos run's tool mix (tools/chaos/_agents.py): a write, a command, the answer.\n"
        f"{head}step = 0\n{call('File.Write', write)}\n\n"
        f"{head}step = 1\n{call('Shell.Exec', command)}\n\n"
        f'{head}step = 2\nmessage = "{TOOL_AGENT} ran: {{results}}"\nfinal = true\n'
    )


def _with_delegates(profile: str, delegates: tuple[str, ...]) -> str:
    """`profile` with `delegates_to` set, placed before its first table (a TOML key after
    `[brain]` would belong to the brain)."""
    line = "delegates_to = [" + ", ".join(f'"{name}"' for name in delegates) + "]\n"
    head, table, rest = profile.partition("\n[")
    if "delegates_to" in head:
        raise ValueError("the delegating agent's demo profile names its own delegates already")
    return head + "\n" + line + table + rest
