"""What the shared-agent relay stores and sends: devices, shares, and the signed frame body.

A device is named by its Ed25519 public key in lowercase hex (64 characters, a valid subject
token), so a device id is also the key its frames are verified with: nothing maps ids to keys,
and nothing can be made to map them wrongly. Its X25519 key, the one frames are encrypted to,
travels beside it in a `DevicePub` string (`<ed25519 hex>.<x25519 hex>`), which is what one
owner hands the other out of band.

A share (`ShareRecord`) is written by the owner of the shared agent and signed by the owner's
device key in a DSSE envelope, so the relay that enforces it can check that the owner, not
someone with write access to a file, granted it. Revoking re-signs the record with
`revoked_at` set. A `SharedAgent` is the other side's note of a remote agent it may call.

`FrameBody` is the plaintext of one relayed frame: both device ids, the session, the sequence
number, the calling side's hop count and the envelope's exact bytes, all inside the signed
data (actors/relay/_sealing.py seals and opens it; docs/envelopes.md describes it).
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Annotated, Literal

from msgspec import UNSET, Meta, Struct, UnsetType

from schemas._base import Id, Name

__all__ = (
    "DEVICE_ID_PATTERN",
    "SHARE_PAYLOAD_TYPE",
    "DeviceId",
    "DevicePub",
    "FrameBody",
    "ShareRecord",
    "SharedAgent",
    "device_principal",
    "parse_device_pub",
)

DEVICE_ID_PATTERN = r"^[0-9a-f]{64}$"
DeviceId = Annotated[str, Meta(pattern=DEVICE_ID_PATTERN)]
"""An Ed25519 public key, raw bytes as lowercase hex."""

KemKey = Annotated[str, Meta(pattern=DEVICE_ID_PATTERN)]
"""An X25519 public key, raw bytes as lowercase hex."""

SessionToken = Annotated[str, Meta(pattern=r"^[A-Za-z0-9_-]{1,128}$")]

MAX_TICKET_BYTES = 2048
"""A return ticket's limit: a call's caller, call id and trace position, sealed."""
"""A session name safe in a KV key: chosen by the remote side, so checked before use."""

SHARE_PAYLOAD_TYPE = "application/vnd.parley.share+json"

TRACEPARENT_PATTERN = r"^00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$"
"""A W3C trace context `traceparent`, version 00, as the OpenTelemetry propagator writes it."""

_DEVICE_PUB = re.compile(r"([0-9a-f]{64})\.([0-9a-f]{64})")


class DevicePub(Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The public half of a device: what `parley device init` prints and owners exchange."""

    device_id: DeviceId
    kem_key: KemKey

    def __str__(self) -> str:
        return f"{self.device_id}.{self.kem_key}"


def parse_device_pub(text: str) -> DevicePub:
    """Read `<ed25519 hex>.<x25519 hex>`; ValueError names what is wrong."""
    match = _DEVICE_PUB.fullmatch(text.strip().lower())
    if match is None:
        raise ValueError(
            "a device's public id is '<ed25519 hex>.<x25519 hex>' "
            "(64 hex digits each, as `parley device init` prints it)"
        )
    return DevicePub(device_id=match.group(1), kem_key=match.group(2))


def device_principal(device_id: str) -> str:
    """The principal that stands for a remote device inside the sharing owner's deployment:
    the gate's policy names it (`allowed_targets`, rates) like any other sender."""
    return f"device-{device_id[:16]}"


class ShareRecord(Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """One owner's grant: `device` may reach the owner's agent `agent` until `expires_at`."""

    share_id: Id
    agent: Name
    """The shared agent, as the owner's deployment names it."""
    device: DevicePub
    """The device allowed to reach it (and the key answers are encrypted to)."""
    principal: Name
    """Who the device's calls are submitted as in the owner's deployment."""
    owner_device: DeviceId
    """The owner's device: the key that signs this record and the frames answering calls."""
    created_at: datetime
    expires_at: datetime
    revoked_at: datetime | None = None


class SharedAgent(Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """A remote agent this deployment may call, under a local name (`bob-byte-doc`)."""

    name: Name
    """The local name: the gate's `shared_agents` entry and the relay's deliver subject."""
    agent: Name
    """The agent's name in its owner's deployment."""
    device: DevicePub
    """The owner's device: frames to it are encrypted to its key, its answers signed by it."""
    gateway_url: str = ""
    added_at: datetime | None = None


class FrameBody(Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The signed plaintext of one relayed frame.

    `kind` says which way it goes: a `call` for the owner's agent `agent`, or the `answer` to
    the call whose envelope id (in the caller's deployment) is `in_reply_to`. `sent_at_ms`
    lets a receiver refuse frames older than its replay windows are kept.

    `hop_count` is the hop a call sat at in the caller's deployment when its relay took it:
    the receiving relay names it (plus one) to its gate, which holds the chain to
    maxHopCount as a whole across deployments (seed 000's loop prevention). It is inside the
    signed bytes, so an altered count is refused like any altered frame. An answer carries
    0; a frame from a sender that never names it reads as 0, a fresh root.

    `numbered_by` says where `seq` comes from, and so which replay window it is checked in:
    `deliveries` (the sender's deliver stream sequence of the envelope it forwards: every
    call, every answer) or `relay` (a revision of the sender's relay bucket: the refusals a
    relay sends on its own). `ticket` is the caller's return ticket: sealed by the calling
    relay into a call, given back unread in its answer (actors/relay/_tickets.py).
    """

    v: Literal[1] = 1
    sender_device: DeviceId
    recipient_device: DeviceId
    session: SessionToken
    seq: Annotated[int, Meta(ge=1)]
    kind: Literal["call", "answer"]
    agent: str = ""
    in_reply_to: str = ""
    sent_at_ms: Annotated[int, Meta(ge=0)]
    envelope: bytes
    hop_count: Annotated[int, Meta(ge=0, le=1000)] = 0
    numbered_by: Literal["relay", "deliveries"] = "relay"
    ticket: Annotated[bytes, Meta(max_length=MAX_TICKET_BYTES)] = b""
    traceparent: Annotated[str, Meta(pattern=TRACEPARENT_PATTERN)] | UnsetType = UNSET
