"""Shell.Exec: one program run contained in its session's workspace (seed 002 §9, §19.4).

The executor decodes the request, refuses a working directory outside the workspace (the
scope layer checked it first; this trusts no earlier check), runs the argv with
`run_contained` under the scope's output cap and the shorter of the two timeouts, and says
what came of it: a program that exits, with any status, has succeeded; one killed at a
limit, or that cannot start, has failed.
"""

from __future__ import annotations

import shlex
import signal
from typing import Final

from actors.tools._arguments import ShellExec, decode_arguments
from actors.tools._confinement import ShellLimits
from actors.tools._contained import run_contained
from actors.tools._contract import Provenance, ScopeDenied, ToolInvocation, ToolOutcome
from schemas import ErrorCode

__all__ = ("DEFAULT_MAX_OUTPUT_BYTES", "execute_shell")

DEFAULT_MAX_OUTPUT_BYTES: Final = 64 * 1024
"""The output kept when the scope sets no `max_output_bytes`."""

DEFAULT_LIMITS: Final = ShellLimits()


async def execute_shell(
    invocation: ToolInvocation, *, limits: ShellLimits = DEFAULT_LIMITS
) -> ToolOutcome:
    """The Shell.Exec executor: runs the request's argv contained in its workspace.

    A program that exits non-zero has run: that is a `succeeded` outcome with its exit code.
    One killed at its timeout or by a resource limit, or that cannot start, has `failed`.

    Raises:
        InvalidArguments: the arguments are no `ShellExec`.
        ScopeDenied: the working directory resolves outside the workspace (`allowed_paths`).
    """
    arguments = decode_arguments("Shell.Exec", invocation.arguments)
    assert isinstance(arguments, ShellExec)  # noqa: S101 - decode_arguments' contract
    workspace = invocation.workspace.resolve()
    cwd = (workspace / arguments.cwd).resolve()
    if not cwd.is_relative_to(workspace):
        raise ScopeDenied("allowed_paths", f"cwd {arguments.cwd!r} is outside the workspace")
    provenance = Provenance(source="Shell.Exec", locator=shlex.join(arguments.argv))
    timeout_s = min(arguments.timeout_s or invocation.timeout_s, invocation.timeout_s)
    cap = invocation.scope.max_output_bytes
    try:
        run = await run_contained(
            arguments.argv,
            cwd=cwd,
            workspace=workspace,
            environment=invocation.environment,
            stdin=arguments.stdin.encode(),
            timeout_s=timeout_s,
            max_output_bytes=DEFAULT_MAX_OUTPUT_BYTES if cap is None else cap,
            limits=limits,
        )
    except OSError as exc:
        return _failed(f"{arguments.argv[0]!r} could not be started: {exc}", provenance)
    details = {
        "exit_code": run.exit_code,
        "signal": _signal_name(run.signal) if run.signal else None,
        "output_bytes": len(run.output) + run.dropped_bytes,
        "dropped_bytes": run.dropped_bytes,
        "duration_ms": round(run.duration_s * 1000),
        "containment": run.containment,
    }
    text = run.output.decode(errors="replace")
    if run.limit_hit is not None:
        limit = run.limit_hit
        if run.timed_out:
            limit = f"timeout_s (wall-clock timeout of {timeout_s:g} s)"
        return ToolOutcome(
            status="failed",
            output_text=text,
            truncated=run.truncated,
            error_code=ErrorCode.TOOL_EXECUTION_FAILED,
            error_message=f"the command was killed at its limit {limit}",
            details=details,
            provenance=provenance,
        )
    return ToolOutcome(
        status="succeeded",
        output_text=text,
        truncated=run.truncated,
        details=details,
        provenance=provenance,
    )


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:  # a real-time signal has no name of its own
        return f"signal {number}"


def _failed(message: str, provenance: Provenance) -> ToolOutcome:
    return ToolOutcome(
        status="failed",
        error_code=ErrorCode.TOOL_EXECUTION_FAILED,
        error_message=message,
        provenance=provenance,
    )
