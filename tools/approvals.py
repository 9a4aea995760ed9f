"""`parley approvals list|show|approve|reject`: a person's tool requests held for them.

`list` prints the requests waiting for the person's decision, `show ID` one of them in full
(its title, what it does, its risk, the agent, the session and task, its digest and when it
expires), both read as the person from the list the tool runtime keeps for them
(actors/tools/_pending.py: a key the broker lets that person alone read). The list says what
waits; the runtime's own record decides, so a request decided a moment ago may still show.

A tool request whose scope requires approval is held by the tool runtime, and the gate tells
the person the trace works for on their session's timeline (`approval_requested`, which
`parley say` and `parley collab` print with the two commands to decide it). This command
submits the person's decision: a `control` (approve or reject) naming the approval id, to the
tool runtime, which applies it only if it comes from that same person (docs/tools.md,
"Approvals"). Then it follows the session's timeline until the step ends, and prints how. A
decision the runtime cannot apply it answers on the same timeline, at once (actors/tools/
_decisions.py): `APPROVAL_NOT_FOUND` (no request of yours is held by that id: mistyped, or
someone else's) or `APPROVAL_ALREADY_DECIDED` (approved, rejected, expired or canceled with its
session before, and how).
Nothing is looked up before the decision is sent: the runtime's record decides.

Exit codes: 0 the decision was applied and the step ended (`list`, `show`: read), 1 the gate
refused the decision, the runtime could not apply it, or nothing came of it in time (`show`:
no such request waits), 2 invalid arguments or configuration, 3 NATS cannot be reached.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Final

from nats.aio.client import Client as NATS
from nats.aio.msg import Msg

from actors.tools import PendingApproval, decode_pending
from schemas import (
    Control,
    Decision,
    DecodeError,
    Error,
    Namespace,
    SessionEvent,
    decode_envelope,
    new_id,
    utc_now,
)
from tools._local import local_settings
from tools._session_lines import decision_lines
from tools._waiting import Watch, connect_watched, run_command, submit_as, waited

__all__ = ("add_approvals_command",)

PERSON: Final = "cli"
_WAIT_S: Final = 30.0
"""How long to follow the session for the step's end after the decision is stored."""
_READ_S: Final = 10.0


async def _decide(args: argparse.Namespace) -> int:
    settings = local_settings(args.config, PERSON)
    ns = Namespace(settings.namespace)
    person = settings.actor_id or PERSON
    control = Control(
        id=new_id(),
        created_at=utc_now(),
        action="approve" if args.decision == "approve" else "reject",
        session_id=args.session,
        target="tools",
        approval_id=args.approval_id,
        reason=args.reason,
    )
    news: asyncio.Queue[SessionEvent | Decision | Error] = asyncio.Queue()

    async def on_message(raw: Msg) -> None:
        with contextlib.suppress(DecodeError):
            envelope = decode_envelope(raw.data)
            if isinstance(envelope, Decision) and envelope.envelope_id == control.id:
                news.put_nowait(envelope)
            elif isinstance(envelope, Error) and envelope.cause_id == control.id:
                news.put_nowait(envelope)  # the runtime could not apply the decision
            elif (
                isinstance(envelope, SessionEvent)
                and envelope.event_type == "tool_completed"
                and envelope.payload.get("call_id") == args.approval_id
            ):
                news.put_nowait(envelope)

    nc, watch = await connect_watched(settings, person)
    try:
        await nc.subscribe(ns.events(person, args.session), cb=on_message)
        await nc.subscribe(ns.decisions(person), cb=on_message)
        await waited(nc.flush(), None, watch)
        await waited(submit_as(nc, ns, person, control), None, watch)
        while True:
            try:
                item = await waited(news.get(), args.wait, watch, what="the tool's result")
            except asyncio.CancelledError:  # Ctrl-C: the decision is stored; say so
                print(
                    f"interrupted: the decision on {args.approval_id} was sent, and stands; "
                    "`parley approvals list` shows whether the request still waits",
                    file=sys.stderr,
                    flush=True,
                )
                raise
            except TimeoutError:
                print(
                    f"the gate admitted the decision; step {args.approval_id} has not ended "
                    f"within {args.wait:.0f} s, nor did the tool runtime answer (is it running? "
                    f"was the request made in session {args.session}?)"
                )
                return 1
            if isinstance(item, Decision):
                if not item.allowed:
                    print(f"refused: {item.code}: {item.message}")
                    return 1
                continue
            if isinstance(item, Error):
                print(f"not applied: {item.code}: {item.message}")
                return 1
            payload = item.payload
            status = str(payload.get("status", "")).upper()
            reason = payload.get("reason")
            done = {"approve": "approved", "reject": "rejected"}[args.decision]
            print(f"{done}: {payload.get('tool', 'the tool')} {status}", end="")
            print(f" ({reason})" if reason else "")
            return 0
    finally:
        await watch.close(nc)


