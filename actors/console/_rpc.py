"""JSON-RPC 2.0 for one signed-in person: seed 002 §11's methods over its error model.

The same dispatcher answers HTTP POST and WebSocket frames. Protocol errors use JSON-RPC's
codes (-32700 parse error, -32600 invalid request, -32601 method not found, -32602 invalid
params, -32603 internal error); a refusal of what was asked uses -32000 with seed 002 §15's
error shape (`code`, `message`, `retryable`, `details`) as the error's `data`. Batches and
notifications (requests without an `id`, which get no answer) follow the specification.

Every method acts on the caller's own sessions only: another person's session id is
`SESSION_NOT_FOUND`, exactly like an id that never existed, so ids leak nothing.

- CreateSession(mode `collaborate`|`single`|`orchestrate`|`task`, agents, firstSpeaker?, maxRounds?;
  for `orchestrate` agents are [local, shared] and orchestrationMode, maxTurns, maxDurationMs,
  maxFailures, maxTokensBudget are seed 000's): a session reserved for the caller, state
  `created`, with seed 002 §6's `handshake` (actors/console/_handshake.py); nothing is sent
  yet. Refused while no policy bundle is trusted or the one in force has expired.
- StartTask(sessionId, prompt, taskId?, taskOptions?): the human message goes to the
  router through the gate (for `delegate`, one `delegation_request` per agent goes to the
  agent itself, each answer told as a `DelegationResult` notification); state `submitted`,
  with the envelope id.
- CancelTask(sessionId, reason?): seed 001's Stop, `cancel_requested`; `session_canceled` follows.
- PauseTask / ResumeTask(sessionId), TakeOverTask(sessionId, text): seed 000's Pause,
  Resume and Take over, as `control` envelopes; the router decides whether they apply now
  (a refusal comes as a `SessionError` notification).
- ApproveAction(sessionId, approvalId, decision `approved`|`edited`|`rejected`, text?,
  reason?): the owner's decision on a draft awaiting approval, or in a `task` session on a
  tool request the tool runtime holds (actors/console/_task_rpc.py).
- GetPatchPreview(sessionId): everything a task changed in its workspace, as a diff.
- GetSessionState(sessionId): the session and all its events.
- ResumeSession(sessionId, afterEventId?): the session and its events after that one; live
  notifications follow on the WebSocket.
- ListSessions(): the caller's sessions, newest first.
- GetTrace(sessionId): the audit's tree of the traces the caller started in their session.
- ListAuditRecords(): the caller's own principal's audit records (actors/console/_audit.py
  says why a person sees these and no other).
- ListAgents(): the names of the agents registered on this deployment (actors/console/_agents.py).
- Shutdown(): ends this sign-in (its token, and the WebSocket); the sessions go on. It is
  all a person may shut down: the console, the agents and the bus are the operator's, and a
  person's running tasks are theirs to cancel one by one (CancelTask).

A `task` session (seed 002 §7) is one agent on the prompt with the tools its bundle grants;
its summary carries `taskState`, `steps` and `awaitingApproval` (actors/console/_task.py).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from pydantic import ValidationError

from actors.console._agents import AgentDirectory, AgentsUnreadable
from actors.console._audit import AuditUnreadable, AuditView, reason_of
from actors.console._bounds import TooLarge, parse_bounded
from actors.console._handshake import Handshake
from actors.console._params import (
    ApproveParams,
    CreateSessionParams,
    NoParams,
    Params,
    ResumeParams,
    SessionParams,
    StartTaskParams,
    TakeOverParams,
)
from actors.console._person import ControlAction, PersonLink
from actors.console._rpc_errors import (
    INTERNAL_ERROR,
    INVALID_PARAMS,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    PARSE_ERROR,
    RpcError,
    body_too_large,
    error_response,
)
from actors.console._task_rpc import (
    SUBMITTED,
    decide_tool,
    delegate_task,
    patch_preview_of,
    reject_held,
)
from actors.console._timeline import SessionRecord
from schemas import new_id

__all__ = (
    "INVALID_REQUEST",
    "PARSE_ERROR",
    "RpcError",
    "RpcSession",
    "body_too_large",
    "error_response",
)

log = logging.getLogger("parley.console.rpc")

_MAX_BATCH: Final = 50
_ENDED: Final = ("completed", "failed", "canceled", "refused")


@dataclass
class RpcSession:
    """The methods, bound to one signed-in person; `on_shutdown` ends the sign-in."""

    link: PersonLink
    on_shutdown: Callable[[], Awaitable[None]]
    audit: AuditView | None = None
    agents: AgentDirectory | None = None
    workspaces: Path | None = None
    """The tool runtime's workspaces directory, for GetPatchPreview (None: not offered)."""
    handshake: Handshake | None = None
    """Seed 002 §6 at CreateSession (None: the console has no signers' keys to check with)."""

    async def handle_body(self, body: bytes | str) -> dict[str, Any] | list[Any] | None:
        """The answer to one HTTP body or WebSocket frame (None: nothing to answer); its size
        and nesting are bounded before it is parsed (actors/console/_bounds.py)."""
        try:
            request = parse_bounded(body)
        except TooLarge as exc:
            return error_response(body_too_large(str(exc)))
        except ValueError as exc:  # not JSON, or nested too deep to parse
            return error_response(RpcError(PARSE_ERROR, f"Parse error: {exc}"))
        if isinstance(request, list):
            if not request:
                return error_response(RpcError(INVALID_REQUEST, "Invalid Request: empty batch"))
            if len(request) > _MAX_BATCH:
                message = f"Invalid Request: batch of {len(request)} > {_MAX_BATCH}"
                return error_response(RpcError(INVALID_REQUEST, message))
            answers = [await self.handle_one(item) for item in request]
            replies = [a for a in answers if a is not None]
            return replies or None
        return await self.handle_one(request)

    async def handle_one(self, request: object) -> dict[str, Any] | None:
        """One request object: its response, or None for a notification."""
        if not isinstance(request, dict):
            return error_response(RpcError(INVALID_REQUEST, "Invalid Request: not an object"))
        request_id = request.get("id")
        valid_id = "id" not in request or isinstance(request_id, str | int | None)
        if isinstance(request_id, bool) or not valid_id:
            return error_response(RpcError(INVALID_REQUEST, "Invalid Request: bad id"))
        method, params = request.get("method"), request.get("params", {})
        if request.get("jsonrpc") != "2.0" or not isinstance(method, str):
            message = 'Invalid Request: needs "jsonrpc": "2.0" and a method name'
            return error_response(RpcError(INVALID_REQUEST, message), request_id)
        notification = "id" not in request
        try:
            result = await self.call(method, params)
        except RpcError as error:
            return None if notification else error_response(error, request_id)
        except Exception:
            log.exception("method failed", extra={"method": method})
            internal = RpcError(INTERNAL_ERROR, "Internal error")
            return None if notification else error_response(internal, request_id)
        return None if notification else {"jsonrpc": "2.0", "id": request_id, "result": result}

    async def call(self, method: str, params: object) -> dict[str, Any]:
        handler = _METHODS.get(method)
        if handler is None:
            raise RpcError(METHOD_NOT_FOUND, f"Method not found: {method}")
        model, function = handler
        if not isinstance(params, dict):
            raise RpcError(INVALID_PARAMS, "Invalid params: pass them by name, as an object")
        try:
            parsed = model.model_validate(params)
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in e['loc']) or 'params'}: {e['msg']}"
                for e in exc.errors()
            )
            raise RpcError(INVALID_PARAMS, f"Invalid params: {problems}") from None
        return await function(self, parsed)

    def _session(self, session_id: str) -> SessionRecord:
        record = self.link.sessions.get(session_id)
        if record is None:
            raise RpcError.refused(
                "SESSION_NOT_FOUND", f"no session {session_id} of yours", sessionId=session_id
            )
        return record

    async def create_session(self, params: CreateSessionParams) -> dict[str, Any]:
        agents = tuple(params.agents)
        first = params.firstSpeaker or agents[0]
        if first not in agents:
            raise RpcError(INVALID_PARAMS, f"Invalid params: firstSpeaker {first!r} not in agents")
        handshake = None  # seed 002 §6: a session starts only under a bundle in force
        if self.handshake is not None:
            handshake = await self.handshake.answer(agents, params.supportedCapabilities)
        max_rounds = params.maxRounds if params.mode == "collaborate" else 1
        if params.mode == "orchestrate":
            max_rounds = params.maxTurns
        record = self.link.reserve(params.mode, agents, max_rounds)
        record.first_speaker = first
        if params.mode == "delegate":
            record.delegation_limits = (params.maxTokens, params.deadlineMs)
        if params.mode == "orchestrate":
            record.orchestration = {
                "localAgent": agents[0],
                "sharedAgent": agents[1],
                "mode": params.orchestrationMode,
                "maxTurns": params.maxTurns,
                "maxDurationMs": params.maxDurationMs,
                "maxFailures": params.maxFailures,
                "maxTokensBudget": params.maxTokensBudget,
            }
        record.user_id = params.userId  # this session's, kept with it (HTTP asks statelessly)
        return {**record.summary(), **({"handshake": handshake} if handshake else {})}

    async def start_task(self, params: StartTaskParams) -> dict[str, Any]:
        """Submit the session's task; the reply's state is what this call did (`submitted`).
        The session's own state moves on as its events are folded in, which may happen while
        the submission is awaited: the reply must not depend on that race, and the events
        themselves are told as notifications (GetSessionState gives the current state)."""
        record = self._session(params.sessionId)
        if record.state != "created":
            raise RpcError.refused(
                "INVALID_REQUEST",
                f"session {record.session_id} already has its task (state {record.state})",
                sessionId=record.session_id,
            )
        if params.taskOptions.maxSteps is not None:
            if record.mode != "collaborate":
                raise RpcError.refused(
                    "INVALID_REQUEST",
                    f"taskOptions.maxSteps caps a collaboration's rounds; a {record.mode} "
                    "session's steps are capped by its agent's profile (max_tool_rounds)",
                    sessionId=record.session_id,
                )
            record.max_rounds = params.taskOptions.maxSteps
        task_id = params.taskId or new_id()
        record.task_id = task_id
        if record.mode == "delegate":
            return await delegate_task(self.link, record, params.prompt)
        first = record.first_speaker or record.participants[0]
        message = await self.link.start(record, params.prompt, first, task_id, record.user_id)
        return {
            "sessionId": record.session_id,
            "taskId": task_id,
            "envelopeId": message.id,
            "state": SUBMITTED,
        }

    def _running(self, session_id: str) -> SessionRecord:
        record = self._session(session_id)
        if record.state in _ENDED or record.state == "created":
            raise RpcError.refused(
                "INVALID_REQUEST",
                f"session {record.session_id} is not running (state {record.state})",
                sessionId=record.session_id,
            )
        return record

    async def _steer(
        self, record: SessionRecord, action: ControlAction, state: str, **fields: Any
    ) -> dict[str, Any]:
        control = await self.link.control(record, action, **fields)
        return {"sessionId": record.session_id, "envelopeId": control.id, "state": state}

    async def cancel_task(self, params: SessionParams) -> dict[str, Any]:
        """The Stop first, then a task's held tool requests rejected: in the other order the
        agent, told of a rejection, could ask its next step before the session ended."""
        record = self._running(params.sessionId)
        answer = await self._steer(record, "stop", "cancel_requested", reason=params.reason)
        if record.mode == "task":
            await reject_held(self.link, record, "the task was cancelled")
        return answer

    async def pause_task(self, params: SessionParams) -> dict[str, Any]:
        return await self._steer(self._running(params.sessionId), "pause", "pause_requested")

    async def resume_task(self, params: SessionParams) -> dict[str, Any]:
        return await self._steer(self._running(params.sessionId), "resume", "resume_requested")

    async def take_over(self, params: TakeOverParams) -> dict[str, Any]:
        record = self._running(params.sessionId)
        return await self._steer(record, "take_over", "take_over_requested", text=params.text)

    async def approve(self, params: ApproveParams) -> dict[str, Any]:
        """Only a draft the session is waiting on may be decided: any other approval id
        (decided already, or never asked) is refused here, before anything is sent."""
        record = self._running(params.sessionId)
        if record.mode == "task":  # a tool request held by the tool runtime
            return await decide_tool(self.link, record, params)
        why = record.undecidable(params.approvalId)
        if why is not None:
            raise RpcError.refused(
                "INVALID_REQUEST", why, sessionId=record.session_id, approvalId=params.approvalId
            )
        if params.decision == "rejected":
            fields: dict[str, Any] = {"reason": params.reason}
        else:
            fields = {"text": params.text, "reason": params.reason}
        action: ControlAction = "reject" if params.decision == "rejected" else "approve"
        answer = await self._steer(
            record, action, "decision_sent", approval_id=params.approvalId, **fields
        )
        record.deciding_sent(params.approvalId, params.decision, answer["envelopeId"])
        return {**answer, "approvalId": params.approvalId, "decision": params.decision}

    async def get_patch_preview(self, params: SessionParams) -> dict[str, Any]:
        record, principal = self._session(params.sessionId), self.link.principal
        return await patch_preview_of(self.workspaces, record, principal)

    async def get_state(self, params: SessionParams) -> dict[str, Any]:
        return self._session(params.sessionId).state_of()

    async def resume(self, params: ResumeParams) -> dict[str, Any]:
        record = self._session(params.sessionId)
        events = record.events
        if params.afterEventId is not None:
            ids = [e["eventId"] for e in events]
            events = (
                events[ids.index(params.afterEventId) + 1 :]
                if params.afterEventId in ids
                else events
            )
        return {"session": record.summary(), "events": list(events)}

    async def list_sessions(self, _: NoParams) -> dict[str, Any]:
        records = sorted(self.link.sessions.values(), key=lambda r: r.created_at, reverse=True)
        return {"sessions": [r.summary() for r in records]}

    def _audit(self) -> AuditView:
        if self.audit is None:
            raise RpcError.refused(
                "INTERNAL_ERROR", "this console has no audit reader (its audit_reader option)"
            )
        return self.audit

    async def get_trace(self, params: SessionParams) -> dict[str, Any]:
        """The trees of the traces the caller started in their session, and no other."""
        record = self._session(params.sessionId)
        audit = self._audit()
        try:
            trees = await audit.traces(record.trace_ids)
        except AuditUnreadable as exc:
            raise _unreadable(exc) from None
        return {"sessionId": record.session_id, "traceIds": sorted(record.trace_ids), "tree": trees}

    async def list_audit(self, _: NoParams) -> dict[str, Any]:
        """The caller's own principal's records: its subject only, newest first."""
        principal, audit = self.link.principal, self._audit()
        try:
            records = await audit.person_records(principal)
        except AuditUnreadable as exc:
            raise _unreadable(exc) from None
        return {"profile": principal, "records": records}

    async def list_agents(self, _: NoParams) -> dict[str, Any]:
        """The agents registered on this deployment, for the start form to offer."""
        if self.agents is None:
            raise RpcError.refused("INTERNAL_ERROR", "the console is not connected yet")
        try:
            return {"agents": await self.agents.names()}
        except AgentsUnreadable as exc:
            raise RpcError.refused("INTERNAL_ERROR", str(exc), retryable=True) from None

    async def shutdown(self, _: NoParams) -> dict[str, Any]:
        await self.on_shutdown()
        return {"signedOut": True}


