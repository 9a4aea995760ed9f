"""Issue 35, item 1: a decision reads and writes the same records whatever its trace's length.

The trace's record keeps its counters and the calls awaiting an answer; which answer closed a
call is a record of its own (actors/gate/_trace_calls.py). Checked here as a structure, not a
time: the bytes of the records a decision reads and writes in a trace of 400 envelopes are
those in a trace of 10 (but for the digits of its counters). Then what an answer finds when
only one of its charge's two writes was stored, and traces recorded by the gate before.
"""

from __future__ import annotations

import msgspec
from msgspec import Struct

from actors.gate._decide import ANSWER_GRACE_MS, Allow, Ledger, required_keys
from actors.gate._plan import Deny
from actors.gate._records import CallAnswer, TraceState, answer_key, position_key, trace_key
from actors.gate._store import _decode
from schemas import AgentResponse
from tests.support.gatesim import (
    GateSim,
    bundle,
    call,
    delegation,
    delegation_done,
    human,
    response,
)

PROFILES = {
    "cli": {"start_traces": True, "speaks_for_person": True, "allowed_targets": ("router",)},
    "router": {
        "allowed_targets": ("claude",),
        "trace_message_budget": 100_000,
        "rate_per_minute": 100_000,
    },
    "claude": {
        "allowed_targets": ("router",),
        "trace_message_budget": 100_000,
        "rate_per_minute": 100_000,
    },
}

_encoder = msgspec.json.Encoder()


class _KeepingLedger(Ledger):
    """Keeps what each record held before a decision wrote it: what the decision read."""

    def __init__(self) -> None:
        super().__init__()
        self.before: dict[str, Struct | None] = {}

    def put(self, key: str, value: Struct) -> None:
        self.before.setdefault(key, self.values.get(key))
        super().put(key, value)


def _size(value: Struct | None) -> int:
    return len(_encoder.encode(value)) if value is not None else 0


def _session(sim: GateSim, envelopes: int) -> str:
    """A person's message, then the router's calls to claude and claude's answers, until the
    trace holds `envelopes`; the id of the envelope the router holds last."""
    root = human()
    assert isinstance(sim.submit("cli", root), Allow)
    held, count = root.id, 1
    while count < envelopes:
        asked = call("claude", goal="summarise")
        assert isinstance(sim.submit("router", asked, cause=held), Allow)
        answer = response("claude", tokens=3)
        assert isinstance(sim.submit("claude", answer, cause=asked.id), Allow)
        held, count = answer.id, count + 2
    return held


def _bytes_of_one_call_and_answer(envelopes: int) -> list[tuple[int, int]]:
    """(bytes of the records read, bytes written) by a call and its answer decided in a trace
    of `envelopes`, records as the gate stores them in KV."""
    sim = GateSim(bundle(**PROFILES), ledger=_KeepingLedger())
    held = _session(sim, envelopes)
    ledger = sim.ledger
    assert isinstance(ledger, _KeepingLedger)
    figures = []
    asked = call("claude", goal="summarise")
    for sender, envelope, cause in (("router", asked, held), ("claude", None, asked.id)):
        ledger.before, ledger.dirty = {}, set()
        outcome = sim.submit(sender, envelope or response("claude", tokens=3), cause=cause)
        assert isinstance(outcome, Allow)
        read = _size(ledger.get(position_key(cause), Struct)) + sum(
            _size(ledger.before[key] if key in ledger.before else ledger.values.get(key))
            for key in required_keys(outcome.route)
        )
        written = sum(
            _size(ledger.values[key]) for key in ledger.dirty if not key.startswith("pos.")
        )
        figures.append((read, written))
    return figures


def test_a_decision_reads_and_writes_the_same_bytes_in_a_long_trace_as_in_a_short_one() -> None:
    short, long = _bytes_of_one_call_and_answer(11), _bytes_of_one_call_and_answer(401)
    for (read_short, written_short), (read_long, written_long) in zip(short, long, strict=True):
        # Only the counters' digits may differ (a count of 11 against 401, tokens alike).
        assert read_long - read_short <= 8, (short, long)
        assert written_long - written_short <= 8, (short, long)


def test_an_answered_call_leaves_its_traces_record_and_names_its_answer_apart() -> None:
    sim = GateSim(bundle(**PROFILES))
    held = _session(sim, 1)
    asked = call("claude")
    assert isinstance(sim.submit("router", asked, cause=held), Allow)
    trace_k = trace_key(sim.position(asked.id).trace_id)
    trace = sim.ledger.get(trace_k, TraceState)
    assert trace is not None and set(trace.live) == {asked.id}
    answer = response("claude")
    assert isinstance(sim.submit("claude", answer, cause=asked.id), Allow)
    trace = sim.ledger.get(trace_k, TraceState)
    assert trace is not None and not trace.live and not trace.open_calls
    assert sim.ledger.get(answer_key(asked.id), CallAnswer) == CallAnswer(answer_id=answer.id)


def _answered_once(sim: GateSim) -> tuple[str, str, str, TraceState]:
    """A call answered once: (call id, answer id, trace key, the trace's record before the
    answer), for tests that then take one of the answer's two writes back."""
    held = _session(sim, 1)
    asked = call("claude")
    assert isinstance(sim.submit("router", asked, cause=held), Allow)
    trace_k = trace_key(sim.position(asked.id).trace_id)
    before = sim.ledger.get(trace_k, TraceState)
    assert before is not None
    answer = response("claude", tokens=5)
    assert isinstance(sim.submit("claude", answer, cause=asked.id), Allow)
    return asked.id, answer.id, trace_k, before


