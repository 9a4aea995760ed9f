"""Every rule of seeds 000, 003 and 004 (their verification and compliance lists), and the
gate's own, through the pure core: each refusal's code and the numbers its message names."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta

import pytest
from msgspec import structs

from actors.gate._batch import plan_batch
from actors.gate._decide import Allow, Ledger, Paid, decide, implied_root_trace, required_keys
from actors.gate._plan import Deny, Route, Submission
from actors.gate._records import (
    SessionTokens,
    TraceState,
    position_key,
    session_tokens_key,
    trace_key,
)
from actors.router._opening import session_id_for
from bus import CAUSATION_ID, HOP_COUNT, ORIGIN, TRACE_ID
from schemas import (
    Control,
    ErrorCode,
    LlmPolicy,
    ProfilePolicy,
    ToolRequest,
    derive_id,
    new_id,
    utc_now,
)
from tests.support.gatesim import (
    NOW,
    GateSim,
    bundle,
    call,
    delegation,
    delegation_done,
    human,
    response,
    sub_agent,
    sub_agent_done,
)

ROUTER = {
    "start_traces": True,
    "allowed_targets": ("a", "b", "c", "d", "prime"),
    "max_hop_count": 5,
}
CLI = {"start_traces": True, "speaks_for_person": True, "allowed_targets": ("router",)}


def _ok(outcome: Allow | Deny) -> Allow:
    assert isinstance(outcome, Allow), outcome
    return outcome


def _router_calls(sim: GateSim, target: str, **kw: str) -> str:
    """cli -> router (a root), then router -> target: returns the call's id."""
    root = human(**kw)
    _ok(sim.submit("cli", root))
    first = call(target, **kw)
    _ok(sim.submit("router", first, cause=root.id))
    return first.id


# -- seed 000: shared agents, hop count, self-loop, rate, allowlists -----------------------


def allowlist_denies_other_targets(sim: GateSim) -> Allow | Deny:
    cid = _router_calls(sim, "a")
    return sim.submit("a", call("c"), cause=cid)


def hop_count_above_max(sim: GateSim) -> Allow | Deny:
    cid = _router_calls(sim, "a")  # a holds hop 1
    to_b = call("b")
    _ok(sim.submit("a", to_b, cause=cid))  # hop 2 == maxHopCount: allowed
    return sim.submit("b", call("c"), cause=to_b.id)  # hop 3


def self_loop(sim: GateSim) -> Allow | Deny:
    cid = _router_calls(sim, "a")
    return sim.submit("a", call("a"), cause=cid)


def rate_per_profile_and_target(sim: GateSim) -> Allow | Deny:
    cid = _router_calls(sim, "a")
    outcome: Allow | Deny = _ok(sim.submit("a", call("b", goal="0"), cause=cid))
    for n in range(1, 4):
        outcome = sim.submit("a", call("b", goal=str(n)), cause=cid)
    return outcome


def shared_calls_denied_by_default(sim: GateSim) -> Allow | Deny:
    cid = _router_calls(sim, "a")
    return sim.submit("a", call("remote"), cause=cid)


def shared_device_not_allowed(sim: GateSim) -> Allow | Deny:
    cid = _router_calls(sim, "b")
    return sim.submit("b", call("remote2"), cause=cid)


def max_concurrent_shared_calls(sim: GateSim) -> Allow | Deny:
    cid = _router_calls(sim, "d")
    for n in range(3):
        _ok(sim.submit("d", call("remote", goal=str(n)), cause=cid))
    return sim.submit("d", call("remote", goal="3"), cause=cid)


def recursive_chain_is_a_cycle(sim: GateSim) -> Allow | Deny:
    cid = _router_calls(sim, "a")
    to_b = call("b")
    _ok(sim.submit("a", to_b, cause=cid))
    return sim.submit("b", call("a"), cause=to_b.id)


# -- seed 003: depth, fan-out, objective cycles, deadline, tokens, users, tools, PII ------------


