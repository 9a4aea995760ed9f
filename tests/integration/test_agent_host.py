"""Scripted agent hosts as real processes: seed 001's reply contract end to end on the bus.

Calls are delivered on each host's deliver subject the way the gate delivers them, and what a
host submits is read from its submit subject, where the gate picks it up.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import msgspec
import pytest
from nats.aio.client import Client as NATS

from bus import MSG_ID, EmbeddedServer
from schemas import (
    AgentResponse,
    DelegationRequest,
    DelegationResponse,
    Error,
    ErrorCode,
    Namespace,
    ProfileSummary,
    SubAgentArgs,
    SubAgentCall,
    SubAgentResult,
    TranscriptItem,
    new_id,
    profile_key,
    utc_now,
)
from tests.support.agents import FAIRY_TALE, Submitted, agent_call, send, start_agent, write_profile
from tests.support.processes import READY, ProcessOutput, parley_env, start_actor


@pytest.fixture
def env(nats_server: EmbeddedServer, namespace: Namespace) -> dict[str, str]:
    return parley_env(nats_server.url, namespace.root, ack_wait_s="2", fetch_timeout_s="1")


@pytest.fixture
def processes() -> Iterator[list[ProcessOutput]]:
    started: list[ProcessOutput] = []
    yield started
    for process in started:
        process.close()


async def test_two_scripted_agents_play_the_fairy_tale(
    nc: NATS, namespace: Namespace, env: dict[str, str], processes: list[ProcessOutput]
) -> None:
    """Seed 001 §8-A with prompt 2: Claude drafts, GPT edits, Claude finishes, GPT ends."""
    js = nc.jetstream()
    outs = {name: await Submitted(js, namespace, name).open() for name in ("gpt", "claude")}
    for name in ("gpt", "claude"):
        host = start_agent(name, env)
        processes.append(host)
        await host.wait_line(READY)
    transcript: tuple[TranscriptItem, ...] = (
        TranscriptItem(role="user", name="you", text=FAIRY_TALE),
    )
    speaker, finals = "claude", []
    for round_no in range(1, 5):
        call = agent_call(speaker, FAIRY_TALE, round=round_no, max_rounds=4, transcript=transcript)
        await send(js, namespace, speaker, call)
        headers, answer = await outs[speaker].next()
        assert isinstance(answer, AgentResponse)
        assert (answer.sender, answer.target, answer.call_id) == (speaker, "router", call.call_id)
        assert (answer.round, answer.max_rounds, answer.session_id) == (round_no, 4, "s-1")
        assert not answer.malformed and answer.attempt == 1
        assert answer.token_usage.total == answer.token_usage.prompt + answer.token_usage.completion
        assert answer.token_usage.prompt > 0 and answer.token_usage.completion > 0
        assert headers[MSG_ID] == answer.id and headers["Parley-Causation-Id"] == call.id
        transcript += (TranscriptItem(role=speaker, name=speaker, text=answer.reply.message),)
        finals.append(answer.reply.final)
        if answer.reply.final:
            break
        assert answer.reply.handoff, f"round {round_no} ended without a handoff"
        speaker = answer.reply.handoff.to
    assert finals == [False, False, False, True], "draft, edit, finish, then final from GPT"
    assert speaker == "gpt"


async def test_registry_holds_the_profile_summary_and_a_heartbeat(
    nc: NATS, namespace: Namespace, env: dict[str, str], processes: list[ProcessOutput]
) -> None:
    # No --profile: the actor id names the profile, as a topology's `run = "agent"` does.
    host = start_actor("agent", "claude", env)
    processes.append(host)
    await host.wait_line(READY)
    kv = await nc.jetstream().key_value(namespace.bucket("registry"))
    entry = await kv.get(profile_key("claude"))
    assert entry.value is not None
    summary = msgspec.json.decode(entry.value, type=ProfileSummary)
    assert (summary.name, summary.actor_id, summary.backend) == ("claude", "claude", "scripted")
    assert summary.peers == ("gpt",) and "collaborate" in summary.capabilities
    assert not summary.allow_sub_agent_calls
    heartbeat = (await kv.get("heartbeat.claude")).value
    assert heartbeat is not None and b'"kind":"agent"' in heartbeat


async def test_malformed_reply_becomes_a_plain_message_and_a_warning(
    nc: NATS, namespace: Namespace, env: dict[str, str], processes: list[ProcessOutput]
) -> None:
    """Seed 001 §8-D with test prompt 5: prose instead of JSON."""
    js = nc.jetstream()
    out = await Submitted(js, namespace, "gpt").open()
    host = start_agent("gpt", env)
    processes.append(host)
    await host.wait_line(READY)
    call = agent_call("gpt", "Answer this but include prose around the JSON.")
    await send(js, namespace, "gpt", call)
    _, answer = await out.next()
    assert isinstance(answer, AgentResponse)
    assert answer.malformed
    assert answer.reply.message.startswith("Of course.") and answer.text == answer.reply.message
    assert not answer.reply.handoff and not answer.reply.final
    await host.wait_line(r'"level":"warning".*malformed reply')
    # Seed 001 §11 prompt 3: final in the first reply.
    stop = agent_call("gpt", "Summarize this in 1 sentence, then stop.")
    await send(js, namespace, "gpt", stop)
    _, answer = await out.next()
    assert isinstance(answer, AgentResponse) and answer.reply.final and not answer.malformed


async def test_delegation_sub_agent_call_failure_and_answers_ignored(
    nc: NATS,
    namespace: Namespace,
    env: dict[str, str],
    processes: list[ProcessOutput],
    tmp_path: Path,
) -> None:
    js = nc.jetstream()
    script = """
