"""Approvals: a tool request whose scope requires one waits for its session owner's word.

The gate admits the request and tells the owner (the person whose trace it is) on their
session's timeline, as an `approval_requested` event whose `approval_id` is the request's own
envelope id (actors/gate/_timeline.py). The runtime holds the request instead of running it:

- it stores the request (bytes, delivery headers, digest), its owner (the trace's origin, on
  a delivery only the gate writes) and when it expires, in the step's record of the
  `tool_runs` bucket, with an index `approval.<id>` -> the step; then it arms a reminder on
  its own timers subject and acknowledges the request. Nothing of the wait lives in memory.
- a `control` (approve or reject, naming the approval id) that the gate delivers from a
  person is applied only if that person is the owner (the gate's `Parley-Sender`): an agent
  cannot send a control at all (the gate refuses it), and another person's changes nothing
  and is answered as one naming no request (actors/tools/_decisions.py). A decision applies
  to the request it names and no other: the id is that request's, and what runs is the
  stored request, never anything the decision carries.
- approved, the stored request runs; rejected, or not decided before it expires (the approval
  rule's `timeout_s`, 300 s by default), it ends `denied` with `APPROVAL_DENIED`. Either way
  its result is stored, then answered to the agent, as for any step.

Deciding is a compare-and-set on the record: two decisions, or a decision and the expiry,
cannot both win; the one that lost sees the record decided and changes nothing (a person's
is answered `APPROVAL_ALREADY_DECIDED`).
"""

from __future__ import annotations

import hashlib
import json
import shlex
from typing import Final, Literal

import msgspec

from schemas import ToolRequest

__all__ = (
    "Approval",
    "approval_index_key",
    "approval_risk",
    "approval_summary",
    "approval_title",
    "request_digest",
)

_RISK: Final = {"Shell.Exec": "high", "Git.Push": "high", "File.Delete": "high"}
_READS: Final = frozenset({"File.Read", "Git.Status", "Git.Diff"})


class Approval(msgspec.Struct, frozen=True, kw_only=True):
    """A held tool request, in its step's record, until decided."""

    approval_id: str
    owner: str
    """The principal who may decide: the person the trace works for."""
    digest: str
    """SHA-256 of the request as delivered: what was shown for approval is what runs."""
    request: bytes
    headers: dict[str, str]
    """The request's delivery headers: its trace, and who bound it."""
    sender: str
    """The agent that asked (the gate's word at delivery)."""
    expires_ms: int
    rule_title: str = ""
    """The title of the approval rule that holds it, as the bundle said when it was held."""
    decision: Literal["", "approved", "rejected", "expired", "canceled"] = ""
    """"" while held; `canceled`: its session ended first (`reason` says how)."""
    decided_by: str = ""
    reason: str = ""
    decided_ms: int = 0
    """When it was decided: the step may be running in its decision's handler until the
    longest a step runs has passed since."""
    decided_with: str = ""
    """The id of the envelope that decided it (a person's control, the expiry's reminder): a
    redelivery of that control is the decision already applied, not another one refused."""

    @property
    def pending(self) -> bool:
        return not self.decision


def request_digest(payload: bytes) -> str:
    return hashlib.sha256(payload).hexdigest()


def approval_index_key(approval_id: str) -> str:
    """The key that leads from an approval id (a person's claim) to its step's record."""
    return "approval." + hashlib.sha256(approval_id.encode()).hexdigest()[:48]


def approval_risk(capability: str) -> Literal["low", "medium", "high"]:
    """Seed 002 §13.4's risk level of an action awaiting approval: high for a command, a push
    or a delete; low for a read; medium for any other change (a write, a commit, an upload,
    an HTTP request, an MCP tool, whose effect the runtime cannot know)."""
    if capability in _RISK:
        return "high"
    return "low" if capability in _READS else "medium"


_SUMMARY_MAX: Final = 400
_DECISIVE: Final = ("argv", "path", "method", "url", "repo", "remote", "branch", "cwd", "paths")


def approval_title(rule_title: str, agent: str, capability: str) -> str:
    """What a held request is called where its person sees it: its approval rule's title
    (seed 002 §10), then who asks for what."""
    asks = f"{agent} asks to use {capability}"
    return f"{rule_title}: {asks}" if rule_title else asks


def approval_summary(request: ToolRequest) -> str:
    """The request in one line for the person deciding it: the tool, then its decisive
    arguments, then the rest (long texts by their size), cut at a bound that is said."""
    arguments = request.arguments
    parts = [request.tool_name]
    for name in (*_DECISIVE, *sorted(set(arguments) - set(_DECISIVE))):
        if name not in arguments:
            continue
        value = arguments[name]
        if name == "argv" and isinstance(value, list):
            parts.append(shlex.join(str(word) for word in value))
        elif isinstance(value, str) and len(value) > 80:
            parts.append(f"{name}=<{len(value)} characters>")
        else:
            parts.append(f"{name}={json.dumps(value, ensure_ascii=False)}")
    line = " ".join(parts)
    if len(line) <= _SUMMARY_MAX:
        return line
    return f"{line[:_SUMMARY_MAX]}… (cut: {len(line)} characters in all; see its digest)"
