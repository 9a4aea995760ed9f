"""One step of the tool runtime, from its request to its result: the scope, the run (with its
checkpoint and large output, actors/tools/_step_records.py), the answer. Independent of which
message is in hand (the request itself, the decision that approved it, or the reminder that
expired it), so a held request runs exactly as a fresh one.

The scope is the runtime's own finding, never the gate's word: its own verified bundle, the
sender's effective scope of the capability, narrowed by every agent the gate says bound the
request (`Parley-Bound-By`, on a delivery only the gate writes). The arguments are checked
against it again on the real file system, in the session's own workspace directory.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from functools import reduce
from pathlib import Path
from typing import Literal

from actors.tools._admission import admit_request
from actors.tools._arguments import InvalidArguments
from actors.tools._artifacts import ArtifactStore
from actors.tools._contract import Executor, ScopeDenied, ToolInvocation, ToolOutcome
from actors.tools._mcp import McpHub
from actors.tools._options import ToolsOptions
from actors.tools._scopes import narrow_scope
from actors.tools._step_records import StepRecords
from actors.tools._workspace_owner import claim_workspace, workspace_name
from bus import (
    BOUND_BY,
    ORIGIN,
    SESSION,
    BundleStore,
    Context,
    EndedSessions,
    HeaderError,
    Payer,
    SessionLocks,
    parse_trace_headers,
)
from schemas import (
    Capability,
    ErrorCode,
    ToolError,
    ToolRequest,
    ToolResult,
    approval_rule_of,
    approval_timeout_s,
    derive_id,
    effective_scope,
    encode,
    utc_now,
)

__all__ = (
    "Asked",
    "Held",
    "StepRunner",
    "chain_deadline_ms",
    "failed",
    "past_deadline",
    "workspace_name",
)

log = logging.getLogger("parley.actors.tools")


def failed(code: str, message: str) -> ToolOutcome:
    return ToolOutcome(status="failed", error_code=code, error_message=message)


def chain_deadline_ms(asked: Asked) -> int | None:
    """The call chain's deadline (`Parley-Deadline`, as the gate delivered it: the shortest of
    its callers' and the sender's own wait), or None when the chain has none."""
    try:
        return parse_trace_headers(asked.headers, asked.request.id).deadline_ms
    except HeaderError:  # only the gate writes a delivery's headers: none is garbled
        return None


def past_deadline(asked: Asked, now_ms: int) -> ToolOutcome | None:
    """The failure of a step whose call chain's deadline has passed: whoever asked has given
    up on it, so it is not started; None while there is time, or when the chain has none."""
    deadline_ms = chain_deadline_ms(asked)
    if deadline_ms is None or now_ms < deadline_ms:
        return None
    late_ms = now_ms - deadline_ms
    log.warning(
        "step not started: past its deadline",
        extra={
            "code": str(ErrorCode.DEADLINE_EXCEEDED),
            "step_id": asked.request.step_id,
            "session": asked.session,
            "late_ms": late_ms,
        },
    )
    return failed(
        str(ErrorCode.DEADLINE_EXCEEDED),
        f"not run: the call chain's deadline passed {late_ms} ms before "
        f"{asked.request.tool_name} step {asked.request.step_id} could start",
    )


@dataclass(frozen=True, slots=True)
class Asked:
    """A tool request as delivered: the envelope, who sent it (the gate's word) and the
    delivery's headers (its trace, and who bound it)."""

    request: ToolRequest
    sender: str
    headers: Mapping[str, str]

    @property
    def session(self) -> str:
        """The session whose workspace the request works in: the gate's word (its trace's
        session), never the `session_id` the agent wrote, which could name anyone's."""
        return self.headers.get(SESSION, "")

    @property
    def payers(self) -> tuple[Payer, Payer]:
        """Whom what the step stores is charged to (bus/_shares.py): the person the
        trace works for (the gate's `Parley-Origin`) and the agent that asked."""
        return Payer("person", self.headers.get(ORIGIN, "")), Payer("agent", self.sender)

    @property
    def holders(self) -> tuple[str, ...]:
        """The agents whose capabilities bound the request, its sender last."""
        named = tuple(h for h in self.headers.get(BOUND_BY, "").split(",") if h)
        return named if named and named[-1] == self.sender else (*named, self.sender)


@dataclass(frozen=True, slots=True)
class Held:
    """The request's scope requires its owner's approval first."""

    scope: Capability


class StepRunner:
    """Scopes, runs and answers steps for the tool runtime."""

    def __init__(
        self,
        options: ToolsOptions,
        bundles: BundleStore,
        executors: Mapping[str, Executor],
        workspaces: Path,
        mcp: McpHub | None = None,
        records: StepRecords | None = None,
        artifacts: ArtifactStore | None = None,
        sessions: EndedSessions | None = None,
    ) -> None:
        """`records`: checkpoints and large outputs around each run (none: neither);
        `artifacts`: the store Workspace.Upload writes to; `sessions`: how sessions stand (a
        step of an ended one is neither held nor run; none: not asked)."""
        self._sessions = sessions
        self._records = records or StepRecords(None, 1 << 20)
        self._artifacts = artifacts
        self._options = options
        self._bundles = bundles
        self._executors = executors
        self._workspaces = workspaces
        self._mcp = mcp
        self._in_workspace = SessionLocks()

    def _executor(self, capability: str) -> Executor | None:
        """The built-in executor, or the MCP hub for a tool one of its servers lists."""
        if capability.startswith("Mcp.") and self._mcp is not None:
            return self._mcp.call  # it says TOOL_NOT_FOUND for a tool no server lists
        return self._executors.get(capability)

    def scope_of(self, asked: Asked) -> Capability | ScopeDenied:
        """The scope this runtime finds for the request, or why there is none."""
        bundle = self._bundles.bundle
        if bundle is None:
            return ScopeDenied(
                "no_bundle",
                f"the tool runtime trusts no policy bundle: {self._bundles.problem}",
                ErrorCode.POLICY_BUNDLE_INVALID,
            )
        capability = asked.request.tool_name
        scopes = [effective_scope(bundle, holder, capability) for holder in asked.holders]
        lacking = [h for h, s in zip(asked.holders, scopes, strict=True) if s is None]
        if lacking:
            return ScopeDenied(
                "capabilities", f"{', '.join(lacking)} may not use {capability} (policy bundle)"
            )
        return reduce(narrow_scope, [s for s in scopes if s is not None])

    def in_session(self, session_id: str) -> AbstractAsyncContextManager[None]:
        """Hold session `session_id`'s turn: one of its steps at a time, in the order they
        came (its checkpoints are commits in one repository, and a step's paths are checked
        right before it runs), while other sessions' steps go on. Taken before a step is
        marked running, so a step waiting its turn is never taken for one a crash cut short."""
        return self._in_workspace.hold(workspace_name(session_id))

    async def ended(self, owner: str, session_id: str) -> str | None:
        """How `owner`'s session ended, or None while it runs (or is not known to)."""
        return await self._sessions.ended(owner, session_id) if self._sessions else None

    def approval_timeout_s(self, scope: Capability) -> int:
        """How long a held request waits for its owner: its approval rule's `timeout_s`."""
        return approval_timeout_s(self._bundles.bundle, scope)

    def approval_title(self, scope: Capability) -> str:
        """The title of the rule that holds a request (seed 002 §10), "" when none names it."""
        rule = approval_rule_of(self._bundles.bundle, scope)
        return rule.title if rule else ""

    async def run(
        self, asked: Asked, *, approved: bool = False
    ) -> ToolOutcome | ScopeDenied | Held:
        """Check the request against its scope and run it, unless it must be approved first
        (`approved`: its owner did)."""
        request = asked.request
        scope = self.scope_of(asked)
        if isinstance(scope, ScopeDenied):
            return scope
        capability = request.tool_name
        executor = self._executor(capability)
        if executor is None:
            return failed("TOOL_NOT_FOUND", f"this tool runtime does not run {capability}")
        if not asked.session:
            return ScopeDenied(
                "session", "the delivery names no session (only the gate delivers tool requests)"
            )
        name = workspace_name(asked.session)
        owner = asked.headers.get(ORIGIN, "")
        if not owner:
            return ScopeDenied(
                "session", "the delivery names no person its trace works for (Parley-Origin)"
            )
        another = claim_workspace(self._workspaces, name, owner)
        if another is not None:  # bob naming alice's session, to reach her files
            return ScopeDenied(
                "session",
                f"session {asked.session} is another person's: its workspace is not {owner}'s",
                ErrorCode.SESSION_NOT_FOUND,
            )
        workspace = self._workspaces / name
        workspace.mkdir(exist_ok=True, mode=0o700)
        try:
            admit_request(capability, request.arguments, scope, workspace, resolve=True)
            late = past_deadline(asked, int(time.time() * 1000))
            if late is not None:  # neither held nor run: its caller gave up on it
                return late
            how = await self._sessions.ended(owner, asked.session) if self._sessions else None
            if how is not None:  # neither held nor run: its person ended the session
                return failed(
                    "SESSION_EXPIRED",
                    f"session {asked.session} has ended ({how}): no step runs in it any more",
                )
            if scope.requires_approval and not approved:
                return Held(scope)
            invocation = ToolInvocation(
                capability=capability,
                arguments=request.arguments,
                scope=scope,
                workspace=workspace,
                session_id=asked.session,
                step_id=request.step_id,
                environment=dict(self._options.environment),
                timeout_s=self._options.timeout_s,
                artifacts=self._artifacts,
                payers=asked.payers,
            )
            log.info(
                "step started",
                extra={
                    "capability": capability,
                    "step_id": request.step_id,
                    "session": asked.session,
                },
            )
            base_error = await self._records.before(invocation)
            outcome = await asyncio.wait_for(executor(invocation), self._options.timeout_s + 5)
            return await self._records.after(invocation, outcome, base_error)
        except ScopeDenied as denied:
            return denied
        except InvalidArguments as exc:
            return ScopeDenied("arguments", str(exc), ErrorCode.INVALID_REQUEST)
        except TimeoutError:
            limit = self._options.timeout_s
            return failed("TOOL_EXECUTION_FAILED", f"timed out after {limit} s")
        except Exception as exc:
            log.exception("executor failed", extra={"capability": capability})
            return failed("INTERNAL_ERROR", f"{capability} failed inside the runtime: {exc!r}")

    @staticmethod
    def result(
        request: ToolRequest,
        outcome: ToolOutcome | ScopeDenied,
        extra: Mapping[str, object] | None = None,
    ) -> ToolResult:
        """The step's `tool_result` (seed 002 §13.3); its id derives from the request's."""
        status: Literal["succeeded", "failed", "denied"]
        error: ToolError | None
        if isinstance(outcome, ScopeDenied):
            status, error = "denied", ToolError(code=str(outcome.code), message=str(outcome))
            details: dict[str, object] = {"rule": outcome.rule}
            output, truncated, provenance = None, False, {}
            uris: tuple[str, ...] = ()
        else:
            status = outcome.status
            error = (
                ToolError(code=outcome.error_code or "", message=outcome.error_message or "")
                if outcome.status == "failed"
                else None
            )
            details, output, truncated = (
                dict(outcome.details),
                outcome.output_text,
                outcome.truncated,
            )
            uris = outcome.artifact_uris
            source = outcome.provenance
            provenance = (
                {"source": source.source, "locator": source.locator, "trust": source.trust}
                if source
                else {}
            )
        return ToolResult(
            id=derive_id(request.id, "tool_result"),
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
            details={**details, **(extra or {})},
            provenance=provenance,
        )

    @staticmethod
    async def answer(ctx: Context, asked: Asked, result: ToolResult) -> None:
        """Submit `result` as the answer to the request, whatever message is in hand: in the
        request's trace, caused by it, one hop back up."""
        request_id = asked.request.id
        trace = parse_trace_headers(asked.headers, request_id, root_origin=asked.sender)
        headers = trace.child(request_id, -1).to_headers(result.id)
        await ctx.outbox.publish(ctx.submit_subject, encode(result), headers)
