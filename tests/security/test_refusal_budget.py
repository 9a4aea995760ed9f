"""One principal's refused submissions cannot fill the stores every admission needs.

A storage review measured it: the policy's rate limit is charged on admission only, and each
refused submission still wrote an id claim (8 days), an error to its sender, a decision and an
audit record. One principal submitting as fast as it could, every submission refused, filled
`idempotency` in about 17 minutes, and then no admission of anyone's could be claimed.

Now the gate records at most `refusals_per_minute` refusals of one sender a minute (5 here),
and the fifth's error says so. Past it, for the rest of the minute, that sender's refusals
record nothing at all (no claim, no error, no decision), while its admissible submissions are
admitted as ever: a flood of bad ones costs it no good one, and another principal is decided
as ever. The flooder is a raw nats-py client holding `cli`'s own credentials (a person), sending
calls to an agent in the router's name, which the gate refuses; every actor is a real process
under the least-privilege config.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from nats.aio.client import Client as NATS

from actors.gate._records import id_key
from bus import SENDER, TraceHeaders
from schemas import (
    AgentCall,
    AnyEnvelope,
    Error,
    ErrorCode,
    decode_envelope,
    encode,
    new_id,
    utc_now,
)
from tests.security.test_refused_answers import decision_on, decisions_of
from tests.security.test_sizes_and_bad_submissions import _inbox, _next
from tests.support.lockdown import LockedDown
from tests.support.system import running_locked_system
from tests.support.wire import human

_BUDGET = 5
_QUIET = 20


def _call_to_gpt() -> AgentCall:
    """A call in the router's name (`AgentCall.sender`), which the gate refuses from `cli`."""
    return AgentCall(
        id=new_id(), created_at=utc_now(), target="gpt", call_id=new_id(), goal="hello"
    )


async def _submit(locked: LockedDown, nc: NATS, sender: str, envelope: AnyEnvelope) -> None:
    headers = TraceHeaders(trace_id=envelope.id, origin=sender).to_headers(envelope.id)
    await locked.js(nc, sender).publish(locked.ns.submit(sender), encode(envelope), headers=headers)


async def test_past_its_refusal_budget_a_senders_refusals_record_nothing_and_good_ones_go_on(
    locked_down: LockedDown, tmp_path: Path
) -> None:
    locked, ns = locked_down, locked_down.ns
    options = {"refusals_per_minute": _BUDGET}
    async with running_locked_system(locked, tmp_path / "keys", agents={}, gate_options=options):
        cli, gpt = await locked.connect("cli"), await locked.connect("gpt")
        admin = await locked.connect("provisioner")
        try:
            on_record = [_call_to_gpt() for _ in range(_BUDGET)]
            for call in on_record:
                await _submit(locked, cli, "cli", call)
            inbox = await _inbox(cli, locked, "cli")
            told = [decode_envelope((await _next(inbox)).data) for _ in range(_BUDGET)]
            errors = [error for error in told if isinstance(error, Error)]
            assert [error.cause_id for error in errors] == [call.id for call in on_record]
            notices = [n for n, error in enumerate(errors) if "without a word" in error.message]
            assert notices == [_BUDGET - 1], errors  # the refusal that spent the budget says so

            quiet = [_call_to_gpt() for _ in range(_QUIET)]
            good = human("hello")
            async with decisions_of(locked, "cli") as decisions:
                for call in quiet:
                    await _submit(locked, cli, "cli", call)
                await _submit(locked, cli, "cli", good)
                assert (await decision_on(decisions, good.id)).allowed  # decided after them
            subject = ns.decisions("cli")
            events = await admin.jetstream().stream_info(
                ns.stream("events"), subjects_filter=subject
            )
            assert (events.state.subjects or {}).get(subject) == _BUDGET + 1, events.state

            bucket = ns.bucket("idempotency")
            prefix = f"$KV.{bucket}."
            stored = await admin.jetstream().stream_info(f"KV_{bucket}", subjects_filter=">")
            claimed = {key[len(prefix) :] for key in stored.state.subjects or {}}
            assert {id_key(m.id) for m in [*on_record, good]} <= claimed
            assert not {id_key(call.id) for call in quiet} & claimed  # no quiet one claimed

            # What cli was told since: the router's answers to its message, no error of ours.
            pending = (await inbox.consumer_info()).num_pending or 0
            later = [await _next(inbox) for _ in range(pending)]
            from_gate = [msg for msg in later if (msg.headers or {}).get(SENDER) == "gate"]
            assert from_gate == [], [decode_envelope(msg.data) for msg in from_gate]

            # Another principal is decided as ever, its refusals on the record.
            async with decisions_of(locked, "gpt") as about_gpt:
                not_its_to_send = human("open a session")  # an agent may not speak for one
                await _submit(locked, gpt, "gpt", not_its_to_send)
                refused = await asyncio.wait_for(decision_on(about_gpt, not_its_to_send.id), 20)
                assert not refused.allowed and refused.code == ErrorCode.UNAUTHORIZED
        finally:
            await cli.close()
            await gpt.close()
            await admin.close()
