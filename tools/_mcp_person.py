"""The person `parley mcp` acts for: that person's own principal on the bus, nothing more.

`parley mcp` serves a person's own assistant. It connects with the credentials `parley say`,
`collab` and `delegate` use (tools/_local.py: `cli` under `parley up`, or the settings file
given with `--config`, `person-<name>`'s for instance), submits on
`parley.submit.<person>` like they do, so the gate applies that person's policy profile, rate
limits and audit to every tool call, and reads only what the broker lets that person read:
its own sessions' timelines and the gate's decisions on what it sent (live, read-only stream
imports) and the answers to its delegations (its durable, which `parley up` provisions). It
holds no identity of its own.

A person may not read the events stream by sequence, so this server knows a session from
the moment its connection opened: every session opened through it, and any other of the
person's own sessions that moves after it started (the newest `KEPT` of them). Another
person's session is never visible: the broker does not export their timelines to this
principal, and the router refuses a Stop from anyone but the session's opener (on the refused
person's own timeline).

Each waiting call waits at most its `wait_s`, then says the session id and that the session
runs on, so the assistant can poll `session_status`: unlike a terminal, which stops a session
it gives up on, an assistant's call ends on the assistant's own clock, not the person's.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any, Final

from nats.aio.client import Client as NATS
from nats.aio.msg import Msg
from nats.errors import NoServersError

from actors.console import ANSWER_MARGIN_S, DelegationInbox, SessionRecord, delegation_result
from actors.delegation import Delegate, request_envelope
from bus import ConfigError, Settings, TraceHeaders, connect, jetstream
from schemas import (
    Control,
    Decision,
    DecodeError,
    DelegationRequest,
    Error,
    HumanMessage,
    Namespace,
    SessionEvent,
    decode_envelope,
    encode,
    hop_delta_for,
    new_id,
    utc_now,
)
from tools._refused import Refusals, refusal_line
from tools._waiting import Unreachable, stop_control, submit_as

__all__ = ("ENDED", "KEPT", "McpPerson", "PersonError")

log = logging.getLogger("parley.mcp")

ENDED: Final = frozenset({"completed", "failed", "canceled", "refused"})
"""A session's states past which nothing more happens (SessionRecord.state)."""
_SUBMIT_S: Final = 10.0
"""How long a submission may take to be stored before the call says it was not."""
_CONNECT_S: Final = 10.0
"""How long the first connection may take before the command says no server answers."""
KEPT: Final = 1000
"""Sessions (and envelopes sent, and refusals) remembered: a long-lived server forgets the
oldest first."""


def _keep_newest(found: dict[str, Any]) -> None:
    """Forget the oldest entries of `found` past `KEPT` (dicts keep insertion order)."""
    for key in list(found)[: max(len(found) - KEPT, 0)]:
        del found[key]


class PersonError(Exception):
    """What a tool call could not do, in one line the assistant is shown as is."""


