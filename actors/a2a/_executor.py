"""One exposed agent as an A2A agent: each A2A task is a Parley session the client opens.

A task's message is a person's `parley say` to the agent, sent by the console's machinery
(actors/console/_person.py) as the client's own principal: it crosses the gate, which decides
it with the client's profile (limits, loop prevention) and audits the decision, and the
router runs the session. The session's events, followed on the client's own timeline, become
the task's status updates; its last answer becomes the task's artifact and final message.
`tasks/cancel` is the session's Stop. The A2A task id, context id and the Parley session id
are told in the task's metadata, so an operator finds the session in the audit.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Any, Final

from a2a.helpers import new_text_message, new_text_part
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.tasks import TaskUpdater
from a2a.types import Role, Task, TaskState, TaskStatus
from a2a.utils.errors import InvalidParamsError, TaskNotCancelableError

from actors.a2a._clients import Clients
from actors.console import Notification, PersonLink, SessionRecord

__all__ = ("SESSION_KEY", "SessionExecutor")

log = logging.getLogger("parley.a2a.executor")

SESSION_KEY: Final = "parley_session_id"
"""The task metadata key that names the Parley session a task is."""
_ENDED: Final = ("completed", "failed", "canceled", "refused")
_CANCEL_WAIT_S: Final = 10.0


@dataclass
class _Running:
    link: PersonLink
    record: SessionRecord
    changed: asyncio.Event


class SessionExecutor(AgentExecutor):
    """Runs A2A tasks for one agent, each as a session of the calling client."""

    def __init__(self, agent: str, clients: Clients, timeout_s: float) -> None:
        self.agent = agent
        self.clients = clients
        self.timeout_s = timeout_s
        self._running: dict[str, _Running] = {}
        """Task id -> its session, while the task runs."""

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        client = context.call_context.user.user_name
        task_id, context_id = context.task_id, context.context_id
        if context.message is None or task_id is None or context_id is None:
            raise InvalidParamsError(message="a task starts with a message")
        if context.current_task is not None:
            raise InvalidParamsError(message="a Parley task takes one message; start a new task")
        text = context.get_user_input()
        if not text.strip():
            raise InvalidParamsError(message="the message has no text part")
        link = await self.clients.link(client)
        record = link.reserve("single", (self.agent,), 1)
        record.first_speaker = self.agent
        running = _Running(link, record, asyncio.Event())

        def changed(notification: Notification) -> None:
            if notification.get("params", {}).get("sessionId") == record.session_id:
                running.changed.set()

        undo = link.listen(changed)
        self._running[task_id] = running
        updater = TaskUpdater(event_queue, task_id, context_id)
        metadata = {SESSION_KEY: record.session_id, "agent": self.agent}
        try:
            await event_queue.enqueue_event(
                Task(
                    id=task_id,
                    context_id=context_id,
                    status=TaskStatus(state=TaskState.TASK_STATE_SUBMITTED),
                    history=[context.message],
                    metadata=metadata,
                )
            )
            await link.start(record, text, self.agent, task_id, client)
            await self._follow(running, updater)
        finally:
            undo()
            self._running.pop(task_id, None)

    async def _follow(self, running: _Running, updater: TaskUpdater) -> None:
        """Tell the session's events as the task's updates until it ends (or times out)."""
        record, told, answer = running.record, 0, ""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.timeout_s
        while True:
            for event in record.events[told:]:
                kind, payload = event["eventType"], event["payload"]
                if kind == "session_started":
                    await updater.start_work()
                elif kind == "step_completed" and payload.get("message"):
                    answer = str(payload["message"])
                    await updater.update_status(
                        TaskState.TASK_STATE_WORKING, message=self._said(updater, answer)
                    )
            told = len(record.events)
            if record.state in _ENDED:
                await self._end(record, updater, answer)
                return
            remaining = deadline - loop.time()
            if remaining <= 0:
                await updater.failed(self._said(updater, "the session did not end in time"))
                return
            running.changed.clear()
            if len(record.events) == told and record.state not in _ENDED:
                try:
                    async with asyncio.timeout(remaining):
                        await running.changed.wait()
                except TimeoutError:
                    continue

    async def _end(self, record: SessionRecord, updater: TaskUpdater, answer: str) -> None:
        if record.state == "completed":
            await updater.add_artifact([new_text_part(answer)], name="answer")
            await updater.complete(self._said(updater, answer))
        elif record.state == "refused":
            error = record.error or {}
            why = f"refused by the gate: {error.get('code')}: {error.get('message', '')}"
            await updater.reject(self._said(updater, why))
        elif record.state == "canceled":
            await updater.cancel(self._said(updater, "stopped (the session is canceled)"))
        else:
            await updater.failed(self._said(updater, f"the session failed ({record.stop_reason})"))

    def _said(self, updater: TaskUpdater, text: str) -> Any:
        return new_text_message(
            text, context_id=updater.context_id, task_id=updater.task_id, role=Role.ROLE_AGENT
        )

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        """Stop the session at the router (as the client, through the gate) and say the task
        is canceled once the router has stopped it, or after a bounded wait."""
        task_id = context.task_id
        running = self._running.get(task_id or "")
        if running is None or task_id is None or context.context_id is None:
            raise TaskNotCancelableError(message=f"task {task_id} is not running here")
        record = running.record
        if record.state not in _ENDED:
            await running.link.control(record, "stop", reason="canceled by the A2A client")
            try:
                async with asyncio.timeout(_CANCEL_WAIT_S):
                    while True:
                        running.changed.clear()
                        if record.state in _ENDED:
                            break
                        await running.changed.wait()
            except TimeoutError:
                log.warning("no stop confirmed", extra={"session_id": record.session_id})
        updater = TaskUpdater(event_queue, task_id, context.context_id)
        await updater.cancel(self._said(updater, f"stopped (the session is {record.state})"))