def test_an_answer_whose_trace_write_was_lost_is_charged_to_the_trace_when_decided_again() -> None:
    sim = GateSim(bundle(**PROFILES))
    call_id, answer_id, trace_k, before = _answered_once(sim)
    charged = sim.ledger.get(trace_k, TraceState)
    sim.ledger.values[trace_k] = before  # only the answer's record was stored
    again = structs_replace_id(response("claude", tokens=5), answer_id)
    assert isinstance(sim.submit("claude", again, cause=call_id), Allow)
    assert sim.ledger.get(trace_k, TraceState) == charged  # charged once, now
    second = sim.submit("claude", response("claude"), cause=call_id)
    assert isinstance(second, Deny) and second.rule == "duplicate_answer"


def test_an_answer_whose_record_write_was_lost_is_admitted_again_and_not_charged_twice() -> None:
    sim = GateSim(bundle(**PROFILES))
    call_id, answer_id, trace_k, _ = _answered_once(sim)
    charged = sim.ledger.get(trace_k, TraceState)
    del sim.ledger.values[answer_key(call_id)]  # only the trace's write was stored
    again = structs_replace_id(response("claude", tokens=5), answer_id)
    assert isinstance(sim.submit("claude", again, cause=call_id), Allow)
    assert sim.ledger.get(trace_k, TraceState) == charged
    assert sim.ledger.get(answer_key(call_id), CallAnswer) == CallAnswer(answer_id=answer_id)
    second = sim.submit("claude", response("claude"), cause=call_id)
    assert isinstance(second, Deny) and second.rule == "duplicate_answer"


def test_another_answer_that_finds_the_record_of_the_first_is_refused() -> None:
    """Two replicas decided two answers to one call: the one whose record was created first
    is the call's answer, even where the other's trace write was stored."""
    sim = GateSim(bundle(**PROFILES))
    call_id, answer_id, _, _ = _answered_once(sim)
    sim.ledger.values[answer_key(call_id)] = CallAnswer(answer_id="another")
    again = structs_replace_id(response("claude", tokens=5), answer_id)
    refused = sim.submit("claude", again, cause=call_id)
    assert isinstance(refused, Deny) and refused.rule == "duplicate_answer"


def test_an_answer_past_its_recorded_deadline_and_grace_is_still_refused() -> None:
    profiles = {
        **PROFILES,
        "router": {**PROFILES["router"], "allowed_targets": ("claude",)},
        "claude": {**PROFILES["claude"], "allowed_targets": ("router",)},
    }
    sim = GateSim(bundle(**profiles))
    held = _session(sim, 1)
    asked = delegation("router", "claude", user_id="")
    assert isinstance(sim.submit("router", asked, cause=held), Allow)
    deadline = sim.position(asked.id).levels[-1].deadline_ms
    assert deadline is not None
    sim.now_ms = deadline + ANSWER_GRACE_MS
    late = sim.submit("claude", delegation_done("claude"), cause=asked.id)
    assert isinstance(late, Deny) and late.rule == "duplicate_answer", late


_OLD_TRACE = (
    b'{"count":5,"user_id":"","tokens":7,"open_calls":{'
    b'"OPEN":{"objective":"router>claude:aaaaaaaa","expires_ms":%d},'
    b'"DONE":{"objective":"router>claude:bbbbbbbb","expires_ms":%d,"answered_by":"ANSWER"}}}'
)


def test_a_trace_recorded_by_the_previous_gate_is_read_on() -> None:
    """The previous gate kept every call in `open_calls`, answered ones with their answer:
    its open calls are open still (in progress, and open to one answer), its answered ones
    still refuse a second answer and admit their own again, charged nothing."""
    sim = GateSim(bundle(**PROFILES))
    held = _session(sim, 1)
    open_call, done_call = call("claude", goal="open"), call("claude", goal="done")
    for asked in (open_call, done_call):
        assert isinstance(sim.submit("router", asked, cause=held), Allow)
    trace_k = trace_key(sim.position(held).trace_id)
    expires = sim.now_ms + 60_000
    old = _OLD_TRACE.replace(b"OPEN", open_call.id.encode()).replace(b"DONE", done_call.id.encode())
    sim.ledger.values[trace_k] = _decode(trace_k, old % (expires, expires))
    for key in (answer_key(open_call.id), answer_key(done_call.id)):
        sim.ledger.values.pop(key, None)
    # The answered call: its own answer again is admitted, charged nothing; another refused.
    again = structs_replace_id(response("claude"), "ANSWER")
    assert isinstance(sim.submit("claude", again, cause=done_call.id), Allow)
    trace = sim.ledger.get(trace_k, TraceState)
    assert trace is not None and (trace.count, trace.tokens) == (5, 7)
    other = sim.submit("claude", response("claude"), cause=done_call.id)
    assert isinstance(other, Deny) and other.rule == "duplicate_answer"
    # The open call moved into `live`, and takes its one answer.
    assert set(trace.live) == {open_call.id} and set(trace.open_calls) == {done_call.id}
    assert isinstance(sim.submit("claude", response("claude", tokens=2), cause=open_call.id), Allow)
    trace = sim.ledger.get(trace_k, TraceState)
    assert trace is not None and (trace.count, trace.tokens, trace.live) == (6, 9, {})
    second = sim.submit("claude", response("claude"), cause=open_call.id)
    assert isinstance(second, Deny) and second.rule == "duplicate_answer"
    # Once past their grace, the previous gate's calls leave the record.
    sim.now_ms = expires + ANSWER_GRACE_MS
    assert isinstance(sim.submit("router", call("claude"), cause=held), Allow)
    trace = sim.ledger.get(trace_k, TraceState)
    assert trace is not None and not trace.open_calls


def structs_replace_id(envelope: AgentResponse, envelope_id: str) -> AgentResponse:
    """`envelope` under another id: the same answer redelivered."""
    return msgspec.structs.replace(envelope, id=envelope_id)