def _prime(sim: GateSim) -> str:
    return _router_calls(sim, "prime", user_id="u1")


def delegation_depth_one_allowed(sim: GateSim) -> Allow | Deny:
    return sim.submit("prime", delegation("prime", "byte"), cause=_prime(sim))


def delegation_depth_two_blocked(sim: GateSim) -> Allow | Deny:
    to_byte = delegation("prime", "byte")
    _ok(sim.submit("prime", to_byte, cause=_prime(sim)))
    return sim.submit("byte", delegation("byte", "tag"), cause=to_byte.id)


def fan_out_of_four(sim: GateSim) -> Allow | Deny:
    cid = _prime(sim)
    for target in ("byte", "tag", "crystal"):
        _ok(sim.submit("prime", delegation("prime", target, objective=target), cause=cid))
    return sim.submit("prime", delegation("prime", "ledger", objective="ledger"), cause=cid)


def same_objective_in_progress(sim: GateSim) -> Allow | Deny:
    cid = _prime(sim)
    _ok(sim.submit("prime", delegation("prime", "byte"), cause=cid))
    return sim.submit("prime", delegation("prime", "byte"), cause=cid)


def deadline_already_past(sim: GateSim) -> Allow | Deny:
    to_byte = delegation("prime", "byte", deadline_ms=5000)
    _ok(sim.submit("prime", to_byte, cause=_prime(sim)))
    sim.now_ms += 6000
    return sim.submit("byte", call("tag"), cause=to_byte.id)


def token_budget(sim: GateSim) -> Allow | Deny:
    return sim.submit("prime", delegation("prime", "byte", max_tokens=1500), cause=_prime(sim))


def user_isolation(sim: GateSim) -> Allow | Deny:
    return sim.submit("prime", delegation("prime", "byte", user_id="u2"), cause=_prime(sim))


def tool_not_in_tools_allowed(sim: GateSim) -> Allow | Deny:
    to_byte = delegation("prime", "byte")
    _ok(sim.submit("prime", to_byte, cause=_prime(sim)))
    request = ToolRequest(
        id=new_id(),
        created_at=utc_now(),
        tool_name="shell",
        session_id="s",
        task_id="t",
        step_id="st",
    )
    return sim.submit("byte", request, cause=to_byte.id)


# -- seed 004: sub-agent permission, depth, cycles, tool narrowing, nesting ------------------


def _planner(sim: GateSim) -> str:
    return _router_calls(sim, "a")


def sub_agent_calls_need_permission(sim: GateSim) -> Allow | Deny:
    cid = _router_calls(sim, "b")
    return sim.submit("b", sub_agent("b", "c"), cause=cid)


def sub_agent_depth_five(sim: GateSim) -> Allow | Deny:
    cause = _planner(sim)  # a at hop 1
    holder = "a"
    for target in ("s1", "s2", "s3", "s4"):  # hops 2..5
        nxt = sub_agent(holder, target, nested=True)
        _ok(sim.submit(holder, nxt, cause=cause))
        cause, holder = nxt.id, target
    return sim.submit(holder, sub_agent(holder, "s5", nested=True), cause=cause)  # hop 6


def sub_agent_cycle(sim: GateSim) -> Allow | Deny:
    cause = _planner(sim)
    to_s1 = sub_agent("a", "s1", nested=True)
    _ok(sim.submit("a", to_s1, cause=cause))
    to_s2 = sub_agent("s1", "s2", nested=True)
    _ok(sim.submit("s1", to_s2, cause=to_s1.id))
    return sim.submit("s2", sub_agent("s2", "a", nested=True), cause=to_s2.id)


def allowed_tools_never_widen(sim: GateSim) -> Allow | Deny:
    cause = _planner(sim)
    to_s1 = sub_agent("a", "s1", tools=("read",), nested=True)
    _ok(sim.submit("a", to_s1, cause=cause))
    return sim.submit("s1", sub_agent("s1", "s2", tools=("read", "write")), cause=to_s1.id)


