"""What `parley orchestrate` takes, and the opening of a session (seed 000) it makes of it.

The flags carry seed 000's limits under their seed names in the help (`maxTurns`,
`maxDurationMs`, `maxFailures`, `maxTokensBudget`); the session's opening is the person's
`HumanMessage` in `orchestrate` mode, naming the local agent and the shared one as this
deployment knows it (`parley shared add`).
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from schemas import HumanMessage, Orchestration, new_id, utc_now
from tools.share import DEFAULT_RELAY_DIR, resolve_shared

__all__ = ("add_orchestrate_arguments", "invalid_arguments_line", "orchestration_message")


def add_orchestrate_arguments(cmd: argparse.ArgumentParser) -> None:
    """Add the command's arguments to its parser."""
    cmd.add_argument("objective", nargs="+", help="what your agent should achieve")
    cmd.add_argument("--agent", required=True, help="your local agent (drafts each message)")
    cmd.add_argument("--shared", required=True, help="the shared agent (owner/agent or name)")
    cmd.add_argument(
        "--relay-dir",
        type=Path,
        default=DEFAULT_RELAY_DIR,
        help="the shared agents this deployment may call (`parley shared add`; "
        "default: %(default)s)",
    )
    cmd.add_argument(
        "--mode",
        choices=("manual", "semi_auto", "full_auto"),
        default="manual",
        help="manual: every draft waits for you; semi_auto: only drafts a review rule holds; "
        "full_auto: none (default: %(default)s)",
    )
    for flag, default, what in (
        ("turns", 8, "maxTurns: messages to the shared agent, each with its answer"),
        ("duration-ms", 600_000, "maxDurationMs: the session's whole time"),
        ("failures", 3, "maxFailures: consecutive failed calls"),
    ):
        cmd.add_argument(
            f"--max-{flag}", type=int, default=default, help=f"{what} (default: %(default)s)"
        )
    cmd.add_argument("--max-tokens", type=int, default=None, help="maxTokensBudget")
    cmd.add_argument("--config", type=Path, help="TOML settings file")
    cmd.add_argument("--user", default="", help="user id carried by the session")
    cmd.add_argument(
        "--detach",
        action="store_true",
        help="open the session (full_auto only) and leave it running; print how to follow "
        "and stop it",
    )


_FLAGS = {
    "max_turns": "--max-turns",
    "max_duration_ms": "--max-duration-ms",
    "max_failures": "--max-failures",
    "max_tokens_budget": "--max-tokens",
}
"""The orchestration's fields a flag sets, by field name."""
_AT_FIELD = re.compile(r"^(?P<why>.*) - at `\$\.orchestration\.(?P<field>\w+)`$")


def invalid_arguments_line(problem: str) -> str:
    """What to tell a person whose command line made an invalid orchestration: the flag
    named, not the envelope's field (`--max-turns (max_turns): Expected int >= 1`)."""
    found = _AT_FIELD.match(problem)
    if found is None or found["field"] not in _FLAGS:
        return f"invalid arguments: {problem}"
    return f"{_FLAGS[found['field']]} ({found['field']}): {found['why']}"


def orchestration_message(args: argparse.Namespace) -> HumanMessage:
    return HumanMessage(
        id=new_id(),
        created_at=utc_now(),
        text=" ".join(args.objective),
        call_id=new_id(),
        user_id=args.user,
        mode="orchestrate",
        session_id=new_id(),
        orchestration=Orchestration(
            local_agent=args.agent,
            shared_agent=resolve_shared(args.shared, args.relay_dir),
            mode=args.mode,
            max_turns=args.max_turns,
            max_duration_ms=args.max_duration_ms,
            max_failures=args.max_failures,
            max_tokens_budget=args.max_tokens,
        ),
    )
