"""Seed 001's acceptance tests A-E and test prompts 1-5 against a real router process.

The test plays the gate and two scripted agents (`gpt`, `claude`) around it: it delivers the
person's message and each agent's answer to the router, and reads the router's agent calls and
the session's events from the bus.
"""

from __future__ import annotations

import asyncio
import itertools
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import nats
from msgspec import structs
from nats.aio.client import Client as NATS
from nats.aio.msg import Msg

from actors.router._session import CANCEL_NOTICE
from bus import DEAD_REASON, SENDER, EmbeddedServer, TraceHeaders
from schemas import (
    AgentCall,
    AnyEnvelope,
    ErrorCode,
    HumanMessage,
    Namespace,
    Reply,
    decode_envelope,
    encode,
    new_id,
    utc_now,
)
from tests.support.processes import READY, ProcessOutput, parley_env, start_actor
from tests.support.router_wire import (
    AgentTurn,
    RouterWire,
    Script,
    Timeline,
    collaborate,
    handoff,
    relay_turns,
    stop,
    stored_session,
)

PROMPT_1 = (
    "Collaborate to outline and refine a 5-step plan for a weekend hiking trip. Keep it concise."
)
PROMPT_2 = (
    "Write a 2-paragraph fairy tale—Claude drafts, GPT edits, alternate until done (≤4 rounds)."
)
PROMPT_3 = "Summarize this in 1 sentence, then stop."


def other(name: str) -> str:
    return "gpt" if name == "claude" else "claude"


def alternating(final_at: int | None = None) -> Script:
    """Each agent builds on the latest message it was shown and hands over to the other."""

    def turn(call: AgentCall) -> AgentTurn:
        latest = next(
            (item.text for item in reversed(call.transcript) if item.role in ("gpt", "claude")),
            call.goal,
        )
        message = f"{call.target} r{call.round} after «{latest[:24]}»"
        if final_at is not None and call.round == final_at:
            return AgentTurn(reply=Reply(message=message, final=True))
        return handoff(message, other(call.target), f"continue from round {call.round}")

    return turn


@asynccontextmanager
async def router_running(
    nc: NATS, server: EmbeddedServer, ns: Namespace, script: Script, **settings: str
) -> AsyncIterator[tuple[RouterWire, list[AgentCall], ProcessOutput]]:
    """A router process, and the test answering its calls with `script` in the background."""
    wire = RouterWire(nc.jetstream(), ns)
    await wire.open()
    router = start_actor("router", "router", parley_env(server.url, ns.root, **settings))
    calls: list[AgentCall] = []

    async def record(call: AgentCall) -> None:
        calls.append(call)

    try:
        await router.wait_line(READY)
        async with asyncio.TaskGroup() as tasks:
            relay = tasks.create_task(relay_turns(wire, script, on_call=record))
            try:
                yield wire, calls, router
            finally:
                relay.cancel()
    finally:
        router.close()


async def run_session(nc: NATS, ns: Namespace, wire: RouterWire, msg: HumanMessage) -> Timeline:
    assert msg.session_id is not None
    timeline = Timeline(nc.jetstream(), ns, msg.session_id)
    await timeline.open()
    await wire.start(msg)
    await timeline.until_end()
    await timeline.close()
    return timeline


