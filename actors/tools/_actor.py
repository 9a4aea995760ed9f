"""The tool runtime (`parley run tools`): runs the tool requests the gate delivers to it.

For each `tool_request` (seed 002 §13.2) it answers one `tool_result` (§13.3) through the gate,
which routes it back to the agent that asked:

1. The scope is its own finding, never the gate's word: the runtime verifies the signed
   bundle itself (a read-only `BundleStore`), takes the sender's effective scope of the
   capability, and narrows it by every agent the gate says bound the request
   (`Parley-Bound-By`, on a subject only the gate writes).
2. The arguments are checked against that scope on the real file system (symlinks resolved,
   hard links refused), in the session's own workspace directory.
3. The step runs at most once (actors/tools/_runs.py): marked before it runs, its result
   stored before it is published, a redelivery answered from the store.
4. The capability's executor runs it, contained, under the step's time limit.

A request outside its scope ends `denied` with the code and the rule; a run that fails ends
`failed`; an executor's own bug ends `failed` with `INTERNAL_ERROR`, never a dead runtime.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import re
import time
from collections.abc import Mapping, Sequence
from functools import reduce
from pathlib import Path
from typing import ClassVar, Literal

import msgspec
from nats.js.errors import KeyWrongLastSequenceError

from actors.tools._admission import admit_request, narrow_scope
from actors.tools._arguments import InvalidArguments
from actors.tools._artifacts import ArtifactStore, ArtifactStoreError
from actors.tools._contract import Executor, ScopeDenied, ToolInvocation, ToolOutcome
from actors.tools._files import execute_file_delete, execute_file_read, execute_file_write
from actors.tools._git import GIT_EXECUTORS
from actors.tools._http import execute_http
from actors.tools._options import ToolsOptions
from actors.tools._runs import RunStore, StepState, run_key
from actors.tools._steps import StepRecords
from actors.tools._upload import execute_workspace_upload
from bus import (
    BOUND_BY,
    Actor,
    BundleStore,
    BusHandle,
    ConfigError,
    Context,
    Input,
    Settings,
    load_public_keys,
    through_elections,
    validated_options,
)
from schemas import (
    AnyEnvelope,
    Capability,
    Error,
    ErrorCode,
    ToolError,
    ToolRequest,
    ToolResult,
    decode_envelope,
    effective_scope,
    encode,
    utc_now,
)

__all__ = ("BUILT_IN_EXECUTORS", "READ_ONLY", "ToolsActor")

log = logging.getLogger("parley.actors.tools")

BUILT_IN_EXECUTORS: dict[str, Executor] = {
    "File.Read": execute_file_read,
    "File.Write": execute_file_write,
    "File.Delete": execute_file_delete,
    "Network.Http": execute_http,
    **GIT_EXECUTORS,
    "Workspace.Upload": execute_workspace_upload,
}
"""The executor of each capability this runtime runs itself."""

READ_ONLY = frozenset({"File.Read", "Git.Status", "Git.Diff"})
"""Capabilities whose step may run again after a crash cut it short: they change nothing."""

_SAFE_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")


def _is_read_only(request: ToolRequest) -> bool:
    if request.tool_name == "Network.Http":
        return str(request.arguments.get("method", "GET")) in ("GET", "HEAD")
    return request.tool_name in READ_ONLY


def workspace_name(session_id: str) -> str:
    """A session's directory name: its id when that is a safe name, else a digest of it."""
    if _SAFE_NAME.fullmatch(session_id):
        return session_id
    return "s" + hashlib.sha256(session_id.encode()).hexdigest()[:40]