class McpPerson:
    """One person's principal: its connection, the sessions it has seen, its delegations."""

    def __init__(self, settings: Settings, principal: str) -> None:
        self.settings = settings
        self.principal = principal
        self.ns = Namespace(settings.namespace)
        self.sessions: dict[str, SessionRecord] = {}
        self._sent: dict[str, str] = {}
        """Envelope id -> session id, to match the gate's decisions to sessions."""
        self.refusals: dict[str, str] = {}
        """Envelope id -> why the gate or the router refused it (one line)."""
        self._news = asyncio.Condition()
        self._nc: NATS | None = None
        self._inbox: DelegationInbox | None = None
        self._timers: set[asyncio.Task[None]] = set()

    async def open(self) -> None:
        """Connect as the person and follow its timelines and decisions (confirmed by the
        server before this returns, so nothing submitted afterwards can be missed). The
        connection reconnects for as long as the server runs: an assistant's server is
        long-lived, and a restarted `parley up` is found again.

        Raises:
            Unreachable: no server answers.
            ConfigError: the server rejected the credentials.
        """
        refusals = Refusals().install()  # rejected credentials also end as "no servers"
        try:
            # Reconnecting for ever retries the first connection for ever too: bounded here.
            nc = await asyncio.wait_for(
                connect(self.settings, self.principal, reconnect_forever=True), _CONNECT_S
            )
        except (NoServersError, OSError, TimeoutError) as exc:
            rejected = refusals.first()
            if rejected is not None and rejected.credentials_rejected:
                raise ConfigError(refusal_line(rejected)) from None
            raise Unreachable(
                f"no NATS server answers at {self.settings.nats_url} "
                f"({exc.__class__.__name__}): start the local system with `parley up` in this "
                "directory, or give --config with this person's settings"
            ) from None
        finally:
            refusals.remove()
        await nc.subscribe(self.ns.timelines(self.principal), cb=self._on_message)
        await nc.subscribe(self.ns.decisions(self.principal), cb=self._on_message)
        await nc.flush()
        self._nc = nc
        self._inbox = DelegationInbox(jetstream(nc, self.settings), self.ns, self.principal)
        await self._inbox.start(self.settings)

    async def close(self) -> None:
        for timer in list(self._timers):
            timer.cancel()
        if self._inbox is not None:
            await self._inbox.stop()
        if self._nc is not None:
            await self._nc.close()
            self._nc = None

    async def _on_message(self, raw: Msg) -> None:
        try:
            envelope = decode_envelope(raw.data)
        except DecodeError as exc:
            log.warning("undecodable message on a timeline: %s", exc)
            return
        if isinstance(envelope, SessionEvent):
            record = self.sessions.get(envelope.session_id)
            if record is None:
                record = SessionRecord(envelope.session_id, envelope.created_at)
                self.sessions[envelope.session_id] = record
                _keep_newest(self.sessions)
            record.apply(envelope)
        elif isinstance(envelope, Decision) and not envelope.allowed:
            self.refusals[envelope.envelope_id] = (
                f"refused by the gate: {envelope.code}: {envelope.message}"
            )
            session_id = self._sent.get(envelope.envelope_id)
            if session_id is not None and session_id in self.sessions:
                self.sessions[session_id].refuse(envelope)
        elif isinstance(envelope, Error) and envelope.cause_id:
            self.refusals[envelope.cause_id] = f"refused: {envelope.code}: {envelope.message}"
        _keep_newest(self.refusals)
        async with self._news:
            self._news.notify_all()

    async def until(self, done: Callable[[], bool], wait_s: float) -> bool:
        """Whether `done()` holds within `wait_s` seconds (checked at each message read)."""
        try:
            async with self._news:
                await asyncio.wait_for(self._news.wait_for(done), wait_s)
        except TimeoutError:
            return done()
        return True

    def _connection(self) -> NATS:
        if self._nc is None or self._nc.is_closed:
            raise PersonError(f"not connected to nats at {self.settings.nats_url}")
        if not self._nc.is_connected:
            raise PersonError(
                f"the connection to nats at {self.settings.nats_url} is down (reconnecting): "
                "is `parley up` still running?"
            )
        return self._nc

    async def _submit(self, envelope: HumanMessage | Control, session_id: str) -> None:
        """Submit as the person, a root envelope (its trace is its own id), stored when this
        returns."""
        nc = self._connection()
        self._sent[envelope.id] = session_id
        _keep_newest(self._sent)
        try:
            await asyncio.wait_for(submit_as(nc, self.ns, self.principal, envelope), _SUBMIT_S)
        except Exception as exc:
            raise PersonError(f"the bus did not store the message: {_why(exc)}") from None

    async def open_session(self, message: HumanMessage) -> SessionRecord:
        """Submit `message`, which opens a session (its id chosen here)."""
        assert message.session_id is not None  # noqa: S101 - callers always choose one
        record = SessionRecord(message.session_id, utc_now(), goal=message.text)
        record.mode, record.participants = message.mode, message.participants
        record.max_rounds, record.state = message.max_rounds, "submitted"
        self.sessions[message.session_id] = record
        _keep_newest(self.sessions)
        await self._submit(message, message.session_id)
        return record

    async def stop(self, session_id: str, wait_s: float) -> str:
        """Ask the router to stop `session_id` (it checks the Stop is its opener's); how the
        session ended, or that the Stop is stored and not yet confirmed.

        Raises:
            PersonError: the gate or the router refused the Stop.
        """
        control = stop_control(session_id, "", "stopped by the person's assistant (parley mcp)")
        await self._submit(control, session_id)

        def settled() -> bool:
            record = self.sessions.get(session_id)
            return control.id in self.refusals or (record is not None and record.state in ENDED)

        await self.until(settled, wait_s)
        if control.id in self.refusals:
            raise PersonError(f"{self.refusals[control.id]} (session {session_id})")
        record = self.sessions.get(session_id)
        if record is not None and record.state in ENDED:
            return f"session {session_id} ended: {record.state} ({record.stop_reason})"
        return (
            f"stop requested for session {session_id}: not confirmed within {wait_s:g} s "
            "(it had ended already, or it ends as canceled once the router opens it)"
        )

    async def delegate(
        self, targets: tuple[str, ...], objective: str, text: str, max_tokens: int, deadline_ms: int
    ) -> SessionRecord:
        """Seed 003 as `parley delegate` does it: one request per agent, sent at once, in one
        session; each answer (or its timeout) is folded into the session's record.

        Raises:
            PersonError: no durable to read answers from, or the bus did not store them.
        """
        inbox = self._inbox
        if inbox is None or not inbox.open:
            raise PersonError(
                f"{self.principal} has no durable to read delegation answers from: `parley up` "
                f"provisions it (or run `parley provision` with {self.principal}'s settings)"
            )
        record = SessionRecord(new_id(), utc_now(), goal=objective, mode="delegate")
        record.participants, record.state = targets, "submitted"
        record.delegation_limits = (max_tokens, deadline_ms)
        self.sessions[record.session_id] = record
        _keep_newest(self.sessions)
        requests = [self._request(record, t, objective, text) for t in targets]
        for request in requests:
            record.delegations[request.id] = {
                "requestId": request.id,
                "target": request.target_employee,
                "status": "pending",
            }
            settle = self._settler(record, request.id, request.target_employee, deadline_ms)
            inbox.wait_for(request.id, settle)
            self._sent[request.id] = record.session_id
        _keep_newest(self._sent)
        js = jetstream(self._connection(), self.settings)
        stores = []
        for request in requests:  # sent together: a first answer may not beat the last
            position = TraceHeaders(
                trace_id=request.id, hop_count=hop_delta_for(request), origin=self.principal
            )
            headers = position.to_headers(request.id)
            subject = self.ns.submit(self.principal)
            stores.append(js.publish(subject, encode(request), headers=headers))
        try:
            await asyncio.wait_for(asyncio.gather(*stores), _SUBMIT_S)
        except Exception as exc:
            raise PersonError(f"the bus did not store the requests: {_why(exc)}") from None
        timer = asyncio.create_task(self._expire(record, requests, deadline_ms))
        self._timers.add(timer)
        timer.add_done_callback(self._timers.discard)
        return record

    def _request(
        self, record: SessionRecord, target: str, objective: str, text: str
    ) -> DelegationRequest:
        envelope_id = new_id()
        max_tokens, deadline_ms = record.delegation_limits
        delegate = Delegate(
            request_id=envelope_id,
            target_employee=target,
            objective=objective,
            input=text,
            max_tokens=max_tokens,
            deadline_ms=deadline_ms,
        )
        request = request_envelope(
            delegate,
            envelope_id=envelope_id,
            sender=self.principal,
            user_id="",
            session_id=record.session_id,
            depth=0,
        )
        assert isinstance(request, DelegationRequest)  # noqa: S101 - a Delegate makes one
        return request

    def _settler(
        self, record: SessionRecord, request_id: str, target: str, deadline_ms: int
    ) -> Callable[[Any], None]:
        def settle(answer: Any) -> None:
            if record.delegations.get(request_id, {}).get("status") != "pending":
                return
            result = {"requestId": request_id, **delegation_result(target, answer, deadline_ms)}
            record.settle_delegation(request_id, result)
            told = asyncio.get_running_loop().create_task(self._tell())
            self._timers.add(told)
            told.add_done_callback(self._timers.discard)

        return settle

    async def _tell(self) -> None:
        async with self._news:
            self._news.notify_all()

    async def _expire(
        self, record: SessionRecord, requests: list[DelegationRequest], deadline_ms: int
    ) -> None:
        """Seed 003's timeout for each request unanswered by its deadline (plus the margin
        its answer needs to cross the gate)."""
        await asyncio.sleep(deadline_ms / 1000 + ANSWER_MARGIN_S)
        for request in requests:
            if self._inbox is not None:
                self._inbox.forget(request.id)
            self._settler(record, request.id, request.target_employee, deadline_ms)(None)


def _why(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{exc.__class__.__name__}: {text[0]}" if text else exc.__class__.__name__