async def test_a_prompt_2_fairy_tale_shares_context_and_ends_on_final(
    nc: NATS, nats_server: EmbeddedServer, namespace: Namespace
) -> None:
    script: dict[tuple[str, int], AgentTurn] = {
        ("claude", 1): handoff("Once upon a time a fox…", "gpt", "Edit paragraph one."),
        ("gpt", 2): handoff("Edited: Once, a clever fox…", "claude", "Write paragraph two."),
        ("claude", 3): handoff("At dawn the fox…", "gpt", "Polish and finish."),
        ("gpt", 4): AgentTurn(reply=Reply(message="The tale is done.", final=True)),
    }
    async with router_running(
        nc, nats_server, namespace, lambda call: script[call.target, call.round]
    ) as (wire, calls, _):
        timeline = await run_session(nc, namespace, wire, collaborate(PROMPT_2, max_rounds=4))
    assert timeline.turns() == [
        (1, "claude", "Once upon a time a fox…"),
        (2, "gpt", "Edited: Once, a clever fox…"),
        (3, "claude", "At dawn the fox…"),
        (4, "gpt", "The tale is done."),
    ]
    assert timeline.events[-1].stop_reason == "final"
    # Context sharing: every call after the first carries the other agent's latest message,
    # the goal verbatim, and the round.
    for previous, call in itertools.pairwise(calls):
        shown = [item.text for item in call.transcript]
        said = script[previous.target, previous.round].reply
        assert said is not None and said.message in shown
        assert call.goal == PROMPT_2 and call.max_rounds == 4
        assert call.text == script[previous.target, previous.round].reply.handoff.task  # type: ignore[union-attr]


async def test_prompt_1_hiking_plan_alternates_until_final(
    nc: NATS, nats_server: EmbeddedServer, namespace: Namespace
) -> None:
    async with router_running(nc, nats_server, namespace, alternating(final_at=5)) as (wire, _, _):
        timeline = await run_session(nc, namespace, wire, collaborate(PROMPT_1, first="gpt"))
    speakers = [speaker for _, speaker, _ in timeline.turns()]
    assert speakers == ["gpt", "claude", "gpt", "claude", "gpt"]
    assert timeline.events[-1].event_type == "session_completed"
    assert timeline.events[-1].stop_reason == "final"
    # How it stands, kept apart from its timeline: a copy of its opening, then of its end.
    opening = next(e for e in timeline.events if e.event_type == "session_created")
    standing = await _standing_copies(nc, namespace, timeline.events[-1].session_id)
    assert [copy.id for copy in standing] == [opening.id, timeline.events[-1].id]


async def _standing_copies(
    nc: NATS, ns: Namespace, session_id: str, count: int = 2
) -> list[AnyEnvelope]:
    """The first `count` copies stored on the session's standing subject, in order."""
    events = await nc.jetstream().pull_subscribe(
        ns.standing("cli", session_id), stream=ns.stream("events")
    )
    copies: list[AnyEnvelope] = []
    for _ in range(count):  # the opening, then the end: stored before the end is told
        (msg,) = await events.fetch(1, timeout=10)
        copies.append(decode_envelope(msg.data))
    return copies


async def test_prompt_3_final_in_the_first_reply_ends_at_once(
    nc: NATS, nats_server: EmbeddedServer, namespace: Namespace
) -> None:
    async with router_running(nc, nats_server, namespace, alternating(final_at=1)) as (
        wire,
        calls,
        _,
    ):
        timeline = await run_session(nc, namespace, wire, collaborate(PROMPT_3))
    assert len(timeline.turns()) == 1 and len(calls) == 1
    assert timeline.events[-1].stop_reason == "final"


async def test_b_max_rounds_two_gives_exactly_two_turns_then_cap_reached(
    nc: NATS, nats_server: EmbeddedServer, namespace: Namespace
) -> None:
    async with router_running(nc, nats_server, namespace, alternating()) as (wire, calls, _):
        timeline = await run_session(nc, namespace, wire, collaborate(PROMPT_1, max_rounds=2))
    assert [r for r, _, _ in timeline.turns()] == [1, 2]
    assert timeline.events[-1].stop_reason == "cap_reached"
    assert [c.final_round for c in calls] == [False, True], "the last agent is told to finish"


async def test_c_no_handoff_ends_the_session(
    nc: NATS, nats_server: EmbeddedServer, namespace: Namespace
) -> None:
    def script(call: AgentCall) -> AgentTurn:
        if call.round == 1:
            return handoff("draft", "gpt", "edit it")
        return AgentTurn(reply=Reply(message="edited, nothing more to add"))

    async with router_running(nc, nats_server, namespace, script) as (wire, _, _):
        timeline = await run_session(nc, namespace, wire, collaborate(PROMPT_2))
    assert len(timeline.turns()) == 2 and timeline.events[-1].stop_reason == "no_handoff"


