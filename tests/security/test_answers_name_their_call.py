"""Issue 30, Build item 5: an agent holding only its own credentials cannot pass an answer off
as another call's, nor repeat a call it has in flight.

The least-privilege config of `parley nats-config` on a real nats-server, the real gate and
router, the real gpt agent; claude is played by a raw nats-py client with claude's own
credentials (it reads its own deliveries and submits on `parley.submit.claude`, all the broker
lets it do). The policy is the demo's with claude also allowed to call the researcher (no
researcher runs, so a call to it stays in flight).

- claude answers the call it was given with gpt's call id and session (read from that
  session's timeline, as anyone in it sees them): refused `FORGED_HEADER`, rule
  `answer_names_another_call`. Before, the gate admitted it and only the router's record of
  its own calls kept it from effect.
- claude calls the researcher, then sends the same call again under a new id while the first
  is in flight: refused `CYCLE_DETECTED`, rule `objective_in_progress`.
- Beside both, the collaboration claude takes part in honestly ends as it should.
"""

from __future__ import annotations

import re
from pathlib import Path

from msgspec import structs

from schemas import AgentCall, AgentResponse, ErrorCode, Reply, new_id, utc_now
from tests.security.test_refused_answers import (
    ROUTER_OPTIONS,
    decision_on,
    decisions_of,
    locked_env,
    played,
)
from tests.support.lockdown import LockedDown
from tests.support.processes import REPO
from tests.support.router_wire import Timeline
from tests.support.system import finished, parley_cli, running_locked_system


def _policy(tmp_path: Path) -> Path:
    """The demo policy, with claude allowed to call the researcher as well as the router."""
    source = (REPO / "deploy/policy/demo.toml").read_text()
    claude = '[profiles.claude]\nallowed_targets = ["router", "llm"]\n'
    assert claude in source, "the demo policy changed shape: claude answers the router only"
    policy = tmp_path / "claude-calls.toml"
    policy.write_text(
        source.replace(
            claude, '[profiles.claude]\nallowed_targets = ["router", "llm", "researcher"]\n'
        )
    )
    return policy


def _answer(call: AgentCall, text: str, *, call_id: str, session_id: str | None) -> AgentResponse:
    return AgentResponse(
        id=new_id(),
        created_at=utc_now(),
        sender="claude",
        text=text,
        call_id=call_id,
        session_id=session_id,
        round=call.round,
        max_rounds=call.max_rounds,
        reply=Reply(message=text, final=True),
    )


def _question(goal: str) -> AgentCall:
    return AgentCall(
        id=new_id(), created_at=utc_now(), sender="claude", target="researcher", text=goal,
        call_id=new_id(), goal=goal,
    )  # fmt: skip


async def test_a_forged_answer_and_a_repeated_call_are_refused_while_a_collaboration_completes(
    locked_down: LockedDown, tmp_path: Path
) -> None:
    locked = locked_down
    env = locked_env(locked)
    config = ("--config", str(locked.settings_file("cli")))
    async with (
        running_locked_system(
            locked,
            tmp_path / "keys",
            {"gpt": "gpt"},
            router_options=ROUTER_OPTIONS,
            policy=_policy(tmp_path),
        ),
        played(locked, "claude") as claude,
        decisions_of(locked, "claude") as decisions,
    ):
        collab = parley_cli(
            env, "collab", *config, "--first", "gpt", "--max-rounds", "2", "plan the launch"
        )
        turn_msg, turn = await claude.call()  # round 2, after gpt's real answer
        assert turn.session_id is not None and turn.round == 2
        admin = await locked.connect("provisioner")
        try:
            line = Timeline(admin.jetstream(), locked.ns, turn.session_id)
            await line.open()
            gpts = None
            while gpts is None:
                event = await line.next()
                if getattr(event, "event_type", "") == "step_started":
                    if getattr(event, "speaker", "") == "gpt":
                        gpts = str(getattr(event, "payload", {})["call_id"])
            await line.close()
        finally:
            await admin.close()

        say = parley_cli(env, "say", *config, "@claude", "hi")
        own_msg, own = await claude.call()
        assert own.session_id not in (None, turn.session_id)

        # A call to the researcher, then the same call again under a new id: a repeat.
        first = _question("find the launch date")
        await claude.submit(first, own_msg, own)
        assert (await decision_on(decisions, first.id)).allowed
        repeat = structs.replace(first, id=new_id(), call_id=new_id())
        await claude.submit(repeat, own_msg, own)
        refused = await decision_on(decisions, repeat.id)
        assert (refused.allowed, refused.code, refused.rule) == (
            False,
            ErrorCode.CYCLE_DETECTED,
            "objective_in_progress",
        ), refused
        assert (await claude.refusal_of(repeat.id)).code == ErrorCode.CYCLE_DETECTED

        # An answer to claude's own call, naming gpt's call in the collaboration's session.
        forged = _answer(own, "gpt's turn, honest", call_id=gpts, session_id=turn.session_id)
        await claude.submit(forged, own_msg, own)
        decision = await decision_on(decisions, forged.id)
        assert (decision.allowed, decision.code, decision.rule) == (
            False,
            ErrorCode.FORGED_HEADER,
            "answer_names_another_call",
        ), decision
        refusal = await claude.refusal_of(forged.id)
        assert refusal.code == ErrorCode.FORGED_HEADER
        assert gpts in refusal.message and own.call_id in refusal.message

        # claude's honest turn in the collaboration: it ends as it should.
        honest = _answer(turn, "launch on Monday", call_id=turn.call_id, session_id=turn.session_id)
        await claude.submit(honest, turn_msg, turn)
        assert (await decision_on(decisions, honest.id)).allowed
        code, lines = await finished(collab, 60)
        assert code == 0, lines
        assert lines[-1] == "stopped: final (round 2)", lines
        # The person waiting on claude in the other session hears that its answer was refused.
        said, said_lines = await finished(say, 30)
        assert said == 1, said_lines
        assert any(re.search(r"FORGED_HEADER", line) for line in said_lines), said_lines
