"""Return tickets: what a call's answer needs, carried inside the call's frame (pure).

When Alice's relay forwards a call, the answer that comes back must reach the right caller,
under the right call id and trace position. Instead of storing that before the frame may go
(one more fsynced round trip on every forward), the relay seals it into a ticket that only
its own device can open and sends it inside the call's frame; Bob's relay keeps it with the
call it submitted and puts it, unread, into the answer's frame.

A ticket is ChaCha20-Poly1305 under a key derived (HKDF-SHA256) from the device's signing
key, so every replica of the device opens what any of them sealed, and nobody else can read
or forge one. Its associated data names the peer device, the relay session and the call's
envelope id, so a ticket answers only the call it was sealed for, from the device it was
sent to: an answer with a ticket of another call, another session or another device, or no
ticket, is refused as unsolicited.
"""

from __future__ import annotations

import os
from typing import Annotated

import msgspec
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import ChaCha20Poly1305
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from cryptography.hazmat.primitives.serialization import Encoding, NoEncryption, PrivateFormat
from msgspec import Meta, Struct

from actors.relay._keys import DeviceKeys

__all__ = ("CallTicket", "TicketRefused", "Tickets")

_NONCE = 12
_INFO = b"parley-relay-ticket-v1"
_encoder = msgspec.json.Encoder()


class CallTicket(Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """A forwarded call's caller, as the answer must name it here."""

    shared: str
    """The shared agent's local name: the answer's sender."""
    caller: str
    call_id: str
    session_id: str | None = None
    round: Annotated[int, Meta(ge=1)] = 1
    max_rounds: Annotated[int, Meta(ge=1)] = 1
    trace_id: str = ""
    hop_count: Annotated[int, Meta(ge=0)] = 0
    origin: str = ""
    deadline_ms: int | None = None


_decoder = msgspec.json.Decoder(CallTicket)


class TicketRefused(ValueError):
    """A ticket that does not open for this answer: absent, altered, or another call's."""


class Tickets:
    """Seal and open one device's return tickets."""

    def __init__(self, keys: DeviceKeys) -> None:
        seed = keys.signing.private_bytes(Encoding.Raw, PrivateFormat.Raw, NoEncryption())
        key = HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=_INFO).derive(seed)
        self._aead = ChaCha20Poly1305(key)

    def seal(self, ticket: CallTicket, *, peer: str, session: str, call: str) -> bytes:
        """The ticket for the answer from `peer`, in `session`, to the call `call`."""
        nonce = os.urandom(_NONCE)
        return nonce + self._aead.encrypt(
            nonce, _encoder.encode(ticket), _bound_to(peer, session, call)
        )

    def open(self, sealed: bytes, *, peer: str, session: str, call: str) -> CallTicket:
        """The ticket this device sealed for exactly this (peer, session, call).

        Raises:
            TicketRefused: anything else.
        """
        if len(sealed) <= _NONCE:
            raise TicketRefused("the answer carries no return ticket")
        try:
            plain = self._aead.decrypt(
                sealed[:_NONCE], sealed[_NONCE:], _bound_to(peer, session, call)
            )
        except InvalidTag:
            raise TicketRefused(
                "the return ticket was not sealed here for this call from this device"
            ) from None
        return _decoder.decode(plain)


def _bound_to(peer: str, session: str, call: str) -> bytes:
    return b"\x00".join((_INFO, peer.encode(), session.encode(), call.encode()))