[[turn]]
goal = "break"
action = "fail"
error = "AGENT_UNAVAILABLE"
retryable = true

[[turn]]
message = "{name} did: {goal}"
final = true
"""
    profile = write_profile(
        tmp_path, "worker", 'backend = "scripted"\nscript = "worker-script.toml"', script=script
    )
    out = await Submitted(js, namespace, "worker").open()
    host = start_agent(str(profile), env)
    processes.append(host)
    await host.wait_line(READY)

    delegation = DelegationRequest(
        id=new_id(),
        created_at=utc_now(),
        request_id="r-1",
        origin_employee="prime",
        target_employee="worker",
        user_id="u-1",
        parent_session_id="ps-1",
        child_session_id="cs-1",
        objective="Extract receipt data",
        input="receipt.jpg",
    )
    await send(js, namespace, "worker", delegation, sender="prime")
    _, answer = await out.next()
    assert isinstance(answer, DelegationResponse)
    assert (answer.request_id, answer.target_employee, answer.status) == (
        "r-1",
        "worker",
        "success",
    )
    assert answer.result == "worker did: Extract receipt data"
    assert answer.child_session_id == "cs-1" and answer.token_usage.total > 0

    sub = SubAgentCall(
        id=new_id(),
        created_at=utc_now(),
        call_id="sc-1",
        caller="prime",
        session_id="s-2",
        args=SubAgentArgs(agent_name="worker", task="Write tests"),
    )
    await send(js, namespace, "worker", sub, sender="prime")
    _, result = await out.next()
    assert isinstance(result, SubAgentResult)
    assert (result.call_id, result.agent_name, result.success) == ("sc-1", "worker", True)
    assert result.output == "worker did: Write tests" and result.tokens_used > 0

    # The brain fails: the caller gets a retryable error caused by its call, never silence.
    failing = agent_call("worker", "please break now")
    await send(js, namespace, "worker", failing)
    headers, error = await out.next()
    assert isinstance(error, Error)
    assert error.code == ErrorCode.AGENT_UNAVAILABLE and error.retryable
    assert error.cause_id == failing.id and headers["Parley-Causation-Id"] == failing.id
    assert error.details["call_id"] == failing.call_id

    # Its own answers delivered back are not answered; the next call is.
    await send(js, namespace, "worker", result, sender="prime")
    await send(js, namespace, "worker", error, sender="router")
    last = agent_call("worker", "one more")
    await send(js, namespace, "worker", last)
    _, answer = await out.next()
    assert isinstance(answer, AgentResponse) and answer.call_id == last.call_id
    assert await out.none_left()


async def test_a_call_slower_than_the_ack_wait_is_kept_in_progress_and_answered_once(
    nc: NATS,
    nats_server: EmbeddedServer,
    namespace: Namespace,
    processes: list[ProcessOutput],
    tmp_path: Path,
) -> None:
    """The brain takes over three ack waits; in-progress heartbeats keep it from redelivery."""
    js = nc.jetstream()
    env = parley_env(nats_server.url, namespace.root, ack_wait_s="0.6", fetch_timeout_s="1")
    script = '[[turn]]\ndelay_s = 2.0\nmessage = "slow but sure"\nfinal = true\n'
    profile = write_profile(
        tmp_path, "slow", 'backend = "scripted"\nscript = "slow-script.toml"', script=script
    )
    out = await Submitted(js, namespace, "slow").open()
    host = start_agent(str(profile), env)
    processes.append(host)
    await host.wait_line(READY)
    call = agent_call("slow", "take your time")
    await send(js, namespace, "slow", call)
    _, answer = await out.next()
    assert isinstance(answer, AgentResponse)
    assert (answer.call_id, answer.attempt, answer.text) == (call.call_id, 1, "slow but sure")
    # Had the call been redelivered, a second handler would have answered it as attempt 2.
    fast = agent_call("slow", "next")
    await send(js, namespace, "slow", fast)
    _, following = await out.next()
    assert isinstance(following, AgentResponse) and following.call_id == fast.call_id
    info = await js.consumer_info(namespace.stream("deliver"), "slow")
    assert info.delivered.consumer_seq == 2, "each call delivered once, none redelivered"
    assert not any('"attempt":2' in line for line in host.lines)
