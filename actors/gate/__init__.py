"""The gate (policy enforcer): every envelope from one actor to another passes here.

Public face: `GateActor`, the process `parley run gate` runs; `BUNDLE_KEY`, where signed
policy bundles live in the policy bucket; `id_key`, where the claim of an envelope id the gate
took in lives in the idempotency bucket; `ALLOWED_TOOLS`; and the pure core the benchmarks
and tests call directly: `plan()` (an envelope's place in its trace, or its refusal),
`decide()` (that plan against the bundle and the counters), `required_keys()` (the records a
decision reads) and `Position` (the record of where an envelope sits).

Inside: `_actor` (the process: reads, commits, rounds), `_batch` (a batch planned and
decided in order, pure), `_plan` (with `_checks` and `_routes`) and `_decide` (the rules,
pure), `_records` (the KV records), `_store` (their cache and compare-and-set commits),
`_trace_calls` (a trace's calls awaiting an answer, and what an answer finds of its call),
`_ids` (each envelope id decided once), `_unfinished_causes` (an envelope whose cause the
gate is still recording waits for it), `_rate_leases`, `_roles` (what a sender's profile
lets it do, told to receivers), `_effects` (deliveries, refusals, decisions), `_refusals` and
`_decisions` (what those say, pure), `_redaction`, `_tool_checks` (a tool request's capability
and scope). The bundle in force is bus's `BundleStore`.
"""

from actors.gate._actor import ALLOWED_TOOLS, BUNDLE_KEY, GateActor
from actors.gate._decide import Allow, Ledger, decide, required_keys
from actors.gate._plan import Deny, Route, Submission, plan
from actors.gate._records import Position, id_key

__all__ = (
    "ALLOWED_TOOLS",
    "BUNDLE_KEY",
    "Allow",
    "Deny",
    "GateActor",
    "Ledger",
    "Position",
    "Route",
    "Submission",
    "decide",
    "id_key",
    "plan",
    "required_keys",
)
