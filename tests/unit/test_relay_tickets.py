"""Return tickets: only the device that sealed one opens it, and only for the call it names."""

from __future__ import annotations

import pytest

from actors.relay import DeviceKeys
from actors.relay._tickets import CallTicket, TicketRefused, Tickets

ALICE, BOB, MALLORY = DeviceKeys.generate(), DeviceKeys.generate(), DeviceKeys.generate()
TICKET = CallTicket(
    shared="bob-byte-doc",
    caller="router",
    call_id="c-1",
    session_id="s-1",
    round=2,
    max_rounds=6,
    trace_id="t-1",
    hop_count=1,
    origin="person:alice",
    deadline_ms=1_800_000_000_000,
)
FOR = {"peer": BOB.device_id, "session": "s-1", "call": "env-1"}


def test_a_ticket_opens_to_what_was_sealed_on_every_replica_of_the_device() -> None:
    sealed = Tickets(ALICE).seal(TICKET, **FOR)
    assert Tickets(ALICE).open(sealed, **FOR) == TICKET  # a second instance: another replica
    assert b"router" not in sealed and b"t-1" not in sealed


@pytest.mark.parametrize(
    "other",
    [
        {"peer": MALLORY.device_id},  # given back by another device than it was sent to
        {"session": "s-2"},  # in another session
        {"call": "env-2"},  # as the answer to another call
    ],
)
def test_a_ticket_answers_only_its_call_from_its_peer_in_its_session(
    other: dict[str, str],
) -> None:
    sealed = Tickets(ALICE).seal(TICKET, **FOR)
    with pytest.raises(TicketRefused, match="not sealed here for this call"):
        Tickets(ALICE).open(sealed, **{**FOR, **other})


def test_an_absent_altered_or_foreign_ticket_is_refused() -> None:
    sealed = Tickets(ALICE).seal(TICKET, **FOR)
    with pytest.raises(TicketRefused, match="no return ticket"):
        Tickets(ALICE).open(b"", **FOR)
    flipped = bytearray(sealed)
    flipped[-1] ^= 1
    with pytest.raises(TicketRefused):
        Tickets(ALICE).open(bytes(flipped), **FOR)
    # Bob (or anyone) sealing a ticket of his own, to be taken for a call Alice sent.
    with pytest.raises(TicketRefused):
        Tickets(ALICE).open(Tickets(BOB).seal(TICKET, **FOR), **FOR)