def nested_calls_off_by_default(sim: GateSim) -> Allow | Deny:
    cause = _planner(sim)
    to_s1 = sub_agent("a", "s1")
    _ok(sim.submit("a", to_s1, cause=cause))
    return sim.submit("s1", sub_agent("s1", "s2"), cause=to_s1.id)


# -- the gate's own: forgery, identity, roots, budgets, the bundle --------------------------


def forged_hop_count(sim: GateSim) -> Allow | Deny:
    cid = _router_calls(sim, "a")
    return sim.submit("a", response("a"), cause=cid, claims={HOP_COUNT: "5"})


def forged_trace_id(sim: GateSim) -> Allow | Deny:
    cid = _router_calls(sim, "a")
    return sim.submit("a", response("a"), cause=cid, claims={TRACE_ID: new_id()})


def forged_origin(sim: GateSim) -> Allow | Deny:
    cid = _router_calls(sim, "a")
    return sim.submit("a", response("a"), cause=cid, claims={ORIGIN: "router"})


def unknown_cause(sim: GateSim) -> Allow | Deny:
    return sim.submit("a", response("a"), cause=new_id())


def someone_elses_cause(sim: GateSim) -> Allow | Deny:
    cid = _router_calls(sim, "a")
    return sim.submit("b", response("b"), cause=cid)


def forged_display_identity(sim: GateSim) -> Allow | Deny:
    cid = _router_calls(sim, "a")
    return sim.submit("a", response("b"), cause=cid)


def agents_may_not_start_traces(sim: GateSim) -> Allow | Deny:
    return sim.submit("a", call("b"))


def agents_may_not_send_human_messages(sim: GateSim) -> Allow | Deny:
    cid = _router_calls(sim, "a")
    return sim.submit("a", human(), cause=cid)


def agents_may_not_send_controls(sim: GateSim) -> Allow | Deny:
    cid = _router_calls(sim, "a")
    stop = Control(id=new_id(), created_at=utc_now(), action="stop", session_id=new_id())
    return sim.submit("a", stop, cause=cid)


def no_profile(sim: GateSim) -> Allow | Deny:
    return sim.submit("stranger", human())


def protocol_version(sim: GateSim) -> Allow | Deny:
    return sim.submit("cli", structs.replace(human(), v=2))


def trace_budget(sim: GateSim) -> Allow | Deny:
    cid = _router_calls(sim, "b")
    answer = response("b")
    _ok(sim.submit("b", answer, cause=cid))
    for _ in range(10):  # router <-> b ping-pong that never deepens
        again = call("b")
        _ok(sim.submit("router", again, cause=answer.id))
        answer = response("b")
        outcome = sim.submit("b", answer, cause=again.id)
        if isinstance(outcome, Deny):
            return outcome
    raise AssertionError("the ping-pong was never stopped")


def concurrent_calls(sim: GateSim) -> Allow | Deny:
    cid = _router_calls(sim, "c")
    for n in range(2):
        _ok(sim.submit("c", call("a", goal=str(n)), cause=cid))
    return sim.submit("c", call("b", goal="x"), cause=cid)


def session_tokens(sim: GateSim) -> Allow | Deny:
    cid = _router_calls(sim, "a")
    answer = response("a", tokens=5000)
    _ok(sim.submit("a", answer, cause=cid))
    return sim.submit("router", call("a"), cause=answer.id)


def answer_to_someone_else(sim: GateSim) -> Allow | Deny:
    cid = _router_calls(sim, "a")
    return sim.submit("a", response("a", target="b"), cause=cid)


def nothing_to_answer(sim: GateSim) -> Allow | Deny:
    root = human()
    _ok(sim.submit("cli", root))
    return sim.submit("router", response("router"), cause=root.id)


@dataclass(frozen=True)
class Case:
    scenario: Callable[[GateSim], Allow | Deny]
    code: ErrorCode | None
    message: str = ""


