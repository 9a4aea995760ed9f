"""`parley approvals approve|reject ID`: a person decides a tool request held for them.

A tool request whose scope requires approval is held by the tool runtime, and the gate tells
the person the trace works for on their session's timeline (`approval_requested`, which
`parley say` and `parley collab` print with the two commands to decide it). This command
submits the person's decision: a `control` (approve or reject) naming the approval id, to the
tool runtime, which applies it only if it comes from that same person (docs/tools.md,
"Approvals"). Then it follows the session's timeline until the step ends, and prints how.

Exit codes: 0 the decision was applied and the step ended, 1 the gate refused the decision or
nothing came of it in time, 2 invalid arguments or configuration, 3 NATS cannot be reached.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
from pathlib import Path
from typing import Final

from nats.aio.msg import Msg

from schemas import (
    Control,
    Decision,
    DecodeError,
    Namespace,
    SessionEvent,
    decode_envelope,
    new_id,
    utc_now,
)
from tools._local import local_settings
from tools._waiting import connect_watched, run_command, submit_as, waited

__all__ = ("add_approvals_command",)

PERSON: Final = "cli"
_WAIT_S: Final = 30.0
"""How long to follow the session for the step's end after the decision is stored."""


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
    news: asyncio.Queue[SessionEvent | Decision] = asyncio.Queue()

    async def on_message(raw: Msg) -> None:
        with contextlib.suppress(DecodeError):
            envelope = decode_envelope(raw.data)
            if isinstance(envelope, Decision) and envelope.envelope_id == control.id:
                news.put_nowait(envelope)
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
            except TimeoutError:
                print(
                    f"the gate admitted the decision; step {args.approval_id} has not ended "
                    f"within {args.wait:.0f} s (decided already, expired, or not yours to decide)"
                )
                return 1
            if isinstance(item, Decision):
                if not item.allowed:
                    print(f"refused: {item.code}: {item.message}")
                    return 1
                continue
            payload = item.payload
            status = str(payload.get("status", "")).upper()
            reason = payload.get("reason")
            print(f"{args.decision}d: {payload.get('tool', 'the tool')} {status}", end="")
            print(f" ({reason})" if reason else "")
            return 0
    finally:
        await watch.close(nc)


def add_approvals_command(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    approvals = commands.add_parser(
        "approvals", help="approve or reject a tool request held for you"
    )
    verbs = approvals.add_subparsers(dest="decision", required=True)
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
        parser.set_defaults(
            func=lambda args: run_command("approvals", lambda: _decide(args)), command="approvals"
        )