async def pending_of(
    nc: NATS, api_prefix: str, ns: Namespace, person: str, watch: Watch
) -> list[PendingApproval]:
    """The person's list, by a direct get of its one key (no stream info, no consumer)."""
    runs = ns.bucket("tool_runs")
    subject = f"{api_prefix}.DIRECT.GET.KV_{runs}.$KV.{runs}.pending.{person}"
    answer = await waited(nc.request(subject, b"", timeout=_READ_S), None, watch)
    headers = answer.headers or {}
    if headers.get("Status") == "404" or headers.get("KV-Operation") in ("DEL", "PURGE"):
        return []
    if headers.get("Status"):
        raise ConnectionError(f"the list could not be read: {headers.get('Description')}")
    return decode_pending(answer.data)


def _line(item: PendingApproval) -> str:
    return f"{item.approval_id}  {item.title} (risk {item.risk_level}): {item.action_summary}"


async def _read(args: argparse.Namespace) -> int:
    settings = local_settings(args.config, PERSON)
    ns = Namespace(settings.namespace)
    person = settings.actor_id or PERSON
    nc, watch = await connect_watched(settings, person)
    try:
        items = await pending_of(nc, settings.js_api_prefix, ns, person, watch)
    finally:
        await watch.close(nc)
    now_ms = int(utc_now().timestamp() * 1000)
    items = [item for item in items if item.expires_ms > now_ms]
    if args.decision == "list":
        for item in items:
            print(_line(item))
        print(f"{len(items)} awaiting your approval")
        return 0
    found = [item for item in items if item.approval_id == args.approval_id]
    if not found:
        print(
            f"parley approvals show: no tool request awaits your approval as "
            f"{args.approval_id}: `parley approvals list` lists those that do",
            file=sys.stderr,
        )
        return 1
    item = found[0]
    expires = datetime.fromtimestamp(item.expires_ms / 1000, UTC)
    print(_line(item))
    for name, value in (
        ("agent", item.agent),
        ("capability", item.capability),
        ("session", item.session_id),
        ("task", item.task_id),
        ("digest", item.digest),
        ("expires", f"{expires:%Y-%m-%d %H:%M:%S} UTC"),
    ):
        print(f"  {name}: {value}")
    print(decision_lines(item.approval_id, item.session_id))
    return 0


def add_approvals_command(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    approvals = commands.add_parser(
        "approvals", help="list, show, approve or reject the tool requests held for you"
    )
    verbs = approvals.add_subparsers(
        dest="decision", required=True, metavar="{list,show,approve,reject}"
    )
    for verb, what in (("list", "the requests awaiting you"), ("show", "one of them in full")):
        reader = verbs.add_parser(verb, help=f"print {what}")
        if verb == "show":
            reader.add_argument("approval_id", help="its approval id")
        reader.add_argument("--config", type=Path, default=None, help="settings file")
        reader.set_defaults(
            func=lambda args: run_command("approvals", lambda: _read(args)), command="approvals"
        )
    for verb in ("approve", "reject"):
        parser = verbs.add_parser(verb, help=f"{verb} a held tool request")
        parser.add_argument("approval_id", help="the approval id `parley say` printed")
        parser.add_argument("--session", required=True, help="the session it was asked in")
        parser.add_argument("--reason", default="", help="why, for the audit")
        parser.add_argument(
            "--wait",
            type=float,
            default=_WAIT_S,
            metavar="SECONDS",
            help=f"how long to follow the session for the step's end (default {_WAIT_S:.0f})",
        )
        parser.add_argument("--config", type=Path, default=None, help="settings file")
        parser.set_defaults(func=_decide_command, command="approvals")


def _decide_command(args: argparse.Namespace) -> int:
    """Refuse a wait that cannot be waited before anything is sent (exit 2), else decide."""
    if not args.wait > 0:  # NaN too
        print(
            f"parley approvals: --wait must be more than 0 seconds, got {args.wait:g}",
            file=sys.stderr,
        )
        return 2
    return run_command("approvals", lambda: _decide(args))