async def test_d_prompt_5_malformed_json_ends_with_a_warning_and_no_handoff(
    nc: NATS, nats_server: EmbeddedServer, namespace: Namespace
) -> None:
    prose = 'Sure! Here is my answer: {"message": "hi", "handoff": {"to": "gpt"'
    async with router_running(nc, nats_server, namespace, lambda call: AgentTurn(raw=prose)) as (
        wire,
        calls,
        _,
    ):
        timeline = await run_session(nc, namespace, wire, collaborate(PROMPT_1))
    assert len(calls) == 1
    assert timeline.turns() == [(1, "claude", prose)]
    end = timeline.events[-1]
    assert end.stop_reason == "malformed" and "JSON" in str(end.payload["warning"])
    step = next(e for e in timeline.events if e.event_type == "step_completed")
    assert step.payload["handoff"] is None and step.payload["malformed"] is True


async def test_e_stop_cancels_with_the_notice_and_a_late_answer_changes_nothing(
    nc: NATS, nats_server: EmbeddedServer, namespace: Namespace
) -> None:
    js = nc.jetstream()
    wire = RouterWire(js, namespace)
    await wire.open()
    router = start_actor("router", "router", parley_env(nats_server.url, namespace.root))
    try:
        await router.wait_line(READY)
        msg = collaborate(PROMPT_1)
        assert msg.session_id is not None
        timeline = Timeline(js, namespace, msg.session_id)
        await timeline.open()
        await wire.start(msg)
        trace, call = await wire.submitted()
        assert isinstance(call, AgentCall)
        await wire.control(stop(msg.session_id))
        end = await timeline.until_end()
        assert (end.event_type, end.stop_reason) == ("session_canceled", "canceled")
        assert end.payload["message"] == CANCEL_NOTICE
        # The agent answers after the Stop: nothing moves. An unsupported control for the same
        # session, sent after it, is handled after it and marks when the router got that far.
        await wire.answer(call, trace, handoff("late", "gpt", "go on"))
        pause = structs.replace(stop(msg.session_id), action="pause")
        await wire.control(pause)
        refusal = await timeline.refusal()
        assert refusal.cause_id == pause.id and refusal.code is ErrorCode.INVALID_REQUEST
        session = await stored_session(js, namespace, msg.session_id)
        assert session.status == "canceled" and session.transcript[-1].text == CANCEL_NOTICE
        assert [item.text for item in session.transcript].count("late") == 0
        await timeline.close()
    finally:
        router.close()


async def test_a_replayed_end_writes_its_trace_link_to_expire_again(
    nc: NATS, nats_server: EmbeddedServer, namespace: Namespace
) -> None:
    """The link's rewrite to expire goes out with an end's effects: a first attempt killed
    after storing the session's end may have lost it, and the redelivered input is a replay.
    The replay writes it again (here the lost rewrite is a link put back without expiry),
    or the link would outlive its session for ever."""
    js = nc.jetstream()
    wire = RouterWire(js, namespace)
    await wire.open()
    router = start_actor("router", "router", parley_env(nats_server.url, namespace.root))
    try:
        await router.wait_line(READY)
        msg = collaborate(PROMPT_3)
        assert msg.session_id is not None
        timeline = Timeline(js, namespace, msg.session_id)
        await timeline.open()
        await wire.start(msg)
        trace, call = await wire.submitted()
        assert isinstance(call, AgentCall)
        final = AgentTurn(reply=Reply(message="done", final=True))
        await wire.answer(call, trace, final)
        assert (await timeline.until_end()).event_type == "session_completed"
        await timeline.close()
        sessions = await js.key_value(namespace.bucket("sessions"))
        link = f"trace.{trace.trace_id}"
        await sessions.put(link, msg.session_id.encode())  # the rewrite lost: no expiry
        rewritten: asyncio.Queue[Msg] = asyncio.Queue()
        await nc.subscribe(f"$KV.{namespace.bucket('sessions')}.{link}", cb=rewritten.put)
        # The same answer delivered again, under a message id of its own (a redelivery).
        await wire.answer(call, trace, final, msg_id=new_id())
        write = await asyncio.wait_for(rewritten.get(), 20)
        assert (write.headers or {}).get("Nats-TTL"), write.headers
    finally:
        router.close()


