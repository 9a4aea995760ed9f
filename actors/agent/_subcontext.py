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
    SUMMARY_HEADING,
    AgentRequest,
    CallSubAgent,
    Wait,
    WorkspacePathError,
    build_filtered_context,
)
from schemas import (
    HISTORY_SUMMARY,
    AgentCall,
    ContextMessage,
    DelegationRequest,
    FilteredContext,
    SubAgentCall,
    TranscriptItem,
    decode_envelope,
)
from schemas import utc_now as _utc_now

__all__ = ("SubContexts", "conversation_of", "seed_role", "summary_of")

log = logging.getLogger("parley.actors.agent.delegation")


def seed_role(item: TranscriptItem, caller: str) -> str:
    """Seed 004's role of a transcript item, as the caller's own conversation: what the caller
    said is `assistant`, what the router or a host adds is `system`, and what anyone else said
    (the person, the other agents) is `user`. The item's name stays in the message's text.
    Role filters name these roles; a transcript's roles are agent names, which matched none."""
    if item.role == "router":
        return "system"
    if item.role == caller or item.name == caller:
        return "assistant"
    return "user"


def conversation_of(wait: Wait, caller: str = "") -> list[ContextMessage]:
    """The caller's conversation, oldest first: the call's transcript, the call itself, and
    what the agents called so far answered; `caller` is the agent answering the call. The
    router's history summary is not a message (`summary_of`)."""
    call = decode_envelope(wait.call)
    messages: list[ContextMessage] = []
    match call:
        case AgentCall():
            messages += [
                ContextMessage(
                    role=seed_role(item, caller),
                    content=f"[{item.name or item.role}] {item.text}",
                    created_at=item.created_at,
                )
                for item in call.transcript
                if item.name != HISTORY_SUMMARY
            ]
            text = call.text or call.goal
            messages.append(ContextMessage(role="user", content=text, created_at=call.created_at))
        case DelegationRequest():
            messages += [ContextMessage(role="user", content=f) for f in call.handoff_data.facts]
            messages.append(
                ContextMessage(
                    role="user",
                    content=f"{call.objective}\n{call.input}",
                    created_at=call.created_at,
                )
            )
        case SubAgentCall():
            messages += list(call.context.messages)
            messages.append(
                ContextMessage(role="user", content=call.args.task, created_at=call.created_at)
            )
    for done in wait.rounds:
        messages += [
            ContextMessage(role="tool", content=f"{result.status}: {result.content}")
            for result in done.results
        ]
    return messages


def summary_of(wait: Wait) -> str | None:
    """The caller's summary of its session, for a sub-agent's `include_summary`: the router's
    summary of the turns it dropped from the history (seed 000, seed 001's window), or what
    the caller was itself shown as one when it is a sub-agent; None when there is none."""
    call = decode_envelope(wait.call)
    match call:
        case AgentCall():
            told = [item.text for item in call.transcript if item.name == HISTORY_SUMMARY]
            return told[0] if told else None
        case SubAgentCall() if call.context.summary:
            # Without the heading it was shown under: the builder adds it again.
            return call.context.summary.strip().removeprefix(SUMMARY_HEADING).strip() or None
    return None


class SubContexts:
    """Builds the context each sub-agent request carries."""

    def __init__(self, workspace_root: Path | None, caller: str = "") -> None:
        self._root = workspace_root
        self._caller = caller

    def context_for(self, wait: Wait, request: AgentRequest) -> FilteredContext | None:
        """The filtered context of a sub-agent request (None for a delegation)."""
        if not isinstance(request, CallSubAgent):
            return None
        args = request.args
        conversation = conversation_of(wait, self._caller)
        summary = summary_of(wait)
        try:
            return build_filtered_context(
                conversation,
                args.context,
                args.max_context_tokens,
                now=_utc_now(),
                summary=summary,
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
                conversation, narrowed, args.max_context_tokens, now=_utc_now(), summary=summary
            )
