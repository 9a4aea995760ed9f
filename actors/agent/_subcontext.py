"""What a sub-agent is shown of its caller's conversation: seed 004's filtered context.

The caller's conversation is what its host holds of the call being answered: the call's
transcript, its goal and task, and the results of the agents called so far. A sub-agent call
carries only what its `ContextFilter` keeps of that, fitted to `max_context_tokens`
(actors/delegation/_context.py), never the whole; workspace files are named relative to the
profile's `workspace_root` and never outside it.
"""

from __future__ import annotations

import logging
from pathlib import Path

import msgspec

from actors.delegation import (
    AgentRequest,
    CallSubAgent,
    Wait,
    WorkspacePathError,
    build_filtered_context,
)
from schemas import (
    AgentCall,
    ContextMessage,
    DelegationRequest,
    FilteredContext,
    SubAgentCall,
    decode_envelope,
)
from schemas import utc_now as _utc_now

__all__ = ("SubContexts", "conversation_of")

log = logging.getLogger("parley.actors.agent.delegation")


def conversation_of(wait: Wait) -> list[ContextMessage]:
    """The caller's conversation, oldest first: the call's transcript, the call itself, and
    what the agents called so far answered."""
    call = decode_envelope(wait.call)
    messages: list[ContextMessage] = []
    match call:
        case AgentCall():
            messages += [
                ContextMessage(role=item.role, content=f"[{item.name or item.role}] {item.text}")
                for item in call.transcript
            ]
            messages.append(ContextMessage(role="user", content=call.text or call.goal))
        case DelegationRequest():
            messages += [ContextMessage(role="user", content=f) for f in call.handoff_data.facts]
            messages.append(ContextMessage(role="user", content=f"{call.objective}\n{call.input}"))
        case SubAgentCall():
            messages += list(call.context.messages)
            messages.append(ContextMessage(role="user", content=call.args.task))
    for done in wait.rounds:
        messages += [
            ContextMessage(role="tool", content=f"{result.status}: {result.content}")
            for result in done.results
        ]
    return messages


class SubContexts:
    """Builds the context each sub-agent request carries."""

    def __init__(self, workspace_root: Path | None) -> None:
        self._root = workspace_root

    def context_for(self, wait: Wait, request: AgentRequest) -> FilteredContext | None:
        """The filtered context of a sub-agent request (None for a delegation)."""
        if not isinstance(request, CallSubAgent):
            return None
        args = request.args
        conversation = conversation_of(wait)
        try:
            return build_filtered_context(
                conversation,
                args.context,
                args.max_context_tokens,
                now=_utc_now(),
                workspace_root=self._root,
            )
        except WorkspacePathError as exc:
            # The callee gets the conversation without the workspace: nothing outside the
            # root is ever read or named.
            log.warning("workspace path refused", extra={"error": str(exc)})
            narrowed = None
            if args.context is not None:
                narrowed = msgspec.structs.replace(
                    args.context, include_workspace=False, workspace_files=None
                )
            return build_filtered_context(
                conversation, narrowed, args.max_context_tokens, now=_utc_now()
            )
