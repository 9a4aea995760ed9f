"""The delegation mix of a chaos run's load: a person delegating to an agent, back to back.

Each worker delegates the mix's objective to the delegating agent as the CLI would
(`parley delegate @gpt`): a `delegation_request` submitted as a root, retried through a broker
outage with the same id. It waits for the answer before it delegates again, and an answer that
never comes is the checker's to report: the worker gives up at the request's deadline plus a
margin and goes on.

The worker learns of the answer from the gate's decisions, not from the person's deliveries:
the decision admitting an answer (or refusing the request) is what the checker reads too, and
following `parley.decisions.>` on the operator's connection needs no durable of the person's.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.api import DeliverPolicy

from actors.delegation import Delegate, request_envelope
from schemas import Decision, ErrorCode, Namespace, decode_envelope, new_id
from tools.chaos._agents import DELEGATING_AGENT, MIX_OBJECTIVE
from tools.chaos._checker import Published
from tools.chaos._load import CLI, Load, LoadEnd, submit_root

__all__ = ("ANSWER_KINDS", "DEADLINE_MS", "MARGIN_S", "delegation_worker", "follow_answers")

DEADLINE_MS = 30_000
"""Each delegation's deadline: the person's policy cap (deploy/policy/chaos.toml)."""
MARGIN_S = 5.0
"""Past the deadline: the answer made at the deadline still crosses the gate."""
ANSWER_KINDS = frozenset({"delegation_response", "error"})


def _request(envelope_id: str) -> Delegate:
    del envelope_id  # the mix's delegations are all alike
    return Delegate(
        request_id="chaos",
        target_employee=DELEGATING_AGENT,
        objective=f"{MIX_OBJECTIVE}: weigh the plan",
        input="the release plan",
        deadline_ms=DEADLINE_MS,
    )


async def delegation_worker(
    js: JetStreamContext,
    ns: Namespace,
    load: Load,
    end: LoadEnd,
    request: Callable[[str], Delegate] = _request,
) -> None:
    """Delegate one request after another until the load's end: `request` makes each one
    from its envelope id (the tool mix's name their own, tools/chaos/_tools.py)."""
    give_up_at = end.give_up_at
    while not end.reached():
        envelope_id = new_id()
        envelope = request_envelope(
            request(envelope_id),
            envelope_id=envelope_id,
            sender=CLI,
            user_id="chaos",
            session_id=new_id(),
            depth=0,
        )
        answered = load.answered.setdefault(envelope.id, asyncio.Event())
        seq = await submit_root(js, ns, envelope, give_up_at)
        if seq == 0:
            load.answered.pop(envelope.id, None)
            return
        load.roots.append(Published(envelope.id, seq, "gate", "delegation_request", time.time()))
        patience = min(DEADLINE_MS / 1000 + MARGIN_S, max(give_up_at - time.monotonic(), 0.1))
        try:
            async with asyncio.timeout(patience):
                await answered.wait()
        except TimeoutError:
            continue  # the checker reports it unanswered


async def follow_answers(js: JetStreamContext, ns: Namespace, load: Load) -> None:
    """Mark delegations answered as the gate decides on their answers (or refuses them).

    Through an ordered consumer on an operator's connection, as `follow_events` does, for the
    same reason: a decision stored while a live follower was away would leave its worker
    waiting out the deadline.
    """

    async def on_decision(raw: Msg) -> None:
        try:
            decision = decode_envelope(raw.data)
        except ValueError:
            return
        if not isinstance(decision, Decision) or decision.code == ErrorCode.DUPLICATE_ENVELOPE:
            return  # a repeat refused: the first decision on it stands
        if decision.target == CLI and decision.envelope_kind in ANSWER_KINDS:
            waiting = load.answered.get(decision.causation_id)
        elif decision.sender == CLI and not decision.allowed:
            waiting = load.answered.get(decision.envelope_id)  # the gate answers with an error
        else:
            return
        if waiting is not None:
            waiting.set()

    await js.subscribe(
        ns.wildcard("decisions"),
        stream=ns.stream("events"),
        cb=on_decision,
        ordered_consumer=True,
        deliver_policy=DeliverPolicy.NEW,
        idle_heartbeat=0.5,
    )