async def test_prompt_4_back_to_back_sessions_never_see_each_other(
    nc: NATS, nats_server: EmbeddedServer, namespace: Namespace
) -> None:
    def script(call: AgentCall) -> AgentTurn:
        tag = call.goal.split()[0]
        for item in call.transcript:
            assert item.text.split()[0] in (tag, "continue"), f"{tag} saw {item.text!r}"
        if call.round == 3:
            return AgentTurn(reply=Reply(message=f"{tag} done", final=True))
        return handoff(f"{tag} turn {call.round}", other(call.target), "continue")

    async with router_running(nc, nats_server, namespace, script) as (wire, calls, _):
        first, second = collaborate("apples: plan"), collaborate("pears: plan")
        timelines = [
            Timeline(nc.jetstream(), namespace, m.session_id or "") for m in (first, second)
        ]
        for timeline in timelines:
            await timeline.open()
        await wire.start(first)
        await wire.start(second)
        ends = [await timeline.until_end() for timeline in timelines]
    assert [end.stop_reason for end in ends] == ["final", "final"]
    for timeline, tag in zip(timelines, ("apples:", "pears:"), strict=True):
        assert all(message.startswith(tag) for _, _, message in timeline.turns())
    assert len(calls) == 6


async def test_a_single_call_is_answered_once(
    nc: NATS, nats_server: EmbeddedServer, namespace: Namespace
) -> None:
    msg = HumanMessage(
        id=new_id(),
        created_at=utc_now(),
        text="@gpt what is NATS?",
        call_id=new_id(),
        session_id=new_id(),
    )
    script = lambda call: handoff(f"{call.target}: a messaging system", "claude", "say more")  # noqa: E731
    async with router_running(nc, nats_server, namespace, script) as (wire, calls, _):
        timeline = await run_session(nc, namespace, wire, msg)
    assert [(c.target, c.goal) for c in calls] == [("gpt", "what is NATS?")]
    assert timeline.turns() == [(1, "gpt", "gpt: a messaging system")]
    assert timeline.events[-1].stop_reason == "answered"


async def test_an_agent_error_is_retried_then_fails_the_session(
    nc: NATS, nats_server: EmbeddedServer, namespace: Namespace
) -> None:
    script = lambda call: AgentTurn(error=ErrorCode.AGENT_UNAVAILABLE, retryable=True)  # noqa: E731
    async with router_running(nc, nats_server, namespace, script) as (wire, calls, _):
        timeline = await run_session(nc, namespace, wire, collaborate(PROMPT_1))
    assert len(calls) == 2, "one retry, as the default limit allows"
    end = timeline.events[-1]
    assert (end.event_type, end.stop_reason) == ("session_failed", "error")
    assert end.payload["code"] == "AGENT_UNAVAILABLE"


async def test_an_unusable_opening_naming_a_running_session_leaves_it_running(
    nc: NATS, nats_server: EmbeddedServer, namespace: Namespace
) -> None:
    """A message that cannot open a session, naming a session already running, is refused as
    a duplicate: not with the `session_failed` an unusable opening gets, which would stand the
    running session ended (actors/router/_opener.py reads an id in use before refusing)."""
    js = nc.jetstream()
    never = lambda call: None  # noqa: E731 - an agent still thinking
    async with router_running(nc, nats_server, namespace, never) as (wire, _calls, _):
        running = collaborate(PROMPT_1)
        assert running.session_id is not None
        timeline = Timeline(js, namespace, running.session_id)
        await timeline.open()
        await wire.start(running)
        while not any(e.event_type == "session_started" for e in timeline.events):
            await timeline.next()
        unusable = structs.replace(collaborate(PROMPT_1), session_id=running.session_id)
        unusable = structs.replace(unusable, first_speaker="llama")
        await wire.start(unusable)
        refusal = await timeline.refusal()
        await timeline.close()
    assert "already in use" in refusal.message, refusal
    assert not [e for e in timeline.events if e.event_type == "session_failed"], timeline.events
    standing = await _standing_copies(nc, namespace, running.session_id, count=1)
    assert [copy.id for copy in standing] == [timeline.events[0].id]  # its opening, still


