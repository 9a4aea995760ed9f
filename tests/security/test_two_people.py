"""Two people on one deployment are two principals, not one shared `cli`.

`parley nats-config` makes `person-alice` a person of her own (an account, credentials and
grants of her own, her own decisions followed); the signed policy lets her speak for a person.
She runs her own collaboration with `parley collab --config` her settings. She cannot stop the
session `cli` opened (the router answers UNAUTHORIZED, on her own timelines, and the session
completes), and the broker refuses her a subscription to `cli`'s decisions and to the timeline
of `cli`'s session: a person follows `parley.events.<themselves>.*` and nothing else.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest
from nats.aio.msg import Msg
from prometheus_client import CollectorRegistry

from bus import ActorMetrics, EmbeddedServer, TraceHeaders
from schemas import (
    Control,
    Error,
    ErrorCode,
    Namespace,
    SessionEvent,
    decode_envelope,
    encode,
    new_id,
    utc_now,
)
from tests.support.lockdown import LockedDown, violations
from tests.support.processes import parley_env
from tests.support.system import finished, parley_cli, running_locked_system
from tools.demo import DEMO_GOAL, demo_message
from tools.natsconf import DEFAULT_ACTORS, write_nats_config

ALICE = "person-alice"


@pytest.fixture
def two_people(tmp_path: Path, namespace: Namespace) -> Iterator[LockedDown]:
    config_dir = tmp_path / "nats-config"
    write_nats_config(config_dir, [*DEFAULT_ACTORS, ALICE], namespace)
    server = EmbeddedServer(tmp_path / "nats", authorization=config_dir / "authorization.conf")
    server.start()
    yield LockedDown(server, config_dir, namespace)
    server.close()


async def test_each_person_is_a_principal_of_their_own(
    two_people: LockedDown, tmp_path: Path
) -> None:
    locked, ns = two_people, two_people.ns
    # The demo bundle lets alice speak for a person (the console's people have profiles).
    async with running_locked_system(locked, tmp_path / "keys"):
        env = parley_env(locked.server.url, ns.root)
        config = str(locked.settings_file(ALICE))
        code, lines = await finished(parley_cli(env, "collab", "--config", config, DEMO_GOAL), 120)
        assert code == 0 and any("final" in line for line in lines), lines

        registry = CollectorRegistry()
        alice = await locked.connect(ALICE, ActorMetrics(registry, ALICE))
        cli = await locked.connect("cli")
        try:
            # cli's session, followed live as cli follows it.
            msg = demo_message()
            assert msg.session_id is not None
            events: asyncio.Queue[SessionEvent] = asyncio.Queue()
            refusals: asyncio.Queue[Error] = asyncio.Queue()

            async def on_event(raw: Msg) -> None:
                event = decode_envelope(raw.data)
                if isinstance(event, SessionEvent):
                    events.put_nowait(event)

            async def on_refusal(raw: Msg) -> None:
                event = decode_envelope(raw.data)
                if isinstance(event, Error):  # the router's refusals go on her timelines
                    refusals.put_nowait(event)

            await cli.subscribe(ns.events("cli", msg.session_id), cb=on_event)
            await cli.flush()
            await alice.subscribe(ns.timelines(ALICE), cb=on_refusal)
            # She may not read cli's session, even knowing its id.
            await alice.subscribe(ns.events("cli", msg.session_id))
            await alice.flush()
            headers = TraceHeaders(trace_id=msg.id, origin="cli").to_headers(msg.id)
            await cli.publish(ns.submit("cli"), encode(msg), headers=headers)
            seen: list[SessionEvent] = []
            while not seen or seen[-1].event_type != "step_started":  # it is running
                seen.append(await asyncio.wait_for(events.get(), 60))
            # alice asks the router to stop it, as herself (a person may send control).
            stop = Control(
                id=new_id(), created_at=utc_now(), action="stop", session_id=msg.session_id
            )
            stop_headers = TraceHeaders(trace_id=stop.id, origin=ALICE).to_headers(stop.id)
            await alice.publish(ns.submit(ALICE), encode(stop), headers=stop_headers)
            # Nor may she follow what the gate says about cli's messages.
            await alice.subscribe(ns.decisions("cli"))
            await alice.flush()
            ends = ("session_completed", "session_failed", "session_canceled")
            last = seen[-1]
            while last.event_type not in ends:
                last = await asyncio.wait_for(events.get(), 60)
                seen.append(last)
            kinds = [event.event_type for event in seen]
            assert kinds[-1] == "session_completed", kinds
            answer = await asyncio.wait_for(refusals.get(), 60)
            assert answer.cause_id == stop.id
            assert answer.code is ErrorCode.UNAUTHORIZED, answer
            assert f"{ALICE} cannot stop a session it did not open" in answer.message
            assert "by cli" not in answer.message
            assert violations(registry, ALICE) == 2  # cli's timeline and cli's decisions
        finally:
            await alice.close()
            await cli.close()
