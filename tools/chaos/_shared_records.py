"""Reading a `parley chaos --shared` run back from both deployments, for its checker.

Nothing is recorded for the checker: Alice's session timelines and her gate's decisions, Bob's
gate's decisions and both audit chains are what each deployment stores anyway. The join
across the boundary is the relay's id rule: Bob's relay submits Alice's call `A` from Alice's
device `D` under `owner_call_id(D, A)` (the same id on every redelivery, so a frame given twice
is de-duplicated), which the relay exports for this join.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import load_pem_private_key

from actors.relay import owner_call_id
from schemas import Decision, SessionEvent, device_principal, key_id
from tools._shared_deployments import Deployment, SharedDeployments
from tools.audit import verify_stream
from tools.chaos._checker import Fault, SessionOutcome
from tools.chaos._reads import Stored, read_stream
from tools.chaos._shared_check import AuditCheck, Send, SharedHistory

__all__ = ("SHARED_AGENT", "audit_key", "read_shared_history", "sessions_from")

SHARED_AGENT = "bob-byte-doc"
"""The shared agent's name on Alice's side; `byte-doc` on Bob's."""
_BOB_AGENT = "byte-doc"
_ENDS = {"session_completed": "completed", "session_failed": "failed", "session_canceled": "failed"}
_READ_TIMEOUT_S = 60.0


def audit_key(side: Deployment) -> str:
    """Where the run keeps the private key of `side`'s auditor."""
    return str(side.dir / "keys" / "audit.key")


@dataclass(frozen=True)
class _Timeline:
    sessions: list[SessionOutcome]
    sends: list[Send]
    consumed: frozenset[str]
    progress: list[float]
    told: dict[str, str]


def sessions_from(records: Sequence[Stored], alice_device: str) -> _Timeline:
    """Alice's session events, in stream order: each session's outcome, every turn sent to the
    shared agent (and the id Bob's relay gives it), every input an event applied."""
    started: dict[str, float] = {}
    ended: dict[str, SessionOutcome] = {}
    sends: list[Send] = []
    consumed: set[str] = set()
    progress: list[float] = []
    told: dict[str, str] = {}
    for record in records:
        event = record.envelope
        if not isinstance(event, SessionEvent):
            continue
        at = record.stored_at or event.created_at.timestamp()
        progress.append(at)
        started.setdefault(event.session_id, at)
        consumed.update(event.envelope_ids)
        payload = event.payload
        if event.event_type == "step_started" and payload.get("role") == "outbound":
            for call in event.envelope_ids:
                bob_call = owner_call_id(alice_device, call)
                sends.append(Send(event.session_id, event.round or 0, call, bob_call))
        how = _ENDS.get(event.event_type)
        if how is not None and event.session_id not in ended:
            ended[event.session_id] = SessionOutcome(
                event.session_id,
                ended=how,
                reason=_reason(event) if how == "failed" else event.stop_reason,
                started_at=started[event.session_id],
                ended_at=at,
            )
            if how == "failed":
                told.setdefault(event.stop_reason or "", str(payload.get("reason") or ""))
    sessions = [
        ended.get(session, SessionOutcome(session, started_at=at))
        for session, at in started.items()
    ]
    return _Timeline(sessions, sends, frozenset(consumed), progress, told)


def _reason(end: SessionEvent) -> str:
    """A failed session's stop reason, if the event also tells a person why ("" if not)."""
    if not str(end.payload.get("reason") or "").strip():
        return ""
    return end.stop_reason or "error"


async def _decisions(side: Deployment) -> list[Decision]:
    nc, js = await side.connect_as("provisioner")  # the whole timeline is an operator's
    try:
        stored = await read_stream(
            js,
            side.ns.stream("events"),
            side.ns.wildcard("decisions"),
            timeout=_READ_TIMEOUT_S,
        )
    finally:
        await nc.close()
    return [r.envelope for r in stored if isinstance(r.envelope, Decision)]


async def _events(side: Deployment) -> list[Stored]:
    nc, js = await side.connect_as("provisioner")
    try:
        return await read_stream(
            js, side.ns.stream("events"), side.ns.wildcard("events"), timeout=_READ_TIMEOUT_S
        )
    finally:
        await nc.close()


async def _audit(side: Deployment) -> AuditCheck:
    """Walk `side`'s audit chain with its auditor's public key, reading as the auditor."""
    try:
        with open(audit_key(side), "rb") as pem:  # noqa: ASYNC230 - a small local file
            private = load_pem_private_key(pem.read(), password=None)
    except FileNotFoundError:
        return AuditCheck(side.name, None, ("no auditor key",))
    assert isinstance(private, Ed25519PrivateKey)  # noqa: S101 - the run wrote it
    public = private.public_key()
    nc, js = await side.connect_as("auditor")
    try:
        report = await verify_stream(js, side.ns.stream("audit"), trusted={key_id(public): public})
    finally:
        await nc.close()
    if not report.records:
        return AuditCheck(side.name, None, ("no records",))
    problems = () if report.ok else (f"seq {report.first_bad_seq}: {report.problem}",)
    return AuditCheck(side.name, report.records, problems)


async def read_shared_history(
    up: SharedDeployments,
    faults: Sequence[Fault],
    load_span: tuple[float, float] | None = None,
    refusals: Mapping[str, int] | None = None,
    *,
    min_window_s: float = 0.0,
) -> SharedHistory:
    """Both deployments' history of the run, as the checker's facts, with what the load
    generator knows: when it ran and what it was refused."""
    alice, bob = up.alice, up.bob
    principal = device_principal(alice.keys.device_id)
    timeline = sessions_from(await _events(alice), alice.keys.device_id)
    alice_answers: defaultdict[str, set[str]] = defaultdict(set)
    for decision in await _decisions(alice):
        if decision.allowed and decision.sender == SHARED_AGENT and decision.causation_id:
            alice_answers[decision.causation_id].add(decision.envelope_id)
    bob_calls: list[str] = []
    bob_answers: list[tuple[str, str]] = []
    for decision in await _decisions(bob):
        if not decision.allowed:
            continue
        if decision.sender == principal and decision.target == _BOB_AGENT:
            bob_calls.append(decision.envelope_id)
        elif decision.sender == _BOB_AGENT and decision.target == principal:
            bob_answers.append((decision.envelope_id, decision.causation_id))
    return SharedHistory(
        sessions=timeline.sessions,
        sends=timeline.sends,
        bob_calls=bob_calls,
        bob_answers=bob_answers,
        alice_answers={call: frozenset(ids) for call, ids in alice_answers.items()},
        consumed=timeline.consumed,
        audits=(await _audit(alice), await _audit(bob)),
        faults=faults,
        progress=timeline.progress,
        told=timeline.told,
        load_span=load_span,
        refusals=dict(refusals or {}),
        min_window_s=min_window_s,
    )
