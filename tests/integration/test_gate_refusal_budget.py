"""A sender past its refusal budget loses none of its admissible submissions to it
(actors/gate/_refusal_budget.py), with a real gate process.

Its ids are claimed only once admitted then, so a repeated id inside one fetched batch must
still be refused before anything is charged for it, as for any sender: a review found the
copy decided and charged beside the original, and of ten notes (each sent twice, a rate of
twelve) only six admitted.
"""

from __future__ import annotations

from pathlib import Path

from nats.aio.client import Client as NATS

from bus import MSG_ID, EmbeddedServer
from schemas import ErrorCode, HumanMessage, Namespace, new_id, utc_now
from tests.support.gate import Decisions, Signer, make_bundle, publish_bundle, start_gate, submit
from tests.support.processes import READY


def _note(target: str = "sink") -> HumanMessage:
    return HumanMessage(
        id=new_id(), created_at=utc_now(), text="hi", call_id=new_id(), target=target
    )


async def test_a_quiet_senders_repeated_ids_in_one_batch_cost_it_no_admission(
    nc: NATS, nats_server: EmbeddedServer, namespace: Namespace, tmp_path: Path
) -> None:
    js = nc.jetstream()
    signer = Signer.create(tmp_path)
    notes_profile = {
        "start_traces": True,
        "speaks_for_person": True,
        "allowed_targets": ("sink",),
        "rate_per_minute": 12,
    }
    await publish_bundle(js, namespace, signer.sign(make_bundle(notes=notes_profile)))
    decisions = await Decisions(js, namespace).open()
    refused, first = _note(target="nowhere"), _note()
    notes = [_note() for _ in range(10)]
    # Stored before the gate starts, so that it fetches them two by two, in this order: the
    # refusal spends the budget of one (with a note beside it), then each note and its copy.
    await submit(js, namespace, "notes", refused)
    await submit(js, namespace, "notes", first)
    for note in notes:
        await submit(js, namespace, "notes", note)
        await submit(js, namespace, "notes", note, headers={MSG_ID: new_id()})  # its copy
    gate = start_gate(
        nats_server.url, namespace, signer, {"refusals_per_minute": 1}, fetch_batch="2"
    )
    try:
        await gate.wait_line(READY)
        decided: dict[str, bool] = {}
        while len(decided) < 2 + len(notes):
            decision = await decisions.next(timeout=30)
            decided[decision.envelope_id] = decision.allowed
        assert decided == {refused.id: False, first.id: True, **{n.id: True for n in notes}}
    finally:
        gate.close()


async def test_a_quiet_senders_id_first_in_a_batch_stays_its_own_against_a_later_copy(
    nc: NATS, nats_server: EmbeddedServer, namespace: Namespace, tmp_path: Path
) -> None:
    """A second review: the quiet sender's id was left out of the batch's early claims, so
    another sender's later copy claimed it early, was refused as the duplicate all the same,
    and the quiet sender's admissible note then lost its id to that claim: both refused."""
    js = nc.jetstream()
    signer = Signer.create(tmp_path)
    profile = {"start_traces": True, "speaks_for_person": True, "allowed_targets": ("sink",)}
    bundle = make_bundle(notes=profile, memo=profile)
    await publish_bundle(js, namespace, signer.sign(bundle))
    decisions = await Decisions(js, namespace).open()
    refused, first, mine = _note(target="nowhere"), _note(), _note()
    # Fetched two by two: the refusal spends notes' budget of one; then notes' note, and
    # memo's submission of the very same envelope, in one batch.
    await submit(js, namespace, "notes", refused)
    await submit(js, namespace, "notes", first)
    await submit(js, namespace, "notes", mine)
    await submit(js, namespace, "memo", mine, headers={MSG_ID: new_id()})
    gate = start_gate(
        nats_server.url, namespace, signer, {"refusals_per_minute": 1}, fetch_batch="2"
    )
    try:
        await gate.wait_line(READY)
        decided = [await decisions.next(timeout=30) for _ in range(4)]
        by = {(d.sender, d.envelope_id): (d.allowed, d.code) for d in decided}
        assert by[("notes", mine.id)] == (True, None), by
        assert by[("memo", mine.id)] == (False, ErrorCode.DUPLICATE_ENVELOPE), by
    finally:
        gate.close()