class ToolsActor(Actor):
    """Runs each delivered tool request within its scope, at most once per step."""

    kind: ClassVar[str] = "tools"

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
        self._artifacts: ArtifactStore | None = None
        self._steps = StepRecords(None, settings.max_payload)

    def inputs(self) -> Sequence[Input]:
        return (Input.deliver(self.namespace, self.actor_id),)

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
        self._artifacts = artifacts
        self._steps = StepRecords(artifacts, self.settings.max_payload)
        self._workspaces.mkdir(parents=True, exist_ok=True, mode=0o700)

    async def background(self, stopping: asyncio.Event) -> None:
        if self.bundles is not None:
            await self.bundles.watch(stopping)

    async def handle(self, envelope: AnyEnvelope, ctx: Context) -> None:
        if isinstance(envelope, Error):  # the gate refused a result of ours: say why
            log.error(
                "a tool result was refused",
                extra={"code": str(envelope.code), "error": envelope.message},
            )
            return
        if not isinstance(envelope, ToolRequest):
            log.info("not a tool request: ignored", extra={"kind": envelope.__struct_config__.tag})
            return
        runs = self._runs
        if runs is None:
            raise RuntimeError("the tool runtime handled a message before it started")
        key = run_key(ctx.sender, envelope.session_id, envelope.task_id, envelope.step_id)
        begun = await runs.begin(key, _now_ms(), ctx.attempt)
        if begun.state == "done" and begun.run.result is not None:
            await ctx.submit(self._again(decode_envelope(begun.run.result), ctx))
            return
        if begun.state == "running":
            if not _is_read_only(envelope):
                result = self._result(
                    envelope,
                    ctx,
                    _failed(
                        "TOOL_EXECUTION_FAILED",
                        f"interrupted: the tool runtime stopped while step {envelope.step_id} "
                        "ran; whether its effect happened is unknown, so it is not run again",
                    ),
                )
                await self._finish(ctx, key, begun, result)
                return
            try:
                begun = await runs.take_over(key, begun, ctx.attempt)
            except KeyWrongLastSequenceError:
                ctx.defer(1.0)  # another delivery took it: its result will be there
                return
        result = self._result(envelope, ctx, await self._run(envelope, ctx))
        await self._finish(ctx, key, begun, result)

    async def _finish(self, ctx: Context, key: str, begun: StepState, result: ToolResult) -> None:
        """Store the step's result, then publish it; a step someone else ended first is
        answered with theirs."""
        runs = self._runs
        assert runs is not None  # noqa: S101 - started
        try:
            await runs.finish(key, begun, encode(result))
        except KeyWrongLastSequenceError:
            found = await runs.begin(key, _now_ms(), ctx.attempt)
            if found.run.result is None:
                raise
            await ctx.submit(self._again(decode_envelope(found.run.result), ctx))
            return
        await ctx.submit(result)

    async def _run(self, request: ToolRequest, ctx: Context) -> ToolOutcome | ScopeDenied:
        bundle = self.bundles.bundle if self.bundles else None
        if bundle is None:
            return ScopeDenied(
                "no_bundle",
                "the tool runtime trusts no policy bundle: "
                f"{self.bundles.problem if self.bundles else 'not started'}",
                ErrorCode.POLICY_BUNDLE_INVALID,
            )
        capability = request.tool_name
        holders = tuple(h for h in ctx.headers.get(BOUND_BY, "").split(",") if h) or (ctx.sender,)
        if holders[-1] != ctx.sender:
            holders = (*holders, ctx.sender)
        scopes = [effective_scope(bundle, holder, capability) for holder in holders]
        if any(scope is None for scope in scopes):
            lacking = [h for h, s in zip(holders, scopes, strict=True) if s is None]
            return ScopeDenied(
                "capabilities", f"{', '.join(lacking)} may not use {capability} (policy bundle)"
            )
        scope = reduce(narrow_scope, [s for s in scopes if s is not None])
        executor = self.executors.get(capability)
        if executor is None:
            return _failed("TOOL_NOT_FOUND", f"this tool runtime does not run {capability}")
        workspace = self._workspaces / workspace_name(request.session_id)
        workspace.mkdir(exist_ok=True, mode=0o700)
        try:
            admit_request(capability, request.arguments, scope, workspace, resolve=True)
            if scope.requires_approval:
                return ScopeDenied(
                    "requires_approval",
                    f"{capability} requires approval (rule {scope.approval_rule_id or capability})",
                    ErrorCode.APPROVAL_REQUIRED,
                )
            invocation = self._invocation(request, scope, workspace)
            await self._steps.before(invocation)
            outcome = await asyncio.wait_for(executor(invocation), self.options.timeout_s + 5)
            return await self._steps.after(invocation, outcome)
        except ScopeDenied as denied:
            return denied
        except InvalidArguments as exc:
            return ScopeDenied("arguments", str(exc), ErrorCode.INVALID_REQUEST)
        except TimeoutError:
            return _failed("TOOL_EXECUTION_FAILED", f"timed out after {self.options.timeout_s} s")
        except Exception as exc:
            log.exception("executor failed", extra={"capability": capability})
            return _failed("INTERNAL_ERROR", f"{capability} failed inside the runtime: {exc!r}")

    def _invocation(
        self, request: ToolRequest, scope: Capability, workspace: Path
    ) -> ToolInvocation:
        return ToolInvocation(
            capability=request.tool_name,
            arguments=request.arguments,
            scope=scope,
            workspace=workspace,
            session_id=request.session_id,
            step_id=request.step_id,
            environment=dict(self.options.environment),
            timeout_s=self.options.timeout_s,
            artifacts=self._artifacts,
        )

    def _result(
        self, request: ToolRequest, ctx: Context, outcome: ToolOutcome | ScopeDenied
    ) -> ToolResult:
        status: Literal["succeeded", "failed", "denied"]
        error: ToolError | None
        uris: tuple[str, ...]
        if isinstance(outcome, ScopeDenied):
            status, error = "denied", ToolError(code=str(outcome.code), message=str(outcome))
            details: Mapping[str, object] = {"rule": outcome.rule}
            output, truncated, provenance, uris = None, False, {}, ()
        else:
            status = outcome.status
            error = (
                ToolError(code=outcome.error_code or "", message=outcome.error_message or "")
                if outcome.status == "failed"
                else None
            )
            details, output, truncated = outcome.details, outcome.output_text, outcome.truncated
            uris = outcome.artifact_uris
            source = outcome.provenance
            provenance = (
                {"source": source.source, "locator": source.locator, "trust": source.trust}
                if source
                else {}
            )
        return ToolResult(
            id=ctx.derive_id("tool_result"),
            created_at=utc_now(),
            tool_name=request.tool_name,
            session_id=request.session_id,
            task_id=request.task_id,
            step_id=request.step_id,
            status=status,
            output_text=output,
            artifact_uris=uris,
            error=error,
            truncated=truncated,
            details=dict(details),
            provenance=provenance,
        )

    @staticmethod
    def _again(stored: AnyEnvelope, ctx: Context) -> AnyEnvelope:
        """A stored result, as the answer to the request in hand (its own derived id)."""
        return msgspec.structs.replace(stored, id=ctx.derive_id("tool_result"))


def _failed(code: str, message: str) -> ToolOutcome:
    return ToolOutcome(status="failed", error_code=code, error_message=message)


def _now_ms() -> int:
    return int(time.time() * 1000)