PROFILES = {
    "cli": CLI,
    "router": ROUTER,
    "a": {
        "allowed_targets": ("b", "router", "remote", "s1"),
        "rate_per_minute": 3,
        "max_concurrent_calls": 10,
        "max_fan_out": 10,
        "allow_sub_agent_calls": True,
        "tools_allowed": ("read", "write"),
    },
    "b": {
        "allowed_targets": ("a", "c", "router", "remote2"),
        "allow_shared_agent_calls": True,
        "trace_message_budget": 5,
    },
    "c": {
        "allowed_targets": ("a", "b", "remote"),
        "allow_shared_agent_calls": True,
        "allowed_shared_device_ids": ("remote",),
        "max_concurrent_calls": 2,
        "max_hop_count": 3,
    },
    "d": {
        "allowed_targets": ("remote",),
        "allow_shared_agent_calls": True,
        "allowed_shared_device_ids": ("remote",),
        "max_concurrent_calls": 10,
        "max_fan_out": 10,
    },
    "prime": {"allowed_targets": ("byte", "tag", "crystal", "ledger"), "max_concurrent_calls": 5},
    "byte": {"allowed_targets": ("tag",), "tools_allowed": ("ocr",), "max_hop_count": 5},
    "s1": {
        "allowed_targets": ("s2",),
        "allow_sub_agent_calls": True,
        "tools_allowed": ("read", "write"),
    },
    "s2": {
        "allowed_targets": ("a", "s3"),
        "allow_sub_agent_calls": True,
        "tools_allowed": ("read", "write"),
    },
    "s3": {"allowed_targets": ("s4",), "allow_sub_agent_calls": True},
    "s4": {"allowed_targets": ("s5",), "allow_sub_agent_calls": True},
}

