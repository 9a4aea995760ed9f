"""Each person's and agent's share of the step records (actors/tools/_runs.py with
bus/_shares.py), on a real nats-server's `tool_runs` bucket.

An attack review's agent filled the bucket every person's steps are recorded in with its own
large results, within minutes at its rate limit, and no step of anyone's could be marked
afterwards. Each record is now charged to its person and agent, and a new step is taken only
while both shares have room; a step stored already (a redelivery) is always answered. The
whole system refusing such steps is tests/security/test_step_record_shares.py's.
"""

from __future__ import annotations

import pytest
from nats.aio.client import Client as NATS

from actors.tools._runs import RunStore, run_key
from bus import RECORD_TERMS, Payer, ShareExceeded, Shares
from schemas import Namespace

ALICE, BOB, AGENT = Payer("person", "alice"), Payer("person", "bob"), Payer("agent", "gpt")


async def _runs(nc: NATS, namespace: Namespace, per_person: int) -> tuple[RunStore, Shares]:
    kv = await nc.jetstream().key_value(namespace.bucket("tool_runs"))
    shares = Shares(
        kv,
        per_person=per_person,
        per_agent=10 * per_person,
        retention_s=3600,
        terms=RECORD_TERMS,
    )
    return RunStore(kv, shares), shares


async def test_a_person_past_their_share_gets_no_new_step_and_a_stored_one_still_answers(
    nc: NATS, namespace: Namespace
) -> None:
    runs, shares = await _runs(nc, namespace, per_person=2000)
    first = run_key("gpt", "s1", "t", "step-1")
    begun = await runs.begin(first, 1, 1)
    await runs.check_room([ALICE, AGENT])
    await runs.finish(first, begun, b"r" * 3000, [ALICE, AGENT])  # a step that ran is kept
    assert await shares.used(ALICE) > 3000 and await shares.used(AGENT) > 3000

    second = run_key("gpt", "s1", "t", "step-2")
    marked = await runs.begin(second, 2, 1)
    assert marked.state == "new"
    with pytest.raises(ShareExceeded) as refused:
        await runs.check_room([ALICE, AGENT])
    said = str(refused.value)
    assert "the tool runtime's step records keeps" in said and "person alice" in said, said
    assert "step_record_bytes_per_person" in said and "it is used up" in said, said
    await runs.refuse(second, marked, said)
    again = await runs.begin(second, 3, 2)  # its redelivery, however much room there is now
    assert again.run.refused == said[:300] and again.run.result is None
    stored = await runs.begin(first, 4, 2)  # the step that ran: answered from its record
    assert stored.state == "done" and stored.run.result == b"r" * 3000
    await runs.check_room([BOB, AGENT])  # another person's share has room


async def test_an_agents_share_bounds_its_records_whoever_they_work_for(
    nc: NATS, namespace: Namespace
) -> None:
    runs, shares = await _runs(nc, namespace, per_person=1000)  # the agent's: 10,000
    for index in range(11):
        person = Payer("person", f"p{index}")
        key = run_key("gpt", f"s{index}", "t", "step")
        begun = await runs.begin(key, 1, 1)
        if index == 10:
            with pytest.raises(ShareExceeded) as refused:
                await runs.check_room([person, AGENT])
            assert "agent gpt's share of the tool runtime's step records" in str(refused.value)
            break
        await runs.check_room([person, AGENT])
        await runs.finish(key, begun, b"r" * 1000, [person, AGENT])
    assert await shares.used(AGENT) >= 10_000
