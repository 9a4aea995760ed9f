"""The `a2a` brain: a remote A2A agent answers for a Parley agent profile.

The profile is a Parley agent like any other: it is registered under its own name, every call
it gets comes through the gate (decided with its bundle profile: who may call it, rate, hop
and trace limits, audited), and its answer goes back through the gate. Inside, each call is one
A2A task on the remote agent (`SendMessage`, blocking until the task ends), made with the
`a2a-sdk`'s client from the remote's Agent Card. The remote's answer (its artifacts' text, else
its final status message) becomes this agent's final reply: an A2A agent ends its task, it
does not hand over within a Parley session. A task the remote fails, rejects or cancels is a
`BrainError` the host turns into an `error` envelope for the caller.
"""

from __future__ import annotations

import json
import os
import uuid

import httpx
from a2a.client import A2AClientError, Client, ClientConfig, create_client
from a2a.helpers import get_artifact_text, get_message_text
from a2a.types import (
    Message,
    Part,
    Role,
    SendMessageConfiguration,
    SendMessageRequest,
    Task,
    TaskState,
)
from a2a.utils.errors import A2AError

from actors.agent._profile import A2aBrainConfig, AgentProfile
from actors.agent._prompt import BrainCall
from actors.agent.brains._protocol import BrainAnswer, BrainError, estimate_tokens, usage_of
from schemas import ErrorCode

__all__ = ("A2aBrain",)

_FAILED = {
    TaskState.TASK_STATE_FAILED: "failed",
    TaskState.TASK_STATE_REJECTED: "rejected",
    TaskState.TASK_STATE_CANCELED: "canceled",
}


def _question(call: BrainCall) -> str:
    """What the remote agent is asked: the call's task, else its goal, with the session's
    conversation so far (the remote sees no Parley transcript of its own)."""
    ask = call.task or call.goal
    said = "\n".join(f"{item.name}: {item.text}" for item in call.transcript)
    return f"{ask}\n\nThe conversation so far:\n{said}" if said else ask


class A2aBrain:
    """Answers each call with a task on one remote A2A agent."""

    backend = "a2a"

    def __init__(self, profile: AgentProfile, config: A2aBrainConfig) -> None:
        self._profile = profile
        self._config = config
        self._http: httpx.AsyncClient | None = None
        self._client: Client | None = None

    async def start(self) -> None:
        token = os.environ.get(self._config.token_env) if self._config.token_env else None
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._http = httpx.AsyncClient(headers=headers, timeout=self._config.timeout_s)

    async def _remote(self) -> Client:
        """The client, made from the remote's card at the first call (the remote may start
        after this agent does)."""
        if self._client is None:
            if self._http is None:
                raise RuntimeError("A2aBrain.reply() before start()")
            config = ClientConfig(httpx_client=self._http, streaming=False)
            self._client = await create_client(self._config.url, config)
        return self._client

    async def reply(self, call: BrainCall) -> BrainAnswer:
        question = _question(call)
        message = Message(
            role=Role.ROLE_USER, parts=[Part(text=question)], message_id=str(uuid.uuid4())
        )
        request = SendMessageRequest(
            message=message, configuration=SendMessageConfiguration(return_immediately=False)
        )
        where = f"the A2A agent at {self._config.url}"
        answer: Task | Message | None = None
        try:
            async for response in (await self._remote()).send_message(request):
                if response.HasField("task"):
                    answer = response.task
                elif response.HasField("message"):
                    answer = response.message
        except (A2AClientError, A2AError, httpx.HTTPError) as exc:
            self._client = None  # asked afresh next time: its card may have changed
            raise BrainError(
                ErrorCode.AGENT_UNAVAILABLE, f"{where} did not answer: {exc!r}", retryable=True
            ) from None
        text = self._text_of(answer, where)
        reply = json.dumps({"message": text, "final": True}, ensure_ascii=False)
        return BrainAnswer(reply, usage_of(estimate_tokens(question), estimate_tokens(text)))

    def _text_of(self, answer: Task | Message | None, where: str) -> str:
        if isinstance(answer, Message):
            return get_message_text(answer)
        if answer is None:
            raise BrainError(ErrorCode.AGENT_UNAVAILABLE, f"{where} sent nothing", retryable=True)
        state = answer.status.state
        said = get_message_text(answer.status.message) if answer.status.HasField("message") else ""
        if state in _FAILED:
            raise BrainError(
                ErrorCode.AGENT_UNAVAILABLE,
                f"{where} {_FAILED[state]} the task: {said or 'no reason given'}",
                retryable=False,
            )
        texts = [get_artifact_text(artifact) for artifact in answer.artifacts]
        return "\n".join(t for t in texts if t) or said or "(the A2A agent said nothing)"

    async def close(self) -> None:
        if self._client is not None:
            await self._client.close()
            self._client = None
        if self._http is not None:
            await self._http.aclose()
            self._http = None
