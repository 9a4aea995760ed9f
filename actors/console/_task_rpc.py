"""The console's methods on a task session's tools: a held request's decision, the patch;
and a delegation session's task, sent to each of its agents.

- ApproveAction on a task session decides a tool request the runtime holds for the session's
  owner (docs/tools.md, "Approvals"): `approved` or `rejected`, sent as a `control` to the
  tool runtime as the person. `edited` is refused: what runs is exactly the stored request
  whose digest the person was shown, never anything a decision carries, so an edit is a
  rejection whose reason tells the agent what to do instead.
- GetPatchPreview is everything the task changed in its workspace, read from the session's
  checkpoints (actors/tools/_checkpoints.py) in the tool runtime's `workspaces` directory,
  which the console is told with its own `workspaces` option (`parley up` gives both the
  same). Only the session's owner reaches either: the session is looked up among the
  caller's own, and another person's id is `SESSION_NOT_FOUND` like one that never existed.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any, Final

from actors.console._params import ApproveParams
from actors.console._person import ControlAction, PersonLink
from actors.console._rpc_errors import RpcError
from actors.console._timeline import SessionRecord
from actors.tools import patch_preview, workspace_name, workspace_owner

__all__ = ("SUBMITTED", "decide_tool", "delegate_task", "patch_preview_of", "reject_held")

SUBMITTED: Final = "submitted"
"""What StartTask did, as its reply says (the session's own state may be ahead of it)."""


async def delegate_task(link: PersonLink, record: SessionRecord, objective: str) -> dict[str, Any]:
    """StartTask of a `delegate` session: one `delegation_request` per agent (seed 003)."""
    max_tokens, deadline_ms = record.delegation_limits
    try:
        requests = await link.delegate(record, objective, record.user_id, max_tokens, deadline_ms)
    except ConnectionError as exc:
        raise RpcError.refused(
            "INTERNAL_ERROR", str(exc), retryable=True, sessionId=record.session_id
        ) from None
    return {
        "sessionId": record.session_id,
        "taskId": record.task_id,
        "envelopeId": requests[0].id,
        "envelopeIds": [r.id for r in requests],
        "state": SUBMITTED,
    }


async def decide_tool(
    link: PersonLink, record: SessionRecord, params: ApproveParams
) -> dict[str, Any]:
    """Send the owner's decision on a held tool request of `record` to the tool runtime."""
    step = record.task.steps.get(params.approvalId)
    if step is None or step["status"] != "awaiting_approval":
        why = (
            f"no tool request awaits approval {params.approvalId} in session "
            f"{record.session_id} (decided already, expired, or never asked)"
        )
        raise RpcError.refused(
            "INVALID_REQUEST", why, sessionId=record.session_id, approvalId=params.approvalId
        )
    if params.decision == "edited":
        raise RpcError.refused(
            "INVALID_REQUEST",
            "a held tool request cannot be edited: reject it with a reason that tells the "
            "agent what to do instead",
            sessionId=record.session_id,
            approvalId=params.approvalId,
        )
    action: ControlAction = "approve" if params.decision == "approved" else "reject"
    control = await link.control(
        record, action, approval_id=params.approvalId, reason=params.reason, target="tools"
    )
    record.task.decision_sent(params.approvalId)
    return {
        "sessionId": record.session_id,
        "envelopeId": control.id,
        "state": "decision_sent",
        "approvalId": params.approvalId,
        "decision": params.decision,
    }


async def reject_held(link: PersonLink, record: SessionRecord, reason: str) -> list[str]:
    """Reject every tool request `record`'s task holds for its owner, as the owner: what a
    cancelled task asked for is not wanted any more. Held on, each stayed on the person's list
    and counted among the agent's calls in flight until it expired, and a next task was
    refused `RATE_LIMITED` meanwhile (a newcomer's walk). The ids rejected."""
    rejected = []
    for held in record.task.awaiting():
        approval_id = str(held.get("approvalId", ""))
        if not approval_id:
            continue
        await link.control(record, "reject", approval_id=approval_id, reason=reason, target="tools")
        record.task.decision_sent(approval_id)
        rejected.append(approval_id)
    return rejected


async def patch_preview_of(
    workspaces: Path | None, record: SessionRecord, principal: str
) -> dict[str, Any]:
    """The unified diff of everything `record`'s task changed so far ("" if nothing), if its
    workspace is `principal`'s: a session id another person names (a delegation whose parent
    is hers, whose events then reach his timeline) shows him nothing of it
    (actors/tools/_workspace_owner.py)."""
    if workspaces is None:
        raise RpcError.refused(
            "INTERNAL_ERROR",
            "this console cannot read the tool runtime's checkpoints (its workspaces option)",
        )
    owner = workspace_owner(workspaces, workspace_name(record.session_id))
    if owner is not None and owner != principal:
        raise RpcError.refused(
            "SESSION_NOT_FOUND",
            f"no session {record.session_id} of yours",
            sessionId=record.session_id,
        )
    try:
        patch = await asyncio.to_thread(patch_preview, workspaces, record.session_id)
    except (OSError, RuntimeError) as exc:
        raise RpcError.refused(
            "INTERNAL_ERROR",
            f"the checkpoints cannot be read now: {exc}",
            retryable=True,
            sessionId=record.session_id,
        ) from None
    return {"sessionId": record.session_id, "taskId": record.task_id, "patch": patch}
