"""Each step runs at most once: the tool runtime's record of the steps it started and ended.

Before running a step the runtime creates its mark (create-only, so of two replicas handed
the same request only one runs it); after running, it stores the result over the mark, and
only then publishes the result and acknowledges the request. A redelivered request therefore
finds one of three things:

- nothing: the step never started (the runtime died before the mark), so it runs now;
- a result: the step ended, so the same result is published again (its envelope id is the
  same, so JetStream drops a second copy that did arrive);
- a mark without a result: the runtime died while the step ran. A step that only reads
  (File.Read, Git.Status, Git.Diff, an HTTP GET or HEAD) runs again; any other ends `failed`
  (`TOOL_EXECUTION_FAILED`, "interrupted"), because whether its effect happened is unknown
  and running it twice could apply it twice. The caller decides what to do next.

Keys are `run.<digest>`, the digest of the step's identity: who asked (the gate's word), in
which session and task, for which step. A step id is the caller's choice, so it names a step
only within its caller's own work.

The bucket is shared by every person's steps and written by the runtime alone, so the broker
bounds it only whole: one agent asking for large results as fast as its rate allows filled it
within minutes (an attack review), and then no step of anyone's could be marked. Each result
and held request stored is charged to the step's person and agent (bus/_shares.py,
`step_record_bytes_per_person` and `_per_agent`), and a new step is taken only while both have
room (`refusal`); one refused keeps its refusal on its mark, charged too, so that a
redelivery is answered the same and never run, until a payer is past its share by
`REFUSALS_KEPT_BYTES`: past that nothing more is kept for it (`keeps_refusals`).
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Awaitable, Sequence
from dataclasses import dataclass
from typing import Final, Literal

import msgspec
from nats.js.errors import KeyNotFoundError, KeyWrongLastSequenceError
from nats.js.kv import KeyValue

from actors.tools._approvals import (
    Approval,
    approval_index_key,
    approval_risk,
    approval_summary,
    approval_title,
)
from actors.tools._pending import PendingApproval, PendingBook
from bus import SESSION, Payer, ShareExceeded, Shares
from schemas import ToolRequest, decode_envelope

log = logging.getLogger("parley.tools.runs")

__all__ = ("REFUSALS_KEPT_BYTES", "Run", "RunStore", "StepState", "run_key")

REFUSALS_KEPT_BYTES: Final = 64 * 1024
"""How far past a share refusals are still kept on their marks: about a hundred, enough for
the redeliveries of the steps in flight when the share filled."""
_RECORD_OVERHEAD: Final = 160
"""What a record costs the bucket besides its value: its key, subject and headers."""


class Run(msgspec.Struct, frozen=True, kw_only=True):
    """One step's record: when it started (and on which delivery), and its result if ended."""

    started_ms: int
    attempt: int
    result: bytes | None = None
    """The encoded `tool_result` envelope, once the step ended."""
    approval: Approval | None = None
    """The request held for its owner's approval (actors/tools/_approvals.py)."""
    refused: str = ""
    """Why the step was refused before it ran (a share of the records full): every delivery of
    it is answered so, never run, as the first was told."""

    @property
    def held(self) -> bool:
        """Waiting for a decision: neither run nor ended."""
        return self.result is None and self.approval is not None and self.approval.pending


@dataclass(frozen=True, slots=True)
class StepState:
    """What a request found of its step: `new` (now marked as started by this handler),
    `running` (marked by an earlier delivery, never ended) or `done` (with its result)."""

    state: Literal["new", "running", "done"]
    revision: int
    run: Run


_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder(Run)


def run_key(sender: str, session_id: str, task_id: str, step_id: str) -> str:
    """The key of one step: a digest, since every part of it is a caller's choice."""
    identity = "\x1f".join((sender, session_id, task_id, step_id))
    return "run." + hashlib.sha256(identity.encode()).hexdigest()[:48]