def _unreadable(exc: Exception) -> RpcError:
    """The refusal of an audit read, saying why (never an empty reason)."""
    return RpcError.refused(
        "INTERNAL_ERROR", f"the audit cannot be read now: {reason_of(exc)}", retryable=True
    )


_Handler = Callable[[RpcSession, Any], Awaitable[dict[str, Any]]]
_METHODS: Final[dict[str, tuple[type[Params], _Handler]]] = {
    "CreateSession": (CreateSessionParams, RpcSession.create_session),
    "StartTask": (StartTaskParams, RpcSession.start_task),
    "CancelTask": (SessionParams, RpcSession.cancel_task),
    "PauseTask": (SessionParams, RpcSession.pause_task),
    "ResumeTask": (SessionParams, RpcSession.resume_task),
    "TakeOverTask": (TakeOverParams, RpcSession.take_over),
    "ApproveAction": (ApproveParams, RpcSession.approve),
    "GetSessionState": (SessionParams, RpcSession.get_state),
    "GetPatchPreview": (SessionParams, RpcSession.get_patch_preview),
    "ResumeSession": (ResumeParams, RpcSession.resume),
    "ListSessions": (NoParams, RpcSession.list_sessions),
    "GetTrace": (SessionParams, RpcSession.get_trace),
    "ListAuditRecords": (NoParams, RpcSession.list_audit),
    "ListAgents": (NoParams, RpcSession.list_agents),
    "Shutdown": (NoParams, RpcSession.shutdown),
}
