"""The processes of a chaos run: the demo's, with what the run's mixes add.

The collaboration load needs the demo topology as deployed (gate, router, auditor, gpt and
claude). The delegation mix adds the reviewer and teaches gpt to delegate, the tool mix adds
the toolsmith: both need agent profiles the deploy folder does not hold, so the run writes
its own agent folder and points every agent at it (tools/chaos/_agents.py). The tool mix
also starts the tool runtime, as `parley up` does, with its workspaces in the run's
directory, where the checker counts the steps' effects.

The LLM mix adds the narrator and starts the LLM gateway (`llm`), its one provider the
run's local streaming server (tools/chaos/_llm_provider.py), its bundle checked with the
gate's key.

The same names are what the fault schedule draws its targets from (`parley chaos --plan`
too), so every process the run starts, the tool runtime included, is one it may kill.
"""

from __future__ import annotations

import json
from pathlib import Path

from bus import ChildSpec, Topology
from tools.chaos._agents import agents_for, write_agents
from tools.demo import demo_topology

__all__ = ("GATEWAY", "TOOL_RUNTIME", "run_topology")

TOOL_RUNTIME = "tools"
"""The tool runtime's actor id: the profile the bundle gives it (deploy/policy/chaos.toml)."""
GATEWAY = "llm"
"""The LLM gateway's actor id: the narrator's model calls' target, and a schedule target."""


def run_topology(
    agents: tuple[str, ...],
    delegations: int,
    tools: int,
    keys: Path,
    work: Path,
    *,
    llm: int = 0,
    provider_url: str = "http://127.0.0.1:9/v1",
) -> Topology:
    """The run's processes; its agent folder is written under `work` when a mix needs one.

    `keys` holds the policy's public key (written once the server is up: the gate, the tool
    runtime and the gateway read it when they start) and the auditor's key, made here.
    `provider_url` is where the LLM mix's gateway finds its provider (a plan needs none).
    """
    agents = agents_for(agents, delegations, tools, llm)
    public_key = keys / "policy.pub"
    topology = demo_topology(public_key, tenant="demo", agents=agents)
    if delegations > 0 or tools > 0 or llm > 0:
        folder = write_agents(work / "agents", agents, delegating=delegations > 0)
        topology = _with_agents_dir(topology, folder)
    if tools > 0:
        topology = _with_tool_runtime(topology, public_key, work / "workspaces")
    if llm > 0:
        topology = _with_gateway(topology, public_key, provider_url)
    return topology


def _with_agents_dir(topology: Topology, folder: Path) -> Topology:
    """`topology` with its agents reading their profiles from `folder` (the run's own)."""
    options = json.dumps({"agents_dir": str(folder.resolve())})
    return topology.model_copy(
        update={
            "actor": tuple(
                spec.model_copy(update={"env": {**spec.env, "PARLEY_OPTIONS": options}})
                if spec.run == "agent"
                else spec
                for spec in topology.actor
            )
        }
    )


def _with_tool_runtime(topology: Topology, public_key: Path, workspaces: Path) -> Topology:
    """`topology` with the tool runtime: it verifies the bundle with the gate's key, and
    makes each session's workspace under `workspaces`."""
    options = {
        "policy_keys": [str(public_key.resolve())],
        "tenant": "demo",
        "workspaces": str(workspaces.resolve()),
    }
    runtime = ChildSpec(name=TOOL_RUNTIME, run="tools", env={"PARLEY_OPTIONS": json.dumps(options)})
    return topology.model_copy(update={"actor": (*topology.actor, runtime)})


def _with_gateway(topology: Topology, public_key: Path, provider_url: str) -> Topology:
    """`topology` with the LLM gateway, every model served by the provider at `provider_url`
    (a local server: no key)."""
    options = {
        "policy_keys": [str(public_key.resolve())],
        "tenant": "demo",
        "providers": {"local": {"api": "openai", "base_url": provider_url}},
        "models": {"*": "local"},
    }
    gateway = ChildSpec(name=GATEWAY, run="llm", env={"PARLEY_OPTIONS": json.dumps(options)})
    return topology.model_copy(update={"actor": (*topology.actor, gateway)})
