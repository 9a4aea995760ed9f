"""`parley calls SESSION_OR_TRACE`: a session's (or a trace's) agents calling agents.

The call history of seed 004's CLI, read back from the audit history: every delegation and
sub-agent call, in the order things happened, in seed 004's words:

    planner calling coder with task: code for the parser
    coder returned: SUCCESS (174 tokens, 0.1s)

A refused call, an answer that says the work failed or was partial, a call answered after its
deadline or never, end with REFUSED, FAILED, PARTIAL or TIMEOUT and the reason in brackets.

It reads as `parley trace` does (the `audit-cli` role, every profile's records of every
tenant, or of `--tenant`) and finds what to show the same way: the records of the trace
named, or of every trace in which a record names the session. A session's calls are in its
traces, not all in its records: an answer names no session, and a call an agent makes while
answering names the session of the call it answers, or none.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import sys
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Final

from bus import ConfigError, HistoryError, jetstream
from schemas import AuditRecord, Namespace
from tools._command_connection import connect_local
from tools._errors import report_failure
from tools._interactions import Interaction, decisions_by_envelope, interactions, verdict
from tools._local import local_settings
from tools._trace_keys import named_key, read_for_key, records_of, traces_named
from tools.audit import query_records
from tools.natsconf import AUDIT_READER

__all__ = ("add_calls_command", "render_calls", "select_records")

_TASK_SHOWN: Final = 200
_SPACE: Final = re.compile(r"\s+")


def select_records(records: Iterable[AuditRecord], key: str) -> list[AuditRecord]:
    """The records of the trace `key` names, of the traces of the session `key` names, or of
    the newest trace (`last`)."""
    kept = list(records)
    return records_of(kept, traces_named(kept, key))


def _task(item: Interaction) -> str:
    text = _SPACE.sub(" ", item.call.objective or item.call.output_preview).strip()
    return text if len(text) <= _TASK_SHOWN else text[: _TASK_SHOWN - 1] + "…"


def render_calls(items: Sequence[Interaction], *, now: datetime | None = None) -> list[str]:
    """Seed 004's lines for `items`: each call when it was made, each outcome when it came
    (seed 004's `Tools used:` under it), and the calls still unanswered at the end.

    `now` tells a call whose deadline passed with no answer (a TIMEOUT) from one still open.
    """
    events: list[tuple[datetime, int, int, list[str]]] = []
    waiting: list[str] = []
    for index, item in enumerate(items):
        call = item.call
        calling = f"{call.requester} calling {call.target} with task: {_task(item)}".rstrip()
        events.append((call.created_at, index, 0, [calling]))
        ended = verdict(item, now)
        if ended is None:
            waiting.append(f"{call.target} has not answered yet")
            continue
        lines = [f"{call.target} returned: {ended}"]
        if item.answer is not None and item.answer.tools_used:
            lines.append(f"  Tools used: {', '.join(item.answer.tools_used)}")
        events.append((ended.at, index, 1, lines))
    events.sort(key=lambda event: event[:3])
    return [line for *_, lines in events for line in lines] + waiting


async def _read(args: argparse.Namespace) -> list[AuditRecord]:
    """The records of the traces `args.key` names, read as the audit reader (like `parley
    trace`), waiting a bounded while for the auditor to record the last trace."""
    settings = local_settings(args.config, AUDIT_READER, namespace=args.namespace)
    nc = await connect_local(settings, AUDIT_READER)
    try:
        js = jetstream(nc, settings)
        ns = Namespace(settings.namespace)
        records, traces = await read_for_key(
            lambda: query_records(js, ns, tenant=args.tenant), args.key
        )
        return records_of(records, traces)
    finally:
        await nc.close()


async def _calls(args: argparse.Namespace) -> int:
    chosen = await _read(args)
    items = interactions(decisions_by_envelope(chosen))
    if not chosen:
        print(
            f"parley calls: the audit history holds no {named_key(args.key)} (check the "
            "id: `parley audit query` lists what it holds)",
            file=sys.stderr,
        )
        return 1
    if not items:
        where = "the trace the last command here started" if args.key == "last" else args.key
        print(
            f"parley calls: no agent called another in {where} (one agent asking another, as "
            f"`parley delegate` and `parley orchestrate` do); `parley trace {args.key}` shows "
            "every decision in it",
            file=sys.stderr,
        )
        return 1
    for line in render_calls(items, now=datetime.now(UTC)):
        print(line)
    return 0


def _command(args: argparse.Namespace) -> int:
    try:
        return asyncio.run(_calls(args))
    except (ConfigError, HistoryError) as exc:
        return report_failure("calls", exc, 2)
    except KeyboardInterrupt:
        return 130


def add_calls_command(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add `calls` to the `parley` command."""
    calls = commands.add_parser(
        "calls", help="list a session's (or a trace's) calls between agents, as seed 004 does"
    )
    calls.add_argument(
        "key",
        metavar="SESSION_TRACE_OR_LAST",
        help="a session id, a trace id, or `last`: the trace the last command here started",
    )
    calls.add_argument("--tenant", help="one tenant's records only (default: every tenant's)")
    calls.add_argument("--config", type=Path, help="TOML settings file (NATS URL, namespace)")
    calls.add_argument("--namespace", help="subject root (default: settings, else parley)")
    calls.set_defaults(func=_command)
