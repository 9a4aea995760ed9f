"""Each person's and agent's share of the step records (actors/tools/_runs.py with
bus/_shares.py), on a real nats-server's `tool_runs` bucket.

An attack review's agent filled the bucket every person's steps are recorded in with its own
large results, within minutes at its rate limit, and no step of anyone's could be marked
afterwards. Each record is now charged to its person and agent, and a new step is taken only
while both shares have room; a step stored already (a redelivery) is always answered. The
whole system refusing such steps is tests/security/test_step_record_shares.py's.
"""

from __future__ import annotations

from nats.aio.client import Client as NATS

from actors.tools._runs import RunStore, run_key
from bus import RECORD_TERMS, Payer, Shares
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
    assert await runs.refusal(first, [ALICE, AGENT]) is None
    begun = await runs.begin(first, 1, 1)
    await runs.finish(first, begun, b"r" * 3000, [ALICE, AGENT])  # a step that ran is kept
    assert await shares.used(ALICE) > 3000 and await shares.used(AGENT) > 3000

    second = run_key("gpt", "s1", "t", "step-2")
    said = await runs.refusal(second, [ALICE, AGENT])
    assert said is not None
    assert "the tool runtime's step records keeps" in said and "person alice" in said, said
    assert "step_record_bytes_per_person" in said and "it is used up" in said, said
    assert await runs.keeps_refusals([ALICE, AGENT])  # under twice the share: kept
    marked = await runs.begin(second, 2, 1)
    await runs.refuse(second, marked, said, [ALICE, AGENT])
    again = await runs.begin(second, 3, 2)  # its redelivery, however much room there is now
    assert again.run.refused == said[:300] and again.run.result is None
    assert await runs.refusal(second, [ALICE, AGENT]) is None  # stored: its record answers
    assert await runs.refusal(first, [ALICE, AGENT]) is None  # and the one that ran
    assert await runs.refusal(run_key("gpt", "s2", "t", "s"), [BOB, AGENT]) is None  # another's


async def test_past_twice_a_share_nothing_more_is_kept_for_refusals(
    nc: NATS, namespace: Namespace
) -> None:
    """A flood of refused steps keeps its refusals only while its payer has used less than
    twice its share (refusals counted): past that nothing is written for it, so the flood
    cannot fill the bucket with refusals either."""
    runs, shares = await _runs(nc, namespace, per_person=1000)
    key = run_key("gpt", "s1", "t", "big")
    await runs.finish(key, await runs.begin(key, 1, 1), b"r" * 1500, [ALICE, AGENT])
    assert await runs.keeps_refusals([ALICE, AGENT])  # 1,500 of 1,000: under twice
    key = run_key("gpt", "s1", "t", "more")
    await runs.finish(key, await runs.begin(key, 1, 1), b"r" * 600, [ALICE, AGENT])
    assert await shares.used(ALICE) >= 2000
    assert not await runs.keeps_refusals([ALICE, AGENT])
    assert await runs.keeps_refusals([BOB, AGENT])  # the agent's share (10,000) has room


async def test_an_agents_share_bounds_its_records_whoever_they_work_for(
    nc: NATS, namespace: Namespace
) -> None:
    runs, shares = await _runs(nc, namespace, per_person=1000)  # the agent's: 10,000
    for index in range(11):
        person = Payer("person", f"p{index}")
        key = run_key("gpt", f"s{index}", "t", "step")
        said = await runs.refusal(key, [person, AGENT])
        if index == 10:
            assert said is not None and "agent gpt's share of the tool runtime's step" in said
            break
        assert said is None
        await runs.finish(key, await runs.begin(key, 1, 1), b"r" * 1000, [person, AGENT])
    assert await shares.used(AGENT) >= 10_000