class RunStore:
    """The runtime's steps, in the `tool_runs` bucket (written by the runtime alone)."""

    def __init__(self, kv: KeyValue, shares: Shares | None = None) -> None:
        """`shares`: each person's and agent's share of the bucket (None: unbounded, for a
        test of the records alone)."""
        self._kv = kv
        self._shares = shares
        self._pending = PendingBook(kv)

    async def refusal(self, key: str, payers: Sequence[Payer]) -> str | None:
        """Why the step is refused before it runs (a payer's share is used up), or None: it
        may be taken, or it is stored already (a redelivery, answered or completed from its
        record whatever the counts say, even when they cannot be read now)."""
        if self._shares is None:
            return None
        try:
            await self._shares.check_room(payers)
            return None
        except ShareExceeded as exc:
            why = str(exc)
        except Exception:
            if await self.read(key) is not None:
                return None
            raise
        return None if await self.read(key) is not None else why

    async def keeps_refusals(self, payers: Sequence[Payer]) -> bool:
        """Whether a refusal is kept on its step's mark: while no payer has passed its share
        by more than `REFUSALS_KEPT_BYTES` (the refusals count too). A sender flooding past
        that is refused with nothing kept, so its refusals cannot fill the bucket either."""
        if self._shares is None:
            return True
        try:
            await self._shares.check_room(payers, allowance=REFUSALS_KEPT_BYTES)
        except ShareExceeded:
            return False
        return True

    async def _charge(self, payers: Sequence[Payer], run: Run) -> None:
        """Count what was just stored for `payers`; a count that cannot be written now is
        logged (it says less than is stored until the next charge), never in the step's way."""
        if self._shares is None:
            return
        try:
            stored = len(_encoder.encode(run)) + _RECORD_OVERHEAD
            await self._shares.charge_anyway(payers, stored)
        except Exception as exc:
            log.warning("a step record not counted", extra={"error": repr(exc)})

    async def begin(
        self,
        key: str,
        started_ms: int,
        attempt: int,
        *,
        refused: str = "",
        payers: Sequence[Payer] = (),
    ) -> StepState:
        """Mark the step as started, or say what an earlier delivery left of it. `refused`:
        mark it refused before it ran instead, in the same one write (a mark left between a
        start and a refusal would be taken for a crash's, a review found), charged to
        `payers`."""
        fresh = Run(started_ms=started_ms, attempt=attempt, refused=refused[:300])
        for _ in range(3):
            try:
                revision = await self._kv.create(key, _encoder.encode(fresh))
                if refused:
                    await self._charge(payers, fresh)
                return StepState("new", revision, fresh)
            except KeyWrongLastSequenceError:
                pass
            try:
                entry = await self._kv.get(key)
            except KeyNotFoundError:
                continue  # expired between the two calls: mark it again
            if entry.value is None or entry.revision is None:
                continue
            run = _decoder.decode(entry.value)
            state: Literal["running", "done"] = "done" if run.result is not None else "running"
            return StepState(state, entry.revision, run)
        raise RuntimeError(f"tool run {key} could be neither created nor read")

    async def take_over(self, key: str, found: StepState, attempt: int) -> StepState:
        """Mark a step left running by a dead handler as this delivery's (a read-only step
        that runs again). Compare-and-set: of two deliveries only one takes it.

        Raises:
            KeyWrongLastSequenceError: another delivery took it, or ended it, first.
        """
        mine = msgspec.structs.replace(found.run, attempt=attempt)
        revision = await self._kv.update(key, _encoder.encode(mine), last=found.revision)
        return StepState("new", revision, mine)

    async def update(self, key: str, found: StepState, run: Run) -> StepState:
        """Write `run` over the record as `found` read it (compare-and-set).

        Raises:
            KeyWrongLastSequenceError: it changed since.
        """
        revision = await self._kv.update(key, _encoder.encode(run), last=found.revision)
        return StepState(found.state, revision, run)

    async def hold(
        self, key: str, found: StepState, approval: Approval, payers: Sequence[Payer] = ()
    ) -> StepState:
        """Store the request held for approval in its step's record, and the index that
        leads from its approval id to the step; charged to `payers`."""
        # The owner's list and the index first: either left without its record leads nowhere
        # and harms nothing, while a record left without the index could be decided by nobody.
        # The list only shows the person what waits (`parley approvals list`): a list that
        # cannot be written now must not stop the hold, whose id the person is told anyway.
        await self._advisory(self._pending.add(approval.owner, _pending_entry(approval)))
        await self._kv.put(approval_index_key(approval.approval_id), key.encode())
        held = await self.update(key, found, msgspec.structs.replace(found.run, approval=approval))
        await self._charge(payers, held.run)
        return held

    async def settled(self, approval: Approval) -> None:
        """A held request was decided (or expired): off its owner's list. Never in the way of
        the decision itself: a list that cannot be written now is logged and left."""
        await self._advisory(self._pending.remove(approval.owner, approval.approval_id))

    @staticmethod
    async def _advisory(change: Awaitable[None]) -> None:
        try:
            await change
        except Exception as exc:
            log.warning("the owner's list of held requests not updated", extra={"error": repr(exc)})

    async def held_for(self, owner: str) -> list[PendingApproval]:
        """What is held for `owner` now, as their list says (actors/tools/_pending.py)."""
        return await self._pending.of(owner)

    async def find_approval(self, approval_id: str) -> tuple[str, StepState] | None:
        """The step an approval id names and its record, or None."""
        try:
            entry = await self._kv.get(approval_index_key(approval_id))
        except KeyNotFoundError:
            return None
        if not entry.value:
            return None
        key = entry.value.decode()
        found = await self.read(key)
        return None if found is None else (key, found)

    async def read(self, key: str) -> StepState | None:
        try:
            entry = await self._kv.get(key)
        except KeyNotFoundError:
            return None
        if entry.value is None or entry.revision is None:
            return None
        run = _decoder.decode(entry.value)
        state: Literal["running", "done"] = "done" if run.result is not None else "running"
        return StepState(state, entry.revision, run)

    async def finish(self, key: str, begun: StepState, result: bytes) -> Run:
        """Store the step's result over its mark (compare-and-set on the mark's revision);
        the record stored, for `charge` once the result is on its way.

        Raises:
            KeyWrongLastSequenceError: someone else ended or took the step first.
        """
        ended = msgspec.structs.replace(begun.run, result=result)
        await self._kv.update(key, _encoder.encode(ended), last=begun.revision)
        return ended

    async def charge(self, payers: Sequence[Payer], run: Run) -> None:
        """Count a stored record for `payers` (after its result is sent: the count is not
        what the caller waits for; a runtime killed between the two counts it short)."""
        await self._charge(payers, run)


def _pending_entry(approval: Approval) -> PendingApproval:
    """What the owner's list shows of a held request: the gate's summary and risk of it."""
    request = decode_envelope(approval.request)
    assert isinstance(request, ToolRequest)  # noqa: S101 - only a tool request is ever held
    capability = request.tool_name  # as the gate names it on the timeline
    return PendingApproval(
        approval_id=approval.approval_id,
        session_id=approval.headers.get(SESSION, ""),
        task_id=request.task_id,
        title=approval_title(approval.rule_title, approval.sender, capability),
        action_summary=approval_summary(request),
        risk_level=approval_risk(capability),
        capability=capability,
        agent=approval.sender,
        digest=approval.digest,
        expires_ms=approval.expires_ms,
    )
