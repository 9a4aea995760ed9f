"""Attack: a person reaches for what another person's timeline stored.

Under the least-privilege config a person reads one stored thing: the last event of a timeline
of its own (`parley collab --follow` and `--stop` of a session that may have ended,
tools/_stored_events.py), by a direct get whose own subject names that timeline. Here the
router (its own credentials) stores an event on `cli`'s timeline of a session and one on
`person-alice`'s; each person reads the last event of its own. Then alice, holding only her
own credentials and knowing cli's session id, reaches for cli's: the last event of cli's
timeline, any person's timeline of that session, every timeline, the bare direct get whose
body names the subject (next by subject, by sequence) and the non-direct get. The broker
refuses every one. On her own granted subject, a body asking for cli's subject (next, last,
by sequence) is answered 408 Bad Request by the server, with nothing of cli's.

How a session stands, the copies of its opening and its end the router keeps
(`parley.standing.<person>.<session>`), is read the same way: each person its own, alice none
of cli's, by any subject.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Coroutine, Iterator
from pathlib import Path
from typing import Any

import pytest
from nats.errors import NoRespondersError
from nats.errors import TimeoutError as NatsTimeoutError
from prometheus_client import CollectorRegistry

from bus import MSG_ID, ActorMetrics, EmbeddedServer
from schemas import Namespace, SessionEvent, encode, new_id, utc_now
from tests.support.lockdown import LockedDown, violations
from tools._stored_events import last_event, stored_end
from tools.natsconf import DEFAULT_ACTORS, IMPORTED_JS_API, write_nats_config

ALICE = "person-alice"
_REFUSED = (TimeoutError, NatsTimeoutError, NoRespondersError)


@pytest.fixture
def two_people(tmp_path: Path, namespace: Namespace) -> Iterator[LockedDown]:
    config_dir = tmp_path / "nats-config"
    write_nats_config(config_dir, [*DEFAULT_ACTORS, ALICE], namespace)
    server = EmbeddedServer(tmp_path / "nats", authorization=config_dir / "authorization.conf")
    server.start()
    yield LockedDown(server, config_dir, namespace)
    server.close()


def _ended(session_id: str, message: str) -> SessionEvent:
    return SessionEvent(
        id=new_id(),
        created_at=utc_now(),
        session_id=session_id,
        event_type="session_completed",
        round=2,
        stop_reason="final",
        payload={"message": message},
    )


async def test_a_person_reads_the_last_event_of_its_own_timelines_only(
    two_people: LockedDown,
) -> None:
    locked, ns = two_people, two_people.ns
    await locked.provision()
    router = await locked.connect("router")
    cli = await locked.connect("cli")
    registry = CollectorRegistry()
    alice = await locked.connect(ALICE, ActorMetrics(registry, ALICE))
    events = ns.stream("events")
    theirs, hers = new_id(), new_id()
    try:
        stored = {
            ("cli", theirs): _ended(theirs, "cli's secret plan"),
            (ALICE, hers): _ended(hers, "alice's own plan"),
        }
        for (owner, session_id), event in stored.items():
            await router.jetstream().publish(ns.events(owner, session_id), encode(event))
            copy = {MSG_ID: new_id()}  # the router's copy of the end: how it stands
            await router.jetstream().publish(
                ns.standing(owner, session_id), encode(event), headers=copy
            )
        # Each person reads the last event of a timeline of its own.
        cli_js, alice_js = locked.js(cli, "cli"), locked.js(alice, ALICE)
        assert await last_event(cli_js, ns, "cli", theirs) == stored[("cli", theirs)]
        assert await last_event(alice_js, ns, ALICE, hers) == stored[(ALICE, hers)]
        assert await last_event(alice_js, ns, ALICE, theirs) is None  # none of hers there
        assert await stored_end(cli_js, ns, "cli", theirs) == stored[("cli", theirs)]
        assert await stored_end(alice_js, ns, ALICE, hers) == stored[(ALICE, hers)]
        assert await stored_end(alice_js, ns, ALICE, theirs) is None

        js = alice.jetstream(prefix=IMPORTED_JS_API, timeout=1)
        refused: list[Coroutine[Any, Any, object]] = [
            js.get_last_msg(events, ns.events("cli", theirs), direct=True),
            js.get_last_msg(events, f"{ns.root}.events.*.{theirs}", direct=True),
            js.get_last_msg(events, f"{ns.root}.events.>", direct=True),
            js.get_last_msg(events, ns.standing("cli", theirs), direct=True),
            js.get_last_msg(events, f"{ns.root}.standing.*.{theirs}", direct=True),
            js.get_msg(events, subject=ns.events("cli", theirs), seq=1, next=True, direct=True),
            js.get_msg(events, seq=1, direct=True),
            js.get_msg(events, seq=1),  # the non-direct form
        ]
        outcomes = await asyncio.gather(*refused, return_exceptions=True)
        assert all(isinstance(o, _REFUSED) for o in outcomes), outcomes
        await alice.flush()
        assert violations(registry, ALICE) >= len(refused)

        # Her own granted subject, with a body that names cli's timeline instead.
        own = f"{IMPORTED_JS_API}.DIRECT.GET.{events}.{ns.events(ALICE, hers)}"
        bodies = [
            {"next_by_subj": ns.events("cli", theirs), "seq": 1},
            {"last_by_subj": ns.events("cli", theirs)},
            {"seq": 1},
            {"seq": 1, "batch": 10, "next_by_subj": f"{ns.root}.events.>"},
        ]
        bodies.append({"last_by_subj": ns.standing("cli", theirs)})
        own_standing = f"{IMPORTED_JS_API}.DIRECT.GET.{events}.{ns.standing(ALICE, hers)}"
        for subject in (own, own_standing):
            for body in bodies:
                answer = await alice.request(subject, json.dumps(body).encode(), timeout=5)
                assert (answer.headers or {}).get("Status") == "408", (body, answer.headers)
                assert b"secret" not in answer.data, body
    finally:
        for nc in (router, cli, alice):
            await nc.close()
