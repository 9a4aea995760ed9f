"""Seed 001's reply contract: the JSON Schema a brain is asked for, and the check of what came.

Every brain's text goes through `interpret_reply`, whatever the backend: a reply that is JSON
of the shape `{message, handoff?, final?}` is taken as it is; anything else (prose, broken
JSON, unknown fields, a handoff to an agent that is not a peer) becomes a plain message with no
handoff and not final, flagged `malformed` with the reason (seed 001 §3, §8-D), so the router
ends the session instead of following a handoff it cannot trust.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from schemas import DecodeError, Reply, decode_reply

__all__ = ("EMPTY_REPLY_TEXT", "InterpretedReply", "interpret_reply", "reply_json_schema")

EMPTY_REPLY_TEXT = "(the agent returned an empty reply)"
"""A reply's message may not be empty (seed 001 §3): what an empty answer is shown as."""


def reply_json_schema(peers: tuple[str, ...] = ()) -> dict[str, Any]:
    """The JSON Schema of seed 001 §3, with `handoff.to` limited to `peers` when given.

    The seed's schema names `gpt` and `claude`; here the enum is the profile's own peers, so
    the same contract serves any set of agents. Without peers, any valid agent name is allowed.
    """
    to: dict[str, Any] = {"type": "string"}
    if peers:
        to["enum"] = list(peers)
    else:
        to["pattern"] = "^[a-z0-9_-]{1,64}$"
    return {
        "type": "object",
        "properties": {
            "message": {"type": "string", "minLength": 1},
            "handoff": {
                "type": "object",
                "properties": {
                    "to": to,
                    "task": {"type": "string", "minLength": 1, "maxLength": 500},
                },
                "required": ["to", "task"],
                "additionalProperties": False,
            },
            "final": {"type": "boolean"},
        },
        "required": ["message"],
        "additionalProperties": False,
    }


@dataclass(frozen=True, slots=True)
class InterpretedReply:
    """What a brain's text means under the contract."""

    reply: Reply
    malformed: bool
    problem: str = ""


def interpret_reply(text: str, peers: tuple[str, ...] = ()) -> InterpretedReply:
    """Validate `text` as a reply; on any failure, keep it as a plain, malformed message."""
    try:
        reply = decode_reply(text)
    except DecodeError as exc:
        return _plain(text, f"{exc.reason}: {exc.detail}")
    if peers and reply.handoff and reply.handoff.to not in peers:
        return _plain(text, f"handoff to {reply.handoff.to!r}, not one of the peers {peers}")
    return InterpretedReply(reply, malformed=False)


def _plain(text: str, problem: str) -> InterpretedReply:
    message = text.strip() or EMPTY_REPLY_TEXT
    return InterpretedReply(Reply(message=message), malformed=True, problem=problem)
