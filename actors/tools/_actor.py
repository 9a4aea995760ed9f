"""The tool runtime (`parley run tools`): runs the tool requests the gate delivers to it.

For each `tool_request` (seed 002 §13.2) it answers one `tool_result` (§13.3) through the gate,
which routes it back to the agent that asked. The step itself, its scope, run and result, is
actors/tools/_steps.py's; this module keeps each step's promises across deliveries:

- at most once (actors/tools/_runs.py): a step is marked before it runs and its result stored
  before it is published; a redelivery is answered from the store, and a step a crash cut
  short is run again only if it changes nothing (else it ends `failed`, "interrupted");
- approvals (actors/tools/_held_steps.py): a request whose scope requires one is held in its
  step's record, and decided once: by the owner's `control` (approve or reject), by its
  expiry (a reminder on the runtime's own timers subject), or by its session's end;
- steps run at once, one session's one after another (actors/tools/_steps.py), and a second
  delivery of a step this process runs now waits for it.

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
from nats.js.kv import KeyValue

from actors.tools._artifacts import ArtifactStore, ArtifactStoreError
from actors.tools._contract import Executor
from actors.tools._decisions import Decisions
from actors.tools._executors import BUILT_IN_EXECUTORS, is_read_only
from actors.tools._held_steps import HeldSteps, interrupted
from actors.tools._mcp import McpHub
from actors.tools._options import ToolsOptions
from actors.tools._runs import RunStore, StepState, run_key
from actors.tools._step_records import StepRecords
from actors.tools._steps import Asked, Held, StepRunner, failed
from bus import (
    DAY_S,
    ENDS,
    RECORD_TERMS,
    Actor,
    BundleStore,
    BusHandle,
    ConfigError,
    Context,
    EndedSessions,
    Input,
    Settings,
    Shares,
    asked_at_start,
    load_public_keys,
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
    derive_id,
    encode,
)

__all__ = ("ToolsActor",)

log = logging.getLogger("parley.actors.tools")

_decode_result = msgspec.json.Decoder(ToolResult)


class ToolsActor(Actor):
    """Runs each delivered tool request within its scope, at most once per step."""

    kind: ClassVar[str] = "tools"
    files_by_sender: ClassVar[bool] = True
    concurrent_handlers: ClassVar[bool] = True
    """Steps run at once, one session's one after another (actors/tools/_steps.py): handled in
    order, one agent's long command held up every other person's steps (an attack review)."""

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
        self._held: HeldSteps | None = None
        self._mcp = McpHub(self.options.mcp_servers) if self.options.mcp_servers else None
        self._in_hand: dict[str, asyncio.Event] = {}
        """The steps this process is handling now, each set when done: a second delivery of
        one waits for it (a nak would spend its deliveries), where a mark found `running`
        would otherwise be taken for a crash's leftover."""

    def inputs(self) -> Sequence[Input]:
        ns = self.namespace
        return (
            Input.deliver(ns, self.actor_id),
            Input.timers(ns, self.actor_id),
            Input.session_ends(ns, self.actor_id),
        )

    async def start(self, bus: BusHandle) -> None:
        ns = self.namespace
        policy = await asked_at_start(
            bus.refusals, lambda: bus.js.key_value(ns.bucket("policy")), "the policy bucket"
        )
        self.bundles = BundleStore(policy, self._trusted, self.options.tenant, keeps_floor=False)
        await self.bundles.load()
        runs = await asked_at_start(
            bus.refusals, lambda: bus.js.key_value(ns.bucket("tool_runs")), "the tool runs bucket"
        )
        artifact_shares, record_shares = await self._shares(bus, runs)
        self._runs = RunStore(runs, record_shares)
        artifacts = ArtifactStore(
            bus.js, ns, self.options.tenant, self.settings.max_payload, artifact_shares
        )
        await artifacts.check()  # its age limit: an object half way to it is stored anew
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
        self._held = HeldSteps(
            self._runs,
            self._steps,
            Decisions(self.actor_id),
            timers=ns.timers(self.actor_id),
            longest_step_s=self.options.timeout_s,
            finish=self._finish,
        )

    async def _shares(self, bus: BusHandle, runs: KeyValue) -> tuple[Shares, Shares]:
        """Each person's and agent's share of the artifact store, counted for as long as the
        store keeps an object: the settings' retention, or the store's own age limit where
        it is longer (a runtime whose settings changed before `parley provision` ran); and
        their shares of the step records, counted for the `tool_runs` bucket's age limit."""
        quotas = self.settings.quotas
        store = ArtifactStore(bus.js, self.namespace, self.options.tenant)
        try:
            kept_s = await store.check()
        except ArtifactStoreError as exc:
            raise ConfigError(str(exc)) from None
        if kept_s == 0:
            raise ConfigError(
                f"the artifact store {store.bucket} keeps objects for ever (made by an "
                "earlier release): run `parley provision` to give it retention.artifacts_s"
            )
        retention_s = max(self.settings.retention.artifacts_s, kept_s)
        counts_kept_s = (await runs.status()).ttl or 0.0
        if counts_kept_s and counts_kept_s < retention_s + DAY_S:
            raise ConfigError(
                f"the tool_runs bucket keeps a record {counts_kept_s:g} s, less than the "
                f"artifacts' {retention_s:g} s and a day: run `parley provision`"
            )
        artifact_shares = Shares(
            runs,
            per_person=quotas.artifact_share("person"),
            per_agent=quotas.artifact_share("agent"),
            retention_s=retention_s,
        )
        record_shares = Shares(
            runs,
            per_person=quotas.step_record_share("person"),
            per_agent=quotas.step_record_share("agent"),
            retention_s=counts_kept_s or DAY_S * 8,  # a bucket that keeps them for ever: 8 days
            terms=RECORD_TERMS,
        )
        return artifact_shares, record_shares

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

    def _held_steps(self) -> HeldSteps:
        if self._held is None:
            raise RuntimeError("the tool runtime handled a message before it started")
        return self._held

    async def handle(self, envelope: AnyEnvelope, ctx: Context) -> None:
        if ctx.stream == self.namespace.stream("timers"):
            if isinstance(envelope, ToolRequest):
                await self._held_steps().on_reminder(envelope, ctx)
            return
        if ctx.stream == self.namespace.stream("events"):  # how a session stands
            if isinstance(envelope, SessionEvent) and envelope.event_type in ENDS:
                await self._held_steps().on_session_end(ctx, ENDS[envelope.event_type])
            return
        match envelope:
            case ToolRequest():
                await self._on_request(Asked(envelope, ctx.sender, dict(ctx.headers)), ctx)
            case Control(action="approve" | "reject"):
                await self._held_steps().on_decision(envelope, ctx)
            case Error():  # the gate refused a result of ours: say why
                log.error(
                    "a tool result was refused",
                    extra={"code": str(envelope.code), "error": envelope.message},
                )
            case _:
                log.info("ignored", extra={"kind": envelope.__struct_config__.tag})

    async def _on_request(self, asked: Asked, ctx: Context) -> None:
        _, steps = self._started()
        request = asked.request
        key = run_key(asked.sender, asked.session, request.task_id, request.step_id)
        while (in_hand := self._in_hand.get(key)) is not None:
            await in_hand.wait()  # this process runs it now: then its record has the result
        done = self._in_hand[key] = asyncio.Event()
        try:
            async with steps.in_session(asked.session):  # marked running only in its turn
                await self._take(asked, ctx, key)
        finally:
            del self._in_hand[key]
            done.set()

    async def _take(self, asked: Asked, ctx: Context, key: str) -> None:
        """Answer a step from its record, go on with it after a crash, or run it."""
        runs, steps = self._started()
        held = self._held_steps()
        request = asked.request
        why = await runs.refusal(key, asked.payers)
        if why is not None:  # nothing of it stored, and a payer's share used up
            log.warning("step refused: a share of the step records is full", extra={"why": why})
            if await runs.keeps_refusals(asked.payers):
                refusing = await runs.begin(
                    key, _now_ms(), ctx.attempt, refused=why, payers=asked.payers
                )
                if refusing.state == "new":  # else another delivery got there first: its record
                    await steps.answer(ctx, asked, _refusal(request, why))
                    return
            else:  # flooding well past a share: refused, and nothing more kept
                await steps.answer(ctx, asked, _refusal(request, why))
                return
        begun = await runs.begin(key, _now_ms(), ctx.attempt)
        if begun.run.refused:  # refused before it ran: so again, as the first delivery was
            await steps.answer(ctx, asked, _refusal(request, begun.run.refused))
            return
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
                await held.remind(ctx, approval)  # the same reminder: dropped if sent
                return
            # Decided, no result yet: the decision's own handler may still be running it.
            wait_ms = held.settles_ms(approval)
            if wait_ms > 0:
                ctx.defer(wait_ms / 1000)
                return
            await held.complete(ctx, key, begun, approval, recovering=True)
            return
        if begun.state == "running":
            if not is_read_only(request):
                await self._finish(ctx, asked, key, begun, interrupted(request))
                return
            try:
                begun = await runs.take_over(key, begun, ctx.attempt)
            except KeyWrongLastSequenceError:
                ctx.defer(1.0)  # another delivery took it: its result will be there
                return
        outcome = await steps.run(asked)
        if isinstance(outcome, Held):
            await held.hold(ctx, asked, key, begun, outcome)
            return
        await self._finish(ctx, asked, key, begun, steps.result(request, outcome))

    async def _finish(
        self, ctx: Context, asked: Asked, key: str, begun: StepState, result: ToolResult
    ) -> None:
        """Store the step's result, then publish it; a step someone else ended first is
        answered with theirs."""
        runs, steps = self._started()
        try:
            stored = await runs.finish(key, begun, encode(result))
        except KeyWrongLastSequenceError:
            found = await runs.read(key)
            if found is None or found.run.result is None:
                raise
            await steps.answer(ctx, asked, _decode_result.decode(found.run.result))
            return
        await steps.answer(ctx, asked, result)
        await runs.charge(asked.payers, stored)  # once the result is on its way


def _refusal(request: ToolRequest, reason: str) -> ToolResult:
    """The answer to a step refused before it ran, the same at every delivery."""
    return StepRunner.result(request, failed(str(ErrorCode.RATE_LIMITED), f"not run: {reason}"))


def _now_ms() -> int:
    return int(time.time() * 1000)
