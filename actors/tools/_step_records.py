"""What the tool runtime does around each run besides running it: checkpoints and large outputs.

`before` snapshots a session's workspace as its base before the first step that may change
files; `after` takes a run's outcome and, before the runtime builds its result:

1. after a step that may change files (actors/tools/_checkpoints.py `CHANGING`), snapshots
   the workspace; when the tree changed, stores the step's diff as an artifact and names it
   (`details.checkpoint`, the diff's URI among `artifact_uris`);
2. when the output is too large for a message (its JSON text over a quarter of the settings'
   `max_payload`: the result is stored in the `tool_runs` bucket and published as an
   envelope, both bounded by it, beside the details and the request's fields), stores the
   whole output as an artifact and keeps only its first part inline, followed by a line that
   names the artifact (`details.output_artifact`).

Neither ever fails a step that ran: a checkpoint that cannot be made is logged and said in
`details.checkpoint_error`; an output the store refused is cut to what fits, `truncated`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging

import msgspec

from actors.tools._artifact_uris import label
from actors.tools._artifacts import ArtifactStore, ArtifactStoreError
from actors.tools._checkpoints import (
    CHANGING,
    base_snapshot,
    has_base,
    snapshot,
    step_diff,
)
from actors.tools._contract import ToolInvocation, ToolOutcome

__all__ = ("StepRecords", "inline_budget", "inline_prefix")

log = logging.getLogger("parley.actors.tools")


def inline_budget(max_payload: int) -> int:
    """The most bytes a result's output may take in its JSON text."""
    return max_payload // 4


def inline_prefix(text: str, budget: int) -> str:
    """The longest start of `text` whose JSON text fits `budget` bytes (escapes counted)."""
    low, high = 0, min(len(text), budget)
    while low < high:
        middle = (low + high + 1) // 2
        if len(msgspec.json.encode(text[:middle])) <= budget:
            low = middle
        else:
            high = middle - 1
    return text[:low]


class StepRecords:
    """Checkpoints and large outputs of one runtime's steps, into one artifact store."""

    def __init__(self, store: ArtifactStore | None, max_payload: int) -> None:
        self._store = store
        self._budget = inline_budget(max_payload)

    async def before(self, invocation: ToolInvocation) -> str | None:
        """The session's base snapshot, before its first step that may change files; what
        went wrong if it could not be made, for `after` to say in the step's result.

        The step still runs: without a base, its own snapshot becomes the session's base, so
        later steps have their diffs and only this step's changes are in none."""
        if invocation.capability not in CHANGING:
            return None
        if has_base(invocation.workspace):
            return None
        try:
            await asyncio.to_thread(base_snapshot, invocation.workspace)
        except Exception as exc:
            log.exception("the base snapshot failed", extra={"session": invocation.session_id})
            return f"no base snapshot before this step, so its changes are in no diff: {exc}"
        return None

    async def after(
        self, invocation: ToolInvocation, outcome: ToolOutcome, base_error: str | None = None
    ) -> ToolOutcome:
        """The outcome as the result should carry it: with its checkpoint (or why there is
        none: `base_error` is what `before` returned) and, when too large for a message, its
        output stored as an artifact."""
        if invocation.capability in CHANGING:
            outcome = await self._checkpoint(invocation, outcome)
            if base_error is not None:
                said = outcome.details.get("checkpoint_error")
                error = base_error if said is None else f"{base_error}; then {said}"
                details = {**outcome.details, "checkpoint_error": error[:1000]}
                outcome = dataclasses.replace(outcome, details=details)
        return await self._spill(invocation, outcome)

    async def _checkpoint(self, invocation: ToolInvocation, outcome: ToolOutcome) -> ToolOutcome:
        label = f"{invocation.capability} step {invocation.step_id}"
        try:
            checkpoint = await asyncio.to_thread(snapshot, invocation.workspace, label)
            if checkpoint is None:
                return outcome
            diff = await asyncio.to_thread(step_diff, invocation.workspace, checkpoint)
            details = {**outcome.details, "checkpoint": checkpoint.commit}
            uris = outcome.artifact_uris
            if self._store is not None and diff:
                uri = await self._store.put_bytes(
                    invocation.session_id,
                    diff.encode(),
                    name=f"checkpoint-{checkpoint.commit[:12]}.diff",
                    step_id=invocation.step_id,
                    payers=invocation.payers,
                )
                uris = (*uris, uri)
                details["checkpoint_diff"] = uri
        except Exception as exc:
            log.exception("a checkpoint failed", extra={"session": invocation.session_id})
            details = {**outcome.details, "checkpoint_error": str(exc)[:500]}
            return dataclasses.replace(outcome, details=details)
        return dataclasses.replace(outcome, details=details, artifact_uris=uris)

    async def _spill(self, invocation: ToolInvocation, outcome: ToolOutcome) -> ToolOutcome:
        text = outcome.output_text
        if len(text) * 6 + 2 <= self._budget or len(msgspec.json.encode(text)) <= self._budget:
            return outcome  # a character is at most six bytes of JSON ("\\u001f")
        data = text.encode(errors="replace")
        budget = self._budget - 512  # the line that names the artifact
        head = inline_prefix(text, budget)
        if self._store is None:
            return dataclasses.replace(outcome, output_text=head, truncated=True)
        try:
            uri = await self._store.put_bytes(
                invocation.session_id,
                data,
                name=label(f"{invocation.capability}.output.txt"),
                step_id=invocation.step_id,
                payers=invocation.payers,
            )
        except ArtifactStoreError as exc:
            log.error("an output could not be stored", extra={"error": str(exc)})
            details = {**outcome.details, "output_artifact_error": str(exc)[:500]}
            return dataclasses.replace(outcome, output_text=head, truncated=True, details=details)
        rest = len(data) - len(head.encode())
        return dataclasses.replace(
            outcome,
            output_text=f"{head}\n[{rest} more bytes of this output are in artifact {uri}]",
            details={**outcome.details, "output_artifact": uri, "output_bytes": len(data)},
            artifact_uris=(*outcome.artifact_uris, uri),
        )