CASES = {
    # seed 000
    "000 policy blocks a disallowed target": Case(
        allowlist_denies_other_targets,
        ErrorCode.TARGET_NOT_ALLOWED,
        "a may not send to c (allowed: b, router, remote, s1)",
    ),
    "000 hop_count > maxHopCount": Case(
        hop_count_above_max, ErrorCode.HOP_LIMIT_EXCEEDED, "Hop count 3 exceeds maxHopCount 2"
    ),
    "000 self-loop (origin == target)": Case(
        self_loop, ErrorCode.SELF_LOOP, "a may not send to itself"
    ),
    "000 rate limit per (profile, target)": Case(
        rate_per_profile_and_target, ErrorCode.RATE_LIMITED, "a -> b exceeds 3 messages per"
    ),
    "000 allowSharedAgentCalls defaults to deny": Case(
        shared_calls_denied_by_default,
        ErrorCode.CAPABILITY_DENIED,
        "allowSharedAgentCalls is false",
    ),
    "000 allowedSharedDeviceIds": Case(
        shared_device_not_allowed, ErrorCode.TARGET_NOT_ALLOWED, "allowedSharedDeviceIds"
    ),
    "000 maxConcurrentSharedCalls (3)": Case(
        max_concurrent_shared_calls,
        ErrorCode.RATE_LIMITED,
        "3 shared-agent calls in flight, maxConcurrentSharedCalls is 3",
    ),
    "000 loop prevention blocks recursive chains": Case(
        recursive_chain_is_a_cycle,
        ErrorCode.CYCLE_DETECTED,
        "a is already on the call chain (router -> a -> b -> a)",
    ),
    # seed 003
    "003 test 1: depth 1 succeeds": Case(delegation_depth_one_allowed, None),
    "003 test 1: depth 2 fails": Case(
        delegation_depth_two_blocked,
        ErrorCode.DEPTH_LIMIT_EXCEEDED,
        "Delegation depth limit reached (2/2)",
    ),
    "003 fan-out enforced (<= 3)": Case(
        fan_out_of_four, ErrorCode.FAN_OUT_EXCEEDED, "Too many concurrent delegates (4/3)"
    ),
    "003 test 2: cycle detection (same objective)": Case(
        same_objective_in_progress,
        ErrorCode.CYCLE_DETECTED,
        "prime -> byte with same objective already in progress",
    ),
    "003 test 3: deadline": Case(
        deadline_already_past, ErrorCode.DEADLINE_EXCEEDED, "deadline passed 1000 ms ago"
    ),
    "003 token budgets set": Case(
        token_budget,
        ErrorCode.BUDGET_EXCEEDED,
        "Estimated tokens (1500) exceeds budget (1200)",
    ),
    "003 user isolation verified": Case(
        user_isolation, ErrorCode.USER_MISMATCH, "User ID mismatch - security violation"
    ),
    "003 tool authorization checked": Case(
        tool_not_in_tools_allowed,
        ErrorCode.TOOL_NOT_ALLOWED,
        "Employee byte not authorized to use tool shell",
    ),
    # seed 004
    "004 permission checks enforce allow_sub_agent_calls": Case(
        sub_agent_calls_need_permission,
        ErrorCode.CAPABILITY_DENIED,
        "b may not call sub-agents (allow_sub_agent_calls is false)",
    ),
    "004 depth limit prevents infinite recursion (5)": Case(
        sub_agent_depth_five,
        ErrorCode.DEPTH_LIMIT_EXCEEDED,
        "depth 6 exceeds the limit of 5",
    ),
    "004 cycles are detected (A->B->C->A)": Case(
        sub_agent_cycle, ErrorCode.CYCLE_DETECTED, "a is already on the call chain"
    ),
    "004 allowed_tools restricts the sub-agent": Case(
        allowed_tools_never_widen, ErrorCode.TOOL_NOT_ALLOWED, "may not be given tool 'write'"
    ),
    "004 nested calls need allow_nested_calls": Case(
        nested_calls_off_by_default, ErrorCode.CAPABILITY_DENIED, "without allow_nested_calls"
    ),
    # the gate's own
    "forged Parley-Hop-Count": Case(
        forged_hop_count, ErrorCode.FORGED_HEADER, "Parley-Hop-Count claims '5'"
    ),
    "forged Parley-Trace-Id": Case(forged_trace_id, ErrorCode.FORGED_HEADER, "Parley-Trace-Id"),
    "forged Parley-Origin": Case(forged_origin, ErrorCode.FORGED_HEADER, "Parley-Origin"),
    "cause the gate never delivered": Case(
        unknown_cause, ErrorCode.FORGED_HEADER, "names no envelope the gate delivered"
    ),
    "cause delivered to someone else": Case(
        someone_elses_cause, ErrorCode.FORGED_HEADER, "was delivered to 'a', not 'b'"
    ),
    "display identity names another agent": Case(
        forged_display_identity, ErrorCode.FORGED_HEADER, "sender claims 'b'"
    ),
    "agents may not start traces": Case(
        agents_may_not_start_traces, ErrorCode.UNAUTHORIZED, "a may not start a new trace"
    ),
    "only a person's principal sends human_message": Case(
        agents_may_not_send_human_messages, ErrorCode.UNAUTHORIZED, "a may not send human_message"
    ),
    "only a person's principal sends control": Case(
        agents_may_not_send_controls, ErrorCode.UNAUTHORIZED, "a may not send control"
    ),
    "sender without a profile": Case(no_profile, ErrorCode.UNAUTHORIZED, "no profile"),
    "protocol version": Case(
        protocol_version, ErrorCode.INVALID_REQUEST, "protocol version 2 is not supported"
    ),
    "per-trace message budget stops a ping-pong": Case(
        trace_budget, ErrorCode.BUDGET_EXCEEDED, "has used its budget of 5 messages"
    ),
    "concurrent calls per profile": Case(
        concurrent_calls, ErrorCode.RATE_LIMITED, "c has 2 calls awaiting answers, the limit is 2"
    ),
    "LLM session token budget": Case(
        session_tokens, ErrorCode.LLM_BUDGET_EXCEEDED, "has spent 5000 of its 4000 tokens"
    ),
    "a return goes to its caller only": Case(
        answer_to_someone_else, ErrorCode.TARGET_NOT_ALLOWED, "came from 'router'"
    ),
    "a return needs a call to answer": Case(
        nothing_to_answer, ErrorCode.INVALID_REQUEST, "answers no call"
    ),
}


