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

from actors.tools._runs import REFUSALS_KEPT_BYTES, RunStore, run_key
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


async def _ran(runs: RunStore, key: str, result: bytes, payers: list[Payer]) -> None:
    """A step marked, run and stored, then charged, as the runtime does."""
    stored = await runs.finish(key, await runs.begin(key, 1, 1), result)
    await runs.charge(payers, stored)


async def test_a_person_past_their_share_gets_no_new_step_and_a_stored_one_still_answers(
    nc: NATS, namespace: Namespace
) -> None:
    runs, shares = await _runs(nc, namespace, per_person=2000)
    first = run_key("gpt", "s1", "t", "step-1")
    assert await runs.refusal(first, [ALICE, AGENT]) is None
    await _ran(runs, first, b"r" * 3000, [ALICE, AGENT])  # a step that ran is kept
    assert await shares.used(ALICE) > 3000 and await shares.used(AGENT) > 3000

    second = run_key("gpt", "s1", "t", "step-2")
    said = await runs.refusal(second, [ALICE, AGENT])
    assert said is not None
    assert "the tool runtime's step records keeps" in said and "person alice" in said, said
    assert "step_record_bytes_per_person" in said and "it is used up" in said, said
    assert await runs.keeps_refusals([ALICE, AGENT])  # just past the share: kept
    marked = await runs.begin(second, 2, 1, refused=said, payers=[ALICE, AGENT])  # one write
    assert marked.state == "new" and marked.run.refused == said[:300]
    again = await runs.begin(second, 3, 2)  # its redelivery, however much room there is now
    assert again.run.refused == said[:300] and again.run.result is None
    assert await runs.refusal(second, [ALICE, AGENT]) is None  # stored: its record answers
    assert await runs.refusal(first, [ALICE, AGENT]) is None  # and the one that ran
    assert await runs.refusal(run_key("gpt", "s2", "t", "s"), [BOB, AGENT]) is None  # another's


async def test_well_past_a_share_nothing_more_is_kept_for_refusals(
    nc: NATS, namespace: Namespace
) -> None:
    """A flood of refused steps keeps its refusals only until its payer is past its share by
    `REFUSALS_KEPT_BYTES` (refusals counted): then nothing is written for it, so the flood
    cannot fill the bucket with refusals either (twice a share, a review found, is the whole
    bucket for an agent's)."""
    runs, shares = await _runs(nc, namespace, per_person=1000)
    key = run_key("gpt", "s1", "t", "big")
    await _ran(runs, key, b"r" * 1500, [ALICE, AGENT])
    assert await runs.keeps_refusals([ALICE, AGENT])  # past the share, within the allowance
    key = run_key("gpt", "s1", "t", "more")
    await _ran(runs, key, b"r" * REFUSALS_KEPT_BYTES, [ALICE, AGENT])
    assert await shares.used(ALICE) >= 1000 + REFUSALS_KEPT_BYTES
    assert not await runs.keeps_refusals([ALICE, AGENT])
    assert await runs.keeps_refusals([BOB, Payer("agent", "claude")])  # others' have room


async def test_an_agents_share_bounds_its_records_whoever_they_work_for(
    nc: NATS, namespace: Namespace
) -> None:
    """Persons of their own, each well within their share: the agent's share (20,000 bytes,
    each record charged with what it costs the bucket besides its value) stops them."""
    runs, shares = await _runs(nc, namespace, per_person=2000)  # the agent's: 20,000
    taken = 0
    for index in range(40):
        person = Payer("person", f"p{index}")
        key = run_key("gpt", f"s{index}", "t", "step")
        said = await runs.refusal(key, [person, AGENT])
        if said is not None:
            assert "agent gpt's share of the tool runtime's step records" in said, said
            break
        await _ran(runs, key, b"r" * 1000, [person, AGENT])
        taken += 1
    assert 10 <= taken < 20, taken  # each person used about 1,200 of 2,000
    assert await shares.used(AGENT) >= 20_000