async def test_unusable_requests_are_refused_on_the_timeline_and_dead_lettered(
    nc: NATS, nats_server: EmbeddedServer, namespace: Namespace
) -> None:
    js = nc.jetstream()
    wire = RouterWire(js, namespace)
    await wire.open()
    router = start_actor("router", "router", parley_env(nats_server.url, namespace.root))
    try:
        await router.wait_line(READY)
        msg = structs.replace(collaborate(PROMPT_1), first_speaker="llama")
        assert msg.session_id is not None
        timeline = Timeline(js, namespace, msg.session_id)
        await timeline.open()
        await wire.start(msg)
        refusal = await timeline.refusal()
        assert refusal.code is ErrorCode.INVALID_REQUEST and refusal.cause_id == msg.id
        assert "not a participant" in refusal.message
        end = await timeline.until_end()
        assert (end.event_type, end.payload["code"]) == ("session_failed", "INVALID_REQUEST")
        await timeline.close()
        # (A Stop naming a session that does not exist yet is kept for it, not refused:
        # tests/integration/test_router_early_stop.py.)
        # Filed under its sender, so one person's refusals push out only their own letters.
        letters = await js.pull_subscribe(
            namespace.dead("router", "cli"), durable="dead-reader", stream=namespace.stream("dead")
        )
        reasons = [
            (letter.headers or {}).get(DEAD_REASON, "")
            for letter in await letters.fetch(1, timeout=10)
        ]
        assert reasons == ["invalid_request"]
        assert await _nothing_submitted(wire) is None
    finally:
        router.close()


async def _nothing_submitted(wire: RouterWire) -> AnyEnvelope | None:
    """Whatever the router submitted to the gate (a refusal must not go there), or None."""
    try:
        _, envelope = await wire.submitted(timeout=0.3)
    except TimeoutError:
        return None
    return envelope


async def test_a_replayed_opening_links_its_trace_again(
    nc: NATS, nats_server: EmbeddedServer, namespace: Namespace
) -> None:
    """The session and its trace's link are written together, so a first attempt may store
    the session and not the link: the redelivered opening, found among the session's applied
    inputs, writes the link again before replaying its effects (an agent's error, which names
    only the call it answers, finds its session through that link)."""
    msg = HumanMessage(
        id=new_id(),
        created_at=utc_now(),
        text="@gpt what is NATS?",
        call_id=new_id(),
        session_id=new_id(),
    )
    links = await nc.jetstream().key_value(namespace.bucket("sessions"))
    link = f"trace.{msg.id}"
    async with router_running(nc, nats_server, namespace, lambda call: None) as (wire, _calls, _):
        timeline = Timeline(nc.jetstream(), namespace, msg.session_id or "")
        await timeline.open()
        await wire.start(msg)
        await timeline.next()  # the session is stored, its call on its way
        assert (await links.get(link)).value == (msg.session_id or "").encode()
        await links.delete(link)  # as if the first attempt's link had not been stored
        watcher = await links.watch(link, include_history=False)
        try:
            # The same opening again, as its redelivery would come (a stored message of its
            # own here: JetStream would drop a second publish under the first one's id).
            again = TraceHeaders(trace_id=msg.id, origin="cli").to_headers(new_id())
            again[SENDER] = "cli"
            await nc.jetstream().publish(namespace.deliver("router"), encode(msg), headers=again)
            relinked = None
            async with asyncio.timeout(20):
                async for entry in watcher:
                    if entry is not None and entry.operation is None:
                        relinked = entry
                        break
        finally:
            await watcher.stop()  # type: ignore[no-untyped-call]
        await timeline.close()
    assert relinked is not None and relinked.value == (msg.session_id or "").encode()