@pytest.mark.parametrize("name", list(CASES))
def test_rule(name: str) -> None:
    case = CASES[name]
    policy = structs.replace(
        bundle(**PROFILES),
        shared_agents=("remote", "remote2"),
        llm_policy=LlmPolicy(max_session_tokens=4000),
    )
    outcome = case.scenario(GateSim(policy))
    if case.code is None:
        assert isinstance(outcome, Allow), outcome
        return
    assert isinstance(outcome, Deny), outcome
    assert outcome.code == case.code, outcome
    assert case.message in outcome.message, outcome.message


def _session_turn(sim: GateSim, sender: str, session_id: str, tokens: int) -> Allow | Deny:
    """One message of `sender` in a session (a trace of its own): the router calls a, and
    a answers having spent `tokens`; the router's next call is the one judged."""
    root = structs.replace(human(), session_id=session_id)
    _ok(sim.submit(sender, root))
    first = call("a")
    _ok(sim.submit("router", first, cause=root.id))
    answer = response("a", tokens=tokens)
    _ok(sim.submit("a", answer, cause=first.id))
    return sim.submit("router", call("a"), cause=answer.id)


def test_max_session_tokens_counts_every_message_of_a_session() -> None:
    """Each message a person sends is a trace of its own; the tokens of a session are all
    of them together (seed 002 `maxSessionTokens`), and another session starts afresh."""
    policy = structs.replace(
        bundle(cli2=CLI, **PROFILES), llm_policy=LlmPolicy(max_session_tokens=4000)
    )
    sim = GateSim(policy)
    _ok(_session_turn(sim, "cli", "s-1", 2500))
    refused = _session_turn(sim, "cli", "s-1", 2000)
    assert isinstance(refused, Deny), refused
    assert refused.code == ErrorCode.LLM_BUDGET_EXCEEDED
    assert "session s-1 has spent 4500 of its 4000 tokens" in refused.message
    _ok(_session_turn(sim, "cli", "s-2", 2500))  # another session of the same person
    _ok(_session_turn(sim, "cli2", "s-1", 2500))  # another person's session of that name


def test_a_message_naming_no_session_is_counted_in_the_one_the_router_opens() -> None:
    """The router opens a session for a message that names none (derived from its id);
    the gate records that session for the trace, so its tokens count there too."""
    sim = GateSim(bundle(**PROFILES))
    root = human()
    assert root.session_id is None
    _ok(sim.submit("cli", root))
    assert sim.position(root.id).session_id == derive_id(root.id, "session")
    assert session_id_for(root) == derive_id(root.id, "session")


@pytest.mark.parametrize(
    ("committed", "session_after"),
    [(("trace",), 100 + 1200), (("session",), 100), (("trace", "session"), 100)],
)
def test_a_session_is_charged_once_whatever_an_earlier_round_committed(
    committed: tuple[str, ...], session_after: int
) -> None:
    """An answer decided again after a round committed some of its counters (another
    replica won a compare-and-set on the rest, and wrote 100 tokens of its own to the
    session) charges each counter once: the session the first round's charge when only the
    trace was committed, though the trace no longer holds the call it was computed from."""
    policy = structs.replace(bundle(**PROFILES), llm_policy=LlmPolicy(max_session_tokens=4000))
    sim = GateSim(policy)
    root = structs.replace(human(), session_id="s-1")
    _ok(sim.submit("cli", root))
    first = call("a")
    _ok(sim.submit("router", first, cause=root.id))
    answer = sim._naming_its_call(response("a", tokens=1200), first.id)
    sub = Submission(answer, "a", first.id, {CAUSATION_ID: first.id}, sim.now_ms)
    causes = {position_key(first.id): sim.position(first.id)}
    (route,) = plan_batch([sub], [None], causes, policy, "no bundle")
    assert isinstance(route, Route)
    keys = {"trace": trace_key(root.id), "session": session_tokens_key("cli", "s-1")}
    before = dict(sim.ledger.values)
    for key in required_keys(route):
        before.setdefault(key, None)
    first_round = decide(route, Ledger(dict(before)), policy)
    assert isinstance(first_round, Allow) and first_round.session_charge == 1200
    after_first = Ledger(dict(before))
    decide(route, after_first, policy)
    # The store now holds what the first round committed, and the other replica's write.
    stored = dict(before)
    for name in committed:
        stored[keys[name]] = after_first.values[keys[name]]
    stored[keys["session"]] = SessionTokens(tokens=100 + (1200 if "session" in committed else 0))
    if "session" in committed:
        session_after += 1200
    ledger = Ledger(stored)
    paid = Paid(frozenset(keys[name] for name in committed), first_round.session_charge)
    _ok(decide(route, ledger, policy, paid))
    session = ledger.get(keys["session"], SessionTokens)
    assert session is not None and session.tokens == session_after
    trace = ledger.get(keys["trace"], TraceState)
    assert trace is not None and trace.tokens == 1200  # charged once, by whichever round


