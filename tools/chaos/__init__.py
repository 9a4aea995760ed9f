"""`parley chaos`: the real actors under load while faults are injected, then the history checked.

Public face: `run_chaos` with its `ChaosOptions`, `add_chaos_command`, and `EVERY_ACTOR`;
`run_shared_chaos` with its `SharedChaosOptions` (`--shared`: two deployments and a gateway).

Inside: `_command` (the run), `_cli` (its command line), `_schedule` (which fault when),
`_faults` (injecting them), `_procs` (the actor processes), `_load` (the sessions it submits),
`_delegations` (the delegations it makes, with `--delegations`), `_tools` (the tool steps it
has an agent run, with `--tools`), `_llm_mix` (the model calls it has an agent stream through
the LLM gateway, with `--llm`, from `_llm_provider`'s slow local server), `_agents` (the
agent profiles those mixes need),
`_topology` (the processes it starts), `_lockdown` (the least-privilege broker it runs
under), `_records` (reading the stored history back), `_facts` (what that history is made
of), `_checker` (what must hold of it), `_tool_check` (what must hold of the tool steps),
`_llm_check` (of the model calls) and `_connections` (the run's own connections, and its walk
of the audit chain).
With `--shared`: `_shared_command` (the run), `_shared_faults` (its schedule and faults),
`_shared_records` (both deployments' history) and `_shared_check` (issue 16's rule).
"""

from tools.chaos._cli import add_chaos_command
from tools.chaos._command import EVERY_ACTOR, ChaosOptions, run_chaos
from tools.chaos._shared_command import SharedChaosOptions, run_shared_chaos

__all__ = (
    "EVERY_ACTOR",
    "ChaosOptions",
    "SharedChaosOptions",
    "add_chaos_command",
    "run_chaos",
    "run_shared_chaos",
)