async def test_a_first_delivery_opens_its_session_unread_and_links_its_trace(
    nc: NATS, nats_server: EmbeddedServer, namespace: Namespace
) -> None:
    """An opening is created create-only at once (actors/router/_opener.py): reading the
    session first cost every opening a round trip before its create. Its trace's link, created
    in the same round, is stored all the same."""
    sessions = namespace.bucket("sessions")
    seen: list[str] = []

    async def spy(msg: Msg) -> None:
        seen.append(msg.subject)

    spy_nc = await nats.connect(nats_server.url)
    try:
        await spy_nc.subscribe(f"$JS.API.STREAM.MSG.GET.KV_{sessions}", cb=spy)
        await spy_nc.subscribe(f"$JS.API.DIRECT.GET.KV_{sessions}.>", cb=spy)
        await spy_nc.subscribe(f"$KV.{sessions}.>", cb=spy)
        await spy_nc.flush()
        async with router_running(nc, nats_server, namespace, alternating(final_at=1)) as (
            wire,
            _,
            _,
        ):
            msg = collaborate(PROMPT_3)
            timeline = await run_session(nc, namespace, wire, msg)
        await spy_nc.flush()
    finally:
        await spy_nc.close()
    assert msg.session_id is not None
    created = seen.index(f"$KV.{sessions}.session.{msg.session_id}")
    read = [subject for subject in seen[:created] if not subject.startswith("$KV.")]
    assert read == [], f"the opening read before creating: {read}"
    assert timeline.events[-1].event_type == "session_completed"
    link = await (await nc.jetstream().key_value(sessions)).get(f"trace.{msg.id}")
    assert link.value == msg.session_id.encode()


async def test_a_reminders_first_look_reads_neither_the_session_nor_held_approvals(
    nc: NATS, nats_server: EmbeddedServer, namespace: Namespace
) -> None:
    """A call's reminder comes back as soon as it is stored, when nothing can be due yet: the
    router re-arms it from the call and the agent's heartbeat alone (`CallWatcher.too_early`).
    Its first look used to read the session and the person's held approvals too, on every
    call. The re-armed reminder still ends the call at its turn timeout (5 s: the first look
    must come before it, or it would rightly read everything)."""
    sessions, runs = namespace.bucket("sessions"), namespace.bucket("tool_runs")
    timers = namespace.timers("router")
    watched = (
        f"$JS.API.STREAM.MSG.GET.KV_{sessions}",
        f"$JS.API.DIRECT.GET.KV_{runs}.>",
        timers,
        f"$JS.EVENT.ADVISORY.CONSUMER.MSG_NAKED.{namespace.stream('timers')}.router",
    )
    seen: list[str] = []

    async def spy(msg: Msg) -> None:
        seen.append(msg.subject)

    spy_nc = await nats.connect(nats_server.url)
    try:
        for subject in watched:
            await spy_nc.subscribe(subject, cb=spy)
        await spy_nc.flush()
        never = lambda call: None  # noqa: E731 - an agent still thinking
        options = json.dumps({"turn_timeout_s": 5.0, "agent_retries": 0})
        async with router_running(nc, nats_server, namespace, never, options=options) as (
            wire,
            calls,
            _,
        ):
            timeline = await run_session(nc, namespace, wire, collaborate(PROMPT_3))
    finally:
        await spy_nc.close()
    assert len(calls) == 1
    re_armed = [i for i, subject in enumerate(seen) if "MSG_NAKED" in subject]
    assert re_armed, f"the reminder was never re-armed: {seen}"
    first_look = seen[seen.index(timers) : re_armed[0]]
    assert first_look == [timers], f"the reminder's first look read {first_look[1:]}"
    end = timeline.events[-1]
    assert (end.event_type, end.stop_reason) == ("session_failed", "error")
    assert end.payload["code"] == "AGENT_UNAVAILABLE"