def test_an_operator_may_send_control_but_not_speak_for_a_person() -> None:
    sim = GateSim(
        bundle(ops={"start_traces": True, "operator": True, "allowed_targets": ("router",)})
    )
    stop = Control(id=new_id(), created_at=utc_now(), action="stop", session_id=new_id())
    _ok(sim.submit("ops", stop))
    refused = sim.submit("ops", human())
    assert isinstance(refused, Deny) and refused.code == ErrorCode.UNAUTHORIZED


def test_no_bundle_and_expired_bundle_fail_closed() -> None:
    outcome = GateSim(None).submit("cli", human())
    assert isinstance(outcome, Deny) and outcome.code == ErrorCode.POLICY_BUNDLE_INVALID
    expired = structs.replace(bundle(cli=CLI), expires_at=NOW - timedelta(seconds=1))
    outcome = GateSim(expired).submit("cli", human())
    assert isinstance(outcome, Deny) and outcome.code == ErrorCode.POLICY_EXPIRED


def test_positions_follow_calls_and_returns() -> None:
    sim = GateSim(bundle(**PROFILES))
    cid = _router_calls(sim, "a")
    to_b = call("b")
    _ok(sim.submit("a", to_b, cause=cid))
    assert (sim.position(to_b.id).hop, sim.position(to_b.id).chain) == (2, ("router", "a", "b"))
    answer = response("b", target="a")
    outcome = _ok(sim.submit("b", answer, cause=to_b.id))
    assert outcome.route.target == "a"
    assert (sim.position(answer.id).hop, sim.position(answer.id).chain) == (1, ("router", "a"))
    # a answers the router after hearing from b: the return goes to a's caller, the router.
    final = response("a")
    assert _ok(sim.submit("a", final, cause=answer.id)).route.target == "router"
    assert sim.position(final.id).hop == 0
    # every envelope of the session stays in the root's trace, started by the cli
    root_trace = sim.position(cid).trace_id
    assert {sim.position(e).trace_id for e in (to_b.id, answer.id, final.id)} == {root_trace}
    assert sim.position(final.id).origin == "cli"


def test_answered_calls_free_their_slot_and_objective() -> None:
    sim = GateSim(bundle(**PROFILES))
    cid = _prime(sim)
    first = delegation("prime", "byte")
    _ok(sim.submit("prime", first, cause=cid))
    done = delegation_done("byte")
    back = _ok(sim.submit("byte", done, cause=first.id))
    assert back.route.target == "prime"
    # the same objective again is fine once the first one was answered (not in progress)
    _ok(sim.submit("prime", delegation("prime", "byte"), cause=done.id))


