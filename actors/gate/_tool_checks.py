"""The gate's checks of a tool request (seed 002 §9): the capability, along the whole chain,
and the request's arguments against its scope, before the tool runtime sees it. Pure.

A tool request is a call to the tool runtime. Its sender may use a capability only if its
profile names it, and, when it works for another agent (a delegation or a sub-agent call made
by an agent), only within what every agent above it on the chain may do: scopes only narrow
(`Level.bound_by`, actors/gate/_records.py). The arguments are then checked against the
narrowed scope lexically: the gate has no access to the runtime's files, so symlinks and hard
links are the runtime's to resolve (actors/tools/), and it checks again whatever the gate
said.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import PurePosixPath

from actors.gate._records import Level, Position
from actors.gate._routes import Deny, Submission
from actors.tools import (
    InvalidArguments,
    ScopeDenied,
    admit_request,
    approval_summary,
    narrow_scope,
)
from schemas import (
    AnyEnvelope,
    ApprovalRule,
    Capability,
    ErrorCode,
    PolicyBundle,
    ProfilePolicy,
    ToolRequest,
    approval_rule_of,
    effective_scope,
    encode,
)

__all__ = (
    "VIRTUAL_WORKSPACE",
    "HeldView",
    "approval_summary",
    "chain_scope",
    "check_tool_request",
    "held_for_approval",
)

VIRTUAL_WORKSPACE = PurePosixPath("/workspace")
"""Where the gate places relative paths to judge them: the session's workspace, whatever the
runtime's real directory is."""


def chain_scope(
    bundle: PolicyBundle, holders: tuple[str, ...], capability: str
) -> Capability | str:
    """The scope of `capability` narrowed by every holder on the chain, or the first holder
    that may not use it at all."""
    scope: Capability | None = None
    for holder in holders:
        own = effective_scope(bundle, holder, capability)
        if own is None:
            return holder
        scope = own if scope is None else narrow_scope(scope, own)
    if scope is None:
        raise ValueError("a tool request's chain names no holder")
    return scope


def check_tool_request(
    sub: Submission,
    envelope: ToolRequest,
    bundle: PolicyBundle,
    profile: ProfilePolicy,
    caller: Level,
) -> Deny | None:
    """Whether the sender may make this tool request (`sub`'s envelope) here."""
    capability = envelope.tool_name
    if envelope.capability not in (None, capability):
        return Deny(
            ErrorCode.INVALID_REQUEST,
            "capability_name",
            f"tool_request names tool {capability!r} but capability {envelope.capability!r}",
        )
    usable = profile.tools_allowed + profile.capabilities if caller.tools is None else caller.tools
    if not _named(capability, usable):
        return Deny(
            ErrorCode.TOOL_NOT_ALLOWED,
            "tools_allowed",
            f"Employee {sub.sender} not authorized to use tool {capability} "
            f"(allowed here: {list(usable)})",
        )
    scope = chain_scope(bundle, (*caller.bound_by, sub.sender), capability)
    if isinstance(scope, str):
        whose = "its" if scope == sub.sender else f"its caller {scope}'s"
        return Deny(
            ErrorCode.CAPABILITY_DENIED,
            "capabilities",
            f"{sub.sender} may not use {capability}: {whose} profile does not grant it",
        )
    try:
        admit_request(capability, envelope.arguments, scope, VIRTUAL_WORKSPACE, resolve=False)
    except InvalidArguments as exc:
        return Deny(ErrorCode.INVALID_REQUEST, "arguments", str(exc))
    except ScopeDenied as exc:
        return Deny(exc.code, exc.rule, str(exc))
    except (ValueError, TypeError, OSError) as exc:  # a check's own failure on odd input
        # refuses this one request: raised, it would fail the gate's whole batch.
        return Deny(ErrorCode.INVALID_REQUEST, "arguments", f"{capability} arguments: {exc!r}")
    return None


@dataclass(frozen=True, slots=True)
class HeldView:
    """What the owner of a held tool request is shown: the scope that holds it, what it does
    (the decisive arguments first, any cut marked) and its digest."""

    scope: Capability
    summary: str
    digest: str
    rule: ApprovalRule | None = None
    """The approval rule that holds it (its title and description are shown), if named."""


def held_for_approval(
    bundle: PolicyBundle, envelope: AnyEnvelope, position: Position
) -> HeldView | None:
    """How an admitted tool request held for its session owner's approval is shown, or None
    when none holds it: the runtime holds it, the gate tells the owner
    (actors/gate/_timeline.py)."""
    if not isinstance(envelope, ToolRequest) or not position.levels:
        return None
    holders = position.levels[-1].bound_by or (position.sender,)
    scope = chain_scope(bundle, holders, envelope.tool_name)
    if not isinstance(scope, Capability) or not scope.requires_approval:
        return None
    digest = hashlib.sha256(encode(envelope)).hexdigest()
    return HeldView(scope, approval_summary(envelope), digest, approval_rule_of(bundle, scope))


"""Arguments that say what a step does, shown first whatever order the agent wrote them in."""


def _named(capability: str, names: tuple[str, ...]) -> bool:
    """Whether `names` grant `capability` by name, or by its MCP server's `Mcp.<server>.*`."""
    if capability in names:
        return True
    return capability.startswith("Mcp.") and capability.rsplit(".", 1)[0] + ".*" in names
