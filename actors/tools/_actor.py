"""The tool runtime (`parley run tools`): runs the tool requests the gate delivers to it.

For each `tool_request` (seed 002 §13.2) it answers one `tool_result` (§13.3) through the gate,
which routes it back to the agent that asked. The step itself, its scope, run and result, is
actors/tools/_steps.py's; this module keeps each step's promises across deliveries:

- at most once (actors/tools/_runs.py): a step is marked before it runs and its result stored
  before it is published; a redelivery is answered from the store, and a step a crash cut
  short is run again only if it changes nothing (else it ends `failed`, "interrupted");
- approvals (actors/tools/_approvals.py): a request whose scope requires one is held in its
  step's record, the owner's `control` (approve or reject) decides it, and a reminder on the
  runtime's own timers subject denies it when it expires.

A request outside its scope ends `denied` with the code and the rule; a run that fails ends
`failed`; an executor's own bug ends `failed` with `INTERNAL_ERROR`, never a dead runtime.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from pathlib import Path
from typing import ClassVar

import msgspec
from nats.js.errors import KeyWrongLastSequenceError

from actors.tools._approvals import Approval, request_digest
from actors.tools._artifacts import ArtifactStore, ArtifactStoreError
from actors.tools._contract import Executor, ScopeDenied
from actors.tools._decisions import Decisions
from actors.tools._executors import BUILT_IN_EXECUTORS, is_read_only
from actors.tools._mcp import McpHub
from actors.tools._options import ToolsOptions
from actors.tools._runs import RunStore, StepState, run_key
from actors.tools._step_records import StepRecords
from actors.tools._steps import Asked, Held, StepRunner, failed
from bus import (
    ENDS,
    MSG_ID,
    ORIGIN,
    Actor,
    BundleStore,
    BusHandle,
    ConfigError,
    Context,
    EndedSessions,
    Input,
    Settings,
    load_public_keys,
    through_elections,
    validated_options,
)
from schemas import (
    AnyEnvelope,
    Control,
    Error,
    ErrorCode,
    SessionEvent,
    ToolRequest,
    ToolResult,
    decode_envelope,
    derive_id,
    encode,
)

__all__ = ("ToolsActor",)

log = logging.getLogger("parley.actors.tools")

_decode_result = msgspec.json.Decoder(ToolResult)
_SETTLE_MARGIN_MS = 30_000


class ToolsActor(Actor):
    """Runs each delivered tool request within its scope, at most once per step."""

    kind: ClassVar[str] = "tools"
    files_by_sender: ClassVar[bool] = True

    def __init__(self, settings: Settings) -> None:
        super().__init__(settings)
        self.options = validated_options(ToolsOptions, settings.options, "tools")
        try:
            self._trusted = load_public_keys(self.options.policy_keys)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
        self._workspaces = Path(self.options.workspaces).resolve()
        self.executors: dict[str, Executor] = dict(BUILT_IN_EXECUTORS)
        self.bundles: BundleStore | None = None
        self._runs: RunStore | None = None
        self._steps: StepRunner | None = None
        self._decisions = Decisions(self.actor_id)
        self._mcp = McpHub(self.options.mcp_servers) if self.options.mcp_servers else None

    def inputs(self) -> Sequence[Input]:
        ns = self.namespace
        return (
            Input.deliver(ns, self.actor_id),
            Input.timers(ns, self.actor_id),
            Input.session_ends(ns, self.actor_id),
        )

    async def start(self, bus: BusHandle) -> None:
        ns = self.namespace
        policy = await through_elections(
            lambda: bus.js.key_value(ns.bucket("policy")), "the policy bucket"
        )
        self.bundles = BundleStore(policy, self._trusted, self.options.tenant, keeps_floor=False)
        await self.bundles.load()
        runs = await through_elections(
            lambda: bus.js.key_value(ns.bucket("tool_runs")), "the tool runs bucket"
        )
        self._runs = RunStore(runs)
        artifacts = ArtifactStore(bus.js, ns, self.options.tenant, self.settings.max_payload)
        try:
            await artifacts.check()
        except ArtifactStoreError as exc:
            raise ConfigError(str(exc)) from None
        records = StepRecords(artifacts, self.settings.max_payload)
        self._workspaces.mkdir(parents=True, exist_ok=True, mode=0o700)
        if self._mcp is not None:
            await self._mcp.__aenter__()  # starts or reaches each server, lists its tools
            log.info("mcp tools listed", extra={"capabilities": sorted(self._mcp.capabilities())})
        self._steps = StepRunner(
            self.options,
            self.bundles,
            self.executors,
            self._workspaces,
            self._mcp,
            records,
            artifacts,
            EndedSessions(bus.js, ns),
        )

    async def stop(self) -> None:
        if self._mcp is not None:
            await self._mcp.aclose()  # no server process outlives the runtime

    async def background(self, stopping: asyncio.Event) -> None:
        if self.bundles is not None:
            await self.bundles.watch(stopping)

    def _started(self) -> tuple[RunStore, StepRunner]:
        if self._runs is None or self._steps is None:
            raise RuntimeError("the tool runtime handled a message before it started")
        return self._runs, self._steps

    async def handle(self, envelope: AnyEnvelope, ctx: Context) -> None:
        if ctx.stream == self.namespace.stream("timers"):
            if isinstance(envelope, ToolRequest):
                await self._on_reminder(envelope, ctx)
            return
        if ctx.stream == self.namespace.stream("events"):  # how a session stands
            if isinstance(envelope, SessionEvent) and envelope.event_type in ENDS:
                await self._on_session_end(ctx, ENDS[envelope.event_type])
            return
        match envelope:
            case ToolRequest():
                await self._on_request(Asked(envelope, ctx.sender, dict(ctx.headers)), ctx)
            case Control(action="approve" | "reject"):
                await self._on_decision(envelope, ctx)
            case Error():  # the gate refused a result of ours: say why
                log.error(
                    "a tool result was refused",
                    extra={"code": str(envelope.code), "error": envelope.message},
                )
            case _:
                log.info("ignored", extra={"kind": envelope.__struct_config__.tag})

    async def _on_request(self, asked: Asked, ctx: Context) -> None:
        runs, steps = self._started()
        request = asked.request
        key = run_key(asked.sender, asked.session, request.task_id, request.step_id)
        begun = await runs.begin(key, _now_ms(), ctx.attempt)
        if begun.state == "done" and begun.run.result is not None:
            stored = _decode_result.decode(begun.run.result)
            # The same step asked again, maybe in a new envelope: the stored result, as the
            # answer to this one (its id derives from this request's).
            again = msgspec.structs.replace(stored, id=derive_id(request.id, "tool_result"))
            await steps.answer(ctx, asked, again)
            return
        approval = begun.run.approval
        if approval is not None:
            if begun.run.held:
                await self._remind(ctx, approval)  # the same reminder: dropped if sent
                return
            # Decided, no result yet: the decision's own handler may still be running it.
            wait_ms = self._decision_settles_ms(approval)
            if wait_ms > 0:
                ctx.defer(wait_ms / 1000)
                return
            await self._complete(ctx, key, begun, approval, recovering=True)
            return
        if begun.state == "running":
            if not is_read_only(request):
                await self._interrupted(ctx, asked, key, begun)
                return
            try:
                begun = await runs.take_over(key, begun, ctx.attempt)
            except KeyWrongLastSequenceError:
                ctx.defer(1.0)  # another delivery took it: its result will be there
                return
        outcome = await steps.run(asked)
        if isinstance(outcome, Held):
            await self._hold(ctx, asked, key, begun, outcome)
            return
        await self._finish(ctx, asked, key, begun, steps.result(request, outcome))

    async def _interrupted(self, ctx: Context, asked: Asked, key: str, begun: StepState) -> None:
        step = asked.request.step_id
        outcome = failed(
            "TOOL_EXECUTION_FAILED",
            f"interrupted: the tool runtime stopped while step {step} ran; whether its effect "
            "happened is unknown, so it is not run again",
        )
        await self._finish(ctx, asked, key, begun, StepRunner.result(asked.request, outcome))

    async def _finish(
        self, ctx: Context, asked: Asked, key: str, begun: StepState, result: ToolResult
    ) -> None:
        """Store the step's result, then publish it; a step someone else ended first is
        answered with theirs."""
        runs, steps = self._started()
        try:
            await runs.finish(key, begun, encode(result))
        except KeyWrongLastSequenceError:
            found = await runs.read(key)
            if found is None or found.run.result is None:
                raise
            result = _decode_result.decode(found.run.result)
        await steps.answer(ctx, asked, result)

    # -- approvals ---------------------------------------------------------------------

    async def _hold(
        self, ctx: Context, asked: Asked, key: str, begun: StepState, held: Held
    ) -> None:
        """Keep the request for its owner's decision, durably, and remind ourselves of its
        expiry; nothing runs and nothing is answered yet."""
        runs, steps = self._started()
        owner = asked.headers.get(ORIGIN, "")
        timeout_s = steps.approval_timeout_s(held.scope)
        approval = Approval(
            approval_id=asked.request.id,
            owner=owner,
            digest=request_digest(encode(asked.request)),
            request=encode(asked.request),
            headers={k: v for k, v in asked.headers.items() if k.startswith("Parley-")},
            sender=asked.sender,
            expires_ms=_now_ms() + timeout_s * 1000,
            rule_title=steps.approval_title(held.scope),
        )
        try:
            await runs.hold(key, begun, approval)
        except KeyWrongLastSequenceError:
            ctx.defer(1.0)  # another delivery of it got there first: see what it did
            return
        log.info(
            "held for approval",
            extra={"approval_id": approval.approval_id, "owner": owner, "timeout_s": timeout_s},
        )
        await self._remind(ctx, approval)

    async def _remind(self, ctx: Context, approval: Approval) -> None:
        reminder = derive_id(approval.approval_id, "approval-expiry")
        headers = dict(approval.headers) | {MSG_ID: reminder}
        await ctx.outbox.publish(self.namespace.timers(self.actor_id), approval.request, headers)

    async def _on_decision(self, control: Control, ctx: Context) -> None:
        """A person's approve or reject: applied only by the request's owner, once; any other
        is answered on that person's timeline (actors/tools/_decisions.py)."""
        runs, _ = self._started()
        await self._decisions.on_decision(ctx, control, runs, self._decide)

    def _decision_settles_ms(self, approval: Approval) -> int:
        """How much longer a decided request may still be running in its decision's handler
        (the longest a step runs, and a margin): until then a redelivery or the reminder
        leaves it alone, after that the handler is taken for dead."""
        settled_at = approval.decided_ms + int(self.options.timeout_s * 1000) + _SETTLE_MARGIN_MS
        return max(0, settled_at - _now_ms())

    async def _on_reminder(self, request: ToolRequest, ctx: Context) -> None:
        """A held request's expiry: deny it if still undecided, else nothing."""
        runs, _ = self._started()
        found = await runs.find_approval(request.id)
        if found is None:
            return
        key, state = found
        approval = state.run.approval
        if approval is None:
            return
        if not approval.pending:
            await runs.settled(approval)  # off its owner's list, if a crash left it there
            if state.run.result is None:  # decided, and not answered (yet?)
                wait_ms = self._decision_settles_ms(approval)
                if wait_ms > 0:  # its decision's handler may still be running it
                    ctx.defer(wait_ms / 1000)
                    return
                await self._complete(ctx, key, state, approval, recovering=True)
            return
        left_ms = approval.expires_ms - _now_ms()
        if left_ms > 0:
            ctx.defer(left_ms / 1000)
            return
        await self._decide(ctx, key, state, approval, "expired", "", "")

    async def _on_session_end(self, ctx: Context, how: str) -> None:
        """A session ended (its person stopped it, it completed or failed): what it still
        holds for its owner is let go, as the console's cancel does, whoever ended it. Held on,
        each stayed on the owner's list and counted among its agent's calls in flight until it
        expired. The agent is answered `SESSION_EXPIRED`, so its host asks its brain no more."""
        runs, _ = self._started()
        owner, session = ctx.sender, ctx.subject.rsplit(".", 1)[-1]
        reason = f"session ended ({how})"
        for entry in await runs.held_for(owner):
            found = (
                await runs.find_approval(entry.approval_id) if entry.session_id == session else None
            )
            if found is None:
                continue
            key, state = found
            approval = state.run.approval
            if approval is not None and approval.pending and approval.owner == owner:
                log.info(
                    "let go: its session ended",
                    extra={"approval_id": entry.approval_id, "session": session, "how": how},
                )
                await self._decide(ctx, key, state, approval, "canceled", "", reason)

    async def _decide(
        self,
        ctx: Context,
        key: str,
        state: StepState,
        approval: Approval,
        decision: str,
        by: str,
        reason: str,
    ) -> bool:
        """Record the decision (compare-and-set: one decision wins), then complete the step;
        False: another decision won."""
        runs, _ = self._started()
        decided = msgspec.structs.replace(
            approval,
            decision=decision,
            decided_by=by,
            reason=reason[:500],
            decided_ms=_now_ms(),
            decided_with=ctx.envelope_id,
        )
        try:
            state = await runs.update(
                key, state, msgspec.structs.replace(state.run, approval=decided)
            )
        except KeyWrongLastSequenceError:
            log.info("decided meanwhile", extra={"approval_id": approval.approval_id})
            return False
        await runs.settled(decided)
        await self._complete(ctx, key, state, decided, recovering=False)
        return True

    async def _complete(
        self, ctx: Context, key: str, state: StepState, approval: Approval, *, recovering: bool
    ) -> None:
        """Run the decided request (approved) or deny it, and answer. `recovering`: the
        runtime died after the decision and before the answer, so an approved step that
        changes something may have run: it is not run again."""
        _, steps = self._started()
        decision, by, reason = approval.decision, approval.decided_by, approval.reason
        request = decode_envelope(approval.request)
        if not isinstance(request, ToolRequest):
            raise TypeError(f"a held request is a {type(request).__name__}")
        asked = Asked(request, approval.sender, approval.headers)
        extra = {"approval": decision, "decided_by": by, "reason": reason}
        if decision == "approved" and recovering and not is_read_only(request):
            await self._interrupted(ctx, asked, key, state)
            return
        if decision == "approved":
            outcome = await steps.run(asked, approved=True)
            if isinstance(outcome, Held):  # cannot happen: approved runs are never held
                raise RuntimeError("an approved request was held again")
        elif decision == "canceled":  # its session ended first
            outcome = ScopeDenied(
                "requires_approval",
                f"{request.tool_name} was not run: its {reason} while it waited for approval",
                ErrorCode.SESSION_EXPIRED,
            )
        else:
            why = f"rejected by {by}" if decision == "rejected" else "not decided in time"
            outcome = ScopeDenied(
                "requires_approval",
                f"{request.tool_name} was {decision}: {why}{': ' + reason if reason else ''}",
                ErrorCode.APPROVAL_DENIED,
            )
        await self._finish(ctx, asked, key, state, steps.result(request, outcome, extra))


def _now_ms() -> int:
    return int(time.time() * 1000)