def test_narrowed_tools_are_recorded_for_the_callee() -> None:
    sim = GateSim(bundle(**PROFILES))
    cause = _planner(sim)
    to_s1 = sub_agent("a", "s1", tools=("read",), nested=True)
    _ok(sim.submit("a", to_s1, cause=cause))
    assert sim.position(to_s1.id).levels[-1].tools == ("read",)
    result = sub_agent_done("s1")
    assert _ok(sim.submit("s1", result, cause=to_s1.id)).route.target == "a"
    assert ProfilePolicy().allow_sub_agent_calls is False  # the seed's default denies


def test_a_call_admitted_before_a_crash_is_not_a_repeat_of_itself() -> None:
    """The gate committed a call's counters, then died before recording or delivering it:
    the call's redelivery finds its own marks (open objective, slot, child) and must not be
    refused because of them, nor count twice against the limits."""
    profiles = {**PROFILES, "prime": {**PROFILES["prime"], "max_fan_out": 1}}
    sim = GateSim(bundle(**profiles))
    cid = _prime(sim)
    first = delegation("prime", "byte")
    _ok(sim.submit("prime", first, cause=cid))
    sim.ledger.values.pop(position_key(first.id))  # no position: never recorded nor delivered
    again = _ok(sim.submit("prime", first, cause=cid))
    assert again.route.target == "byte"
    # A different call with the same objective still is a repeat, and over the fan-out.
    other = sim.submit("prime", delegation("prime", "byte"), cause=cid)
    assert isinstance(other, Deny) and other.code == ErrorCode.FAN_OUT_EXCEEDED


def test_a_trace_whose_root_left_no_record_still_counts_the_root() -> None:
    """The gate writes no trace record for a root that opens no call (`implied_root_trace`):
    the first envelope after it counts the root from its absence."""
    sim = GateSim(bundle(**PROFILES))
    root = human()
    _ok(sim.submit("cli", root))
    written = sim.ledger.values.pop(trace_key(root.id))
    assert written == implied_root_trace("")  # what the gate leaves unwritten
    _ok(sim.submit("router", call("a"), cause=root.id))
    after = sim.ledger.get(trace_key(root.id), TraceState)
    assert after is not None and after.count == 2


def test_a_persons_own_fan_out_is_held_to_max_fan_out_while_in_flight() -> None:
    """A person's delegations each start a trace (no cause to count children under): the
    ones still in flight are the fan-out, and the fourth gets seed 003's words."""
    targets = ("byte", "tag", "crystal", "ledger")
    person = {**CLI, "allowed_targets": targets, "max_concurrent_calls": 10}
    sim = GateSim(bundle(cli=person, **{t: {"allowed_targets": ("cli",)} for t in targets}))
    first = delegation("cli", "byte", objective="byte")
    _ok(sim.submit("cli", first))
    for target in targets[1:3]:
        _ok(sim.submit("cli", delegation("cli", target, objective=target)))
    fourth = sim.submit("cli", delegation("cli", "ledger", objective="ledger"))
    assert isinstance(fourth, Deny) and fourth.code == ErrorCode.FAN_OUT_EXCEEDED
    assert "Too many concurrent delegates (4/3)" in fourth.message
    done = structs.replace(delegation_done("byte"), request_id=first.request_id)
    _ok(sim.submit("byte", done, cause=first.id))  # one answered: room for another
    _ok(sim.submit("cli", delegation("cli", "ledger", objective="ledger")))


def test_a_chain_of_more_steps_than_the_fan_out_limit_under_one_call_is_no_fan_out() -> None:
    """A host sends each step of a chain under the call it answers: only the calls still at
    work count towards max_fan_out (3), so a fourth step after three answered ones passes."""
    sim = GateSim(bundle(**PROFILES))
    cid = _prime(sim)
    for n in range(3):
        step = delegation("prime", "byte", objective=f"step {n}")
        _ok(sim.submit("prime", step, cause=cid))
        done = structs.replace(delegation_done("byte"), request_id=step.request_id)
        _ok(sim.submit("byte", done, cause=step.id))
    _ok(sim.submit("prime", delegation("prime", "byte", objective="step 3"), cause=cid))
