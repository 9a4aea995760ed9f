"""Seed 001's reply contract: the JSON Schema a brain is asked for, and the check of what came.

Every brain's text goes through `interpret_reply`, whatever the backend: a reply that is JSON
of the shape `{message, handoff?, final?}` is taken as it is; anything else (prose, broken
JSON, unknown fields, a handoff to an agent that is not a peer) becomes a plain message with no
handoff and not final, flagged `malformed` with the reason (seed 001 §3, §8-D), so the router
ends the session instead of following a handoff it cannot trust.

A brain answering a delegation (seed 003) may also say what seed 003's response carries
beside the text: a summary, artifacts, new facts, the sources it used, its confidence and
whether it needs a follow-up (`DelegateReply`, `delegate_reply_json_schema`). Such a reply is
read as one when the call is a delegation, and refused as an unknown-field reply otherwise.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from schemas import DecodeError, DelegateReply, Reply, decode_delegate_reply, decode_reply

__all__ = (
    "EMPTY_REPLY_TEXT",
    "InterpretedReply",
    "delegate_reply_json_schema",
    "interpret_reply",
    "reply_json_schema",
    "reply_schema_for",
)

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


def delegate_reply_json_schema() -> dict[str, Any]:
    """The JSON Schema of a delegate's reply: seed 001's message and seed 003's fields."""
    text = {"type": "string"}
    return {
        "type": "object",
        "properties": {
            "message": {"type": "string", "minLength": 1},
            "summary": {"type": "string", "minLength": 1, "maxLength": 200},
            "artifacts": {
                "type": "array",
                "maxItems": 32,
                "items": {
                    "type": "object",
                    "properties": {
                        "type": {"enum": ["table", "json", "url", "id", "file"]},
                        "value": {},
                        "label": text,
                    },
                    "required": ["type", "value"],
                    "additionalProperties": False,
                },
            },
            "new_facts": {"type": "array", "maxItems": 32, "items": {**text, "maxLength": 500}},
            "used_sources": {
                "type": "array",
                "maxItems": 32,
                "items": {
                    "type": "object",
                    "properties": {
                        "owner_scope": text,
                        "source_id": text,
                        "relevance": {"type": "number"},
                    },
                    "required": ["owner_scope", "source_id"],
                    "additionalProperties": False,
                },
            },
            "confidence": {"type": "integer", "minimum": 0, "maximum": 100},
            "requires_followup": {"type": "boolean"},
            "final": {"type": "boolean"},
        },
        "required": ["message"],
        "additionalProperties": False,
    }


def reply_schema_for(kind: str, peers: tuple[str, ...] = ()) -> dict[str, Any]:
    """The schema a brain answering a call of `kind` is asked for: a delegate's for a
    delegation (seed 003), seed 001's for the rest."""
    if kind == "delegation_request":
        return delegate_reply_json_schema()
    return reply_json_schema(peers)


@dataclass(frozen=True, slots=True)
class InterpretedReply:
    """What a brain's text means under the contract."""

    reply: Reply
    malformed: bool
    problem: str = ""
    report: DelegateReply | None = None
    """A delegate's reply with seed 003's fields, when the call was a delegation."""


def interpret_reply(
    text: str, peers: tuple[str, ...] = (), *, delegate: bool = False
) -> InterpretedReply:
    """Validate `text` as a reply; on any failure, keep it as a plain, malformed message.

    `delegate`: the call is a delegation, so seed 003's fields may come with the message (a
    reply in seed 001's shape alone is as good)."""
    if delegate:
        try:
            report = decode_delegate_reply(text)
        except DecodeError:
            pass  # perhaps seed 001's shape alone: read as any reply below
        else:
            return InterpretedReply(Reply(message=report.message), malformed=False, report=report)
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
