"""What the runtime tells an actor about an input it is about to dead-letter unhandled.

An input that fails to decode or validate, or one quarantined after it killed a handler
(bus/_quarantine.py), never reaches `Actor.handle()`. The runtime dead-letters it either way;
before that it hands the actor a `Rejection`, so an actor that knows the sender (the gate, from
the subject of `parley.submit.<sender>`) can answer it with a typed error instead of leaving
the sender waiting for news that never comes.

`field` and `problem` are read out of the decoder's message (msgspec says
"Expected `int` >= 1 - at `$.max_rounds`"), and `value` is the offending value when the bytes
are JSON at all: what a person needs to fix the input, in machine-readable form.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import msgspec

__all__ = ("Rejection", "describe")

_AT = re.compile(r"^(?P<problem>.*) - at `\$(?P<path>[^`]*)`$", re.DOTALL)
_MISSING = re.compile(r"^Object missing required field `(?P<name>[^`]+)`$")
_STEP = re.compile(r"\.([^.\[]+)|\[(\d+)\]")
_MAX_VALUE_CHARS = 200


@dataclass(frozen=True, slots=True)
class Rejection:
    """One input dead-lettered without being handled, and why."""

    stream: str
    seq: int
    attempt: int
    subject: str
    sender: str
    """From where the input's `sender_from` says (the subject's token), "" when unknown."""
    reason: str
    """The dead letter's reason: `decode_invalid`, `bad_header`, `quarantined`, …"""
    detail: str
    field: str
    """What was wrong: a field path (`max_rounds`, `reply.message`), a header name, or
    `payload` for the bytes as a whole."""
    problem: str
    value: Any = None
    """The offending value (a string cut to 200 characters), None when it cannot be read."""
    envelope_id: str = ""
    """The id the input claims, when it has a readable one (for `cause_id`), else ""."""
    kind: str = ""
    """The kind the input claims, when it has a readable one, else ""."""
    causation_id: str = ""
    """The input's `Parley-Causation-Id` header, a claim ("" when absent): the gate checks it
    against its records to tell a caller that waits on a refused answer."""


class _Claimed(msgspec.Struct):
    id: str = ""
    kind: str = ""


def claimed_kind(payload: bytes) -> str:
    """The `kind` a payload claims, leniently read; "" when there is none worth quoting."""
    try:
        claimed = msgspec.json.decode(payload, type=_Claimed).kind
    except (msgspec.DecodeError, UnicodeDecodeError, RecursionError):
        return ""
    return claimed if len(claimed) <= 64 else ""


def claimed_id(payload: bytes) -> str:
    """The `id` a payload claims, leniently read; "" when there is none worth quoting."""
    try:
        claimed = msgspec.json.decode(payload, type=_Claimed).id
    except (msgspec.DecodeError, UnicodeDecodeError, RecursionError):
        return ""
    return claimed if 0 < len(claimed) <= 128 else ""


def _value_at(payload: bytes, path: str) -> Any:
    try:
        value: Any = msgspec.json.decode(payload)
    except (msgspec.DecodeError, UnicodeDecodeError, RecursionError):
        return None
    for name, index in _STEP.findall(path):
        if name and isinstance(value, dict):
            value = value.get(name)
        elif index and isinstance(value, list) and int(index) < len(value):
            value = value[int(index)]
        else:
            return None
    if isinstance(value, str) and len(value) > _MAX_VALUE_CHARS:
        return value[:_MAX_VALUE_CHARS]
    return value if isinstance(value, str | int | float | bool) else None


def describe(reason: str, detail: str, payload: bytes) -> tuple[str, str, Any]:
    """(field, problem, value) of a dead-letter reason and detail, for the sender."""
    if reason == "decode_invalid":
        match = _AT.match(detail)
        problem, path = (match["problem"], match["path"]) if match else (detail, "")
        missing = _MISSING.match(problem)
        if missing:
            return f"{path.lstrip('.')}.{missing['name']}".lstrip("."), problem, None
        field = path.lstrip(".") or "payload"
        return field, problem, _value_at(payload, path) if path else None
    if reason == "bad_header":
        name = detail.split(" ", 1)[0]
        return (name if name.startswith("Parley-") else "headers"), detail, None
    return "payload", detail, None
