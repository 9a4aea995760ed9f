"""One person's principal inside the console: that person's own NATS connection.

The console holds no identity of its own at the gate: for each person it connects as
`person-<name>`, with the nkey seed and account settings `parley nats-config` wrote for that
person, submits on `parley.submit.person-<name>` (the gate takes the sender from that subject
and decides every envelope), and follows what the broker lets that person read: its own
sessions' timelines, the text being written in them (the agents' answers as the LLM gateway
streams them, `SessionTyping`, best effort: never recorded, never replayed) and the gate's
decisions on what it sent (read-only stream imports).

The console records each session's events from the moment the person's connection opens, so
a page opened mid-session replays them first. A person's account may not read the events
stream by sequence or create a consumer on it (a consumer's creator chooses where the broker
republishes what it reads), so sessions that ended before the console started are not shown.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final, Literal

import msgspec
from nats.aio.client import Client as NATS
from nats.aio.msg import Msg

from actors.console._credentials import principal_settings
from actors.console._delegations import (
    ANSWER_MARGIN_S,
    Answer,
    DelegationInbox,
    delegation_result,
)
from actors.console._timeline import SessionRecord
from actors.console._tokens import principal_of
from actors.delegation import Delegate, request_envelope
from bus import ConfigError, Settings, TraceHeaders, connect, jetstream, trace_publish
from schemas import (
    Control,
    Decision,
    DecodeError,
    DelegationRequest,
    Error,
    HumanMessage,
    LlmChunk,
    Namespace,
    Orchestration,
    SessionEvent,
    decode_envelope,
    encode,
    hop_delta_for,
    new_id,
    utc_now,
)

__all__ = ("ControlAction", "Notification", "PersonLink", "person_settings")

log = logging.getLogger("parley.console.person")
_CHUNK = msgspec.json.Decoder(LlmChunk)

Notification = dict[str, Any]
"""A JSON-RPC notification (`{"jsonrpc": "2.0", "method": ..., "params": ...}`)."""

ControlAction = Literal["pause", "resume", "stop", "take_over", "approve", "reject"]
_MESSAGE_MODES: Final[dict[str, Literal["single", "collaborate", "orchestrate"]]] = {
    "single": "single",
    "task": "single",  # one agent on the objective, with the tools its bundle grants
    "collaborate": "collaborate",
    "orchestrate": "orchestrate",
}


def person_settings(people_dir: Path, person: str, nats_url: str) -> Settings:
    """The settings `person` connects with: its settings file's values win over the console
    process's own `PARLEY_*` environment (which names the console, not the person).

    Raises:
        ConfigError: the person has no settings file (no credentials in this deployment).
    """
    path = people_dir / f"{principal_of(person)}.toml"
    if not path.is_file():
        raise ConfigError(
            f"no credentials for {person}: {path} is missing (restart `parley up` after "
            "issuing a first token, or add the person to `parley nats-config`)"
        )
    return principal_settings(path, nats_url)


def _notification(method: str, params: dict[str, Any]) -> Notification:
    return {"jsonrpc": "2.0", "method": method, "params": params}


class PersonLink:
    """What one person sees and does through the console."""

    def __init__(self, person: str, settings: Settings) -> None:
        self.person = person
        self.principal = principal_of(person)
        self.settings = settings
        self.ns = Namespace(settings.namespace)
        self.sessions: dict[str, SessionRecord] = {}
        self._sent: dict[str, str] = {}
        """Envelope id -> session id, to match the gate's decisions to sessions."""
        self._listeners: set[Callable[[Notification], None]] = set()
        self._nc: NATS | None = None
        self.inbox: DelegationInbox | None = None
        self._timers: set[asyncio.Task[None]] = set()

    async def open(self) -> None:
        """Connect as the person and follow its timelines and decisions (confirmed by the
        server before this returns, so nothing submitted afterwards can be missed)."""
        nc = await connect(self.settings, self.principal, reconnect_forever=True)
        await nc.subscribe(self.ns.timelines(self.principal), cb=self._on_message)
        await nc.subscribe(self.ns.typings(self.principal), cb=self._on_typing)
        await nc.subscribe(self.ns.decisions(self.principal), cb=self._on_message)
        await nc.flush()
        self._nc = nc
        self.inbox = DelegationInbox(jetstream(nc, self.settings), self.ns, self.principal)
        await self.inbox.start(self.settings)
        log.info("person connected", extra={"person": self.person})

    async def close(self) -> None:
        for timer in list(self._timers):
            timer.cancel()
        if self.inbox is not None:
            await self.inbox.stop()
        if self._nc is not None:
            await self._nc.close()
            self._nc = None

    def listen(self, listener: Callable[[Notification], None]) -> Callable[[], None]:
        """Call `listener` with every notification for this person; returns the undo."""
        self._listeners.add(listener)
        return lambda: self._listeners.discard(listener)

    def _notify(self, notification: Notification) -> None:
        for listener in list(self._listeners):
            listener(notification)

    async def _on_typing(self, raw: Msg) -> None:
        """A piece of an agent's answer being written in one of this person's sessions: told
        to the page as it comes (`SessionTyping`); the durable turn follows on the timeline."""
        try:
            chunk = _CHUNK.decode(raw.data)
        except msgspec.DecodeError:
            return
        params = {
            "sessionId": raw.subject.rsplit(".", 1)[-1],
            "requestId": chunk.request_id,
            "agent": chunk.agent,
            "index": chunk.index,
            "text": chunk.text,
            "done": chunk.done,
        }
        self._notify(_notification("SessionTyping", params))

    async def _on_message(self, raw: Msg) -> None:
        try:
            envelope = decode_envelope(raw.data)
        except DecodeError as exc:
            log.warning("undecodable message on a timeline", extra={"error": str(exc)})
            return
        if isinstance(envelope, SessionEvent):
            record = self.sessions.get(envelope.session_id)
            if record is None:
                record = SessionRecord(envelope.session_id, envelope.created_at)
                self.sessions[envelope.session_id] = record
                _keep_newest(self.sessions, KEPT_SESSIONS)
            for params in record.apply_all(envelope):
                self._notify(_notification("SessionEvent", params))
        elif isinstance(envelope, Decision) and not envelope.allowed:
            session_id = self._sent.get(envelope.envelope_id)
            if session_id is not None and session_id in self.sessions:
                record = self.sessions[session_id]
                record.refuse(envelope)
                self._notify(_notification("SessionRefused", record.summary()))
        elif isinstance(envelope, Error):
            self._refused_control(envelope)

    def _refused_control(self, error: Error) -> None:
        """The router refused a control (a take over while the shared agent answers, an
        approval no longer pending): told to the page as `SessionError`."""
        session_id = str((error.details or {}).get("session_id", ""))
        log.info("refusal on a timeline", extra={"code": str(error.code)})
        if session_id in self.sessions:
            if error.cause_id:
                self.sessions[session_id].control_refused(error.cause_id)
            params = {
                "sessionId": session_id,
                "code": str(error.code),
                "message": error.message,
                "causeId": error.cause_id,
            }
            self._notify(_notification("SessionError", params))

    def reserve(self, mode: str, participants: tuple[str, ...], max_rounds: int) -> SessionRecord:
        """A new session id, owned by this person, with nothing sent yet (CreateSession)."""
        record = SessionRecord(new_id(), utc_now(), mode=mode, participants=participants)
        record.max_rounds = max_rounds
        self.sessions[record.session_id] = record
        _keep_newest(self.sessions, KEPT_SESSIONS)
        return record

    async def start(
        self, record: SessionRecord, prompt: str, first: str, task_id: str, user_id: str
    ) -> HumanMessage:
        """Submit the message that opens the session at the router (StartTask): a single
        call, a collaboration, or an orchestrated session (the prompt is its objective)."""
        orchestration = None
        if record.mode == "orchestrate" and record.orchestration is not None:
            spec = record.orchestration
            orchestration = Orchestration(
                local_agent=spec["localAgent"],
                shared_agent=spec["sharedAgent"],
                mode=spec["mode"],
                max_turns=spec["maxTurns"],
                max_duration_ms=spec["maxDurationMs"],
                max_failures=spec["maxFailures"],
                max_tokens_budget=spec["maxTokensBudget"],
            )
        message = HumanMessage(
            id=new_id(),
            created_at=utc_now(),
            text=prompt,
            call_id=task_id,
            user_id=user_id,
            mode=_MESSAGE_MODES.get(record.mode, "single"),
            participants=() if orchestration else record.participants,
            first_speaker=None if orchestration else first,
            max_rounds=record.max_rounds if record.mode == "collaborate" else 1,
            session_id=record.session_id,
            orchestration=orchestration,
        )
        record.goal, record.task_id, record.state = prompt, task_id, "submitted"
        record.user_id = user_id
        await self._submit(message)
        return message

    async def control(
        self,
        record: SessionRecord,
        action: ControlAction,
        *,
        reason: str = "",
        text: str = "",
        approval_id: str | None = None,
        target: Literal["router", "tools"] = "router",
    ) -> Control:
        """Steer the session at the router: stop (CancelTask; seed 001's Stop), pause,
        resume, take over, approve or reject (seed 000's controls). The router checks the
        control against the session (its owner, its state, the approval pending); a decision
        on a held tool request goes to the tool runtime (`target="tools"`), which applies it
        only from the request's owner (docs/tools.md, "Approvals")."""
        control = Control(
            id=new_id(),
            created_at=utc_now(),
            action=action,
            session_id=record.session_id,
            target=target,
            approval_id=approval_id,
            reason=reason,
            user_id=record.user_id,
            text=text,
        )
        await self._submit(control)
        return control

    async def delegate(
        self, record: SessionRecord, objective: str, user_id: str, max_tokens: int, deadline_ms: int
    ) -> list[DelegationRequest]:
        """Seed 003 from the console (StartTask of a `delegate` session): one request per
        agent, sent at once, as `parley delegate` sends them; each answer (or its timeout)
        is folded into the session and told as a `DelegationResult` notification."""
        inbox = self.inbox
        if inbox is None or not inbox.open:
            raise ConnectionError(f"{self.person} has no durable to read delegation answers from")
        record.goal, record.state, record.user_id = objective, "submitted", user_id
        requests = []
        for target in record.participants:
            envelope_id = new_id()
            delegate = Delegate(
                request_id=envelope_id,
                target_employee=target,
                objective=objective,
                max_tokens=max_tokens,
                deadline_ms=deadline_ms,
            )
            request = request_envelope(
                delegate,
                envelope_id=envelope_id,
                sender=self.principal,
                user_id=user_id,
                session_id=record.session_id,
                depth=0,
            )
            assert isinstance(request, DelegationRequest)  # noqa: S101 - a Delegate makes one
            requests.append(request)
            record.delegations[envelope_id] = {
                "requestId": envelope_id,
                "target": target,
                "status": "pending",
            }
            inbox.wait_for(envelope_id, self._on_answer(record, envelope_id, target, deadline_ms))
        for request in requests:
            await self._submit(request, record.session_id)
        timer = asyncio.create_task(self._expire(record, requests, deadline_ms))
        self._timers.add(timer)
        timer.add_done_callback(self._timers.discard)
        return requests

    def _on_answer(
        self, record: SessionRecord, request_id: str, target: str, deadline_ms: int
    ) -> Callable[[Answer | None], None]:
        def settle(answer: Answer | None) -> None:
            if record.delegations.get(request_id, {}).get("status") != "pending":
                return
            result = {"requestId": request_id, **delegation_result(target, answer, deadline_ms)}
            record.settle_delegation(request_id, result)
            params = {"sessionId": record.session_id, **result, "session": record.summary()}
            self._notify(_notification("DelegationResult", params))

        return settle

    async def _expire(
        self, record: SessionRecord, requests: list[DelegationRequest], deadline_ms: int
    ) -> None:
        """Seed 003's timeout for every request still unanswered at its deadline (plus the
        margin its answer needs to cross the gate)."""
        await asyncio.sleep(deadline_ms / 1000 + ANSWER_MARGIN_S)
        for request in requests:
            if self.inbox is not None:
                self.inbox.forget(request.id)
            self._on_answer(record, request.id, request.target_employee, deadline_ms)(None)

    async def _submit(
        self, envelope: HumanMessage | Control | DelegationRequest, session_id: str | None = None
    ) -> None:
        """Submit as the person: a root envelope, whose trace is its own id."""
        if self._nc is None:
            raise ConnectionError(f"{self.person} is not connected")
        session_id = session_id or getattr(envelope, "session_id", None)
        if session_id is not None:
            self._sent[envelope.id] = session_id
            _keep_newest(self._sent, 4 * KEPT_SESSIONS)
            if session_id in self.sessions:
                self.sessions[session_id].trace_ids.add(envelope.id)
        position = TraceHeaders(
            trace_id=envelope.id, hop_count=hop_delta_for(envelope), origin=self.principal
        )
        headers = position.to_headers(envelope.id)
        subject, payload = self.ns.submit(self.principal), encode(envelope)
        trace_publish(subject, payload, headers)  # a trace's root span, when tracing
        js = jetstream(self._nc, self.settings)
        await asyncio.wait_for(js.publish(subject, payload, headers=headers), 10)


KEPT_SESSIONS: Final = 1000
"""The sessions a person's link remembers, newest first: a link lives as long as its console or
A2A edge, and one principal opening sessions without end must not grow it without bound."""


def _keep_newest(found: dict[str, Any], most: int) -> None:
    """Forget the oldest entries of `found` past `most` (dicts keep insertion order)."""
    if len(found) > most:
        for key in list(found)[: len(found) - most]:
            del found[key]
