"""`parley tail [SUBJECT]`: the live traffic of a namespace, each envelope decoded (like `nats
sub`, as the audit reader, whose grants cover every subject it may watch)."""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path
from typing import Any

import msgspec
import nats.errors
from nats.aio.msg import Msg

from bus import ConfigError
from schemas import DecodeError, Namespace, decode_envelope
from tools._command_connection import connect_local
from tools._errors import refusal_seen, report_failure
from tools._local import local_settings
from tools.natsconf import AUDIT_READER

__all__ = ("NotASubject", "SubscriptionRefused", "add_tail_command", "check_subject")


class NotASubject(ValueError):
    """The subject given cannot be subscribed to (spaces, empty tokens)."""


class SubscriptionRefused(nats.errors.Error):
    """The broker refused the subscription (said as its refusal: tools/_errors.py)."""


def _describe(msg: Msg) -> str:
    headers = msg.headers or {}
    shown = " ".join(f"{k}={v}" for k, v in sorted(headers.items()) if k.startswith("Parley-"))
    try:
        envelope: Any = decode_envelope(msg.data)
        body = msgspec.json.encode(envelope).decode()
        kind = str(envelope.__struct_config__.tag)
    except DecodeError:
        kind, body = "raw", msg.data[:500].decode("utf-8", "replace")
    return f"[{msg.subject}] {kind} {shown}\n  {body}"


def check_subject(subject: str) -> None:
    """Refuse a subject no subscription can have, before connecting (nats-py raised its own
    `BadSubjectError` from deep in the subscription, said as an unexpected error).

    Raises:
        NotASubject: it has spaces, an empty token, or `>` before its last token.
    """
    tokens = subject.split(".")
    if any(c.isspace() for c in subject) or "" in tokens or ">" in tokens[:-1]:
        raise NotASubject(
            f"{subject!r} is not a subject: dot-separated tokens without spaces, `*` for one "
            "token, `>` for the rest (`parley.events.>`)"
        )


async def _tail(args: argparse.Namespace) -> int:
    if args.subject is not None:
        check_subject(args.subject)
    settings = local_settings(args.config, AUDIT_READER, namespace=args.namespace)
    nc = await connect_local(settings, AUDIT_READER)
    subject = args.subject or f"{Namespace(settings.namespace).root}.>"
    done = asyncio.Event()
    seen = 0

    async def on_msg(msg: Msg) -> None:
        nonlocal seen
        print(_describe(msg), flush=True)
        seen += 1
        if args.count and seen >= args.count:
            done.set()

    refused = refusal_seen()
    try:
        await nc.subscribe(subject, cb=on_msg)
        await nc.flush()
        print(f"tailing {subject} (Ctrl-C to stop)", file=sys.stderr, flush=True)
        ended = [asyncio.ensure_future(done.wait())]
        if refused is not None:  # a subscription the broker refuses: said, not waited on
            ended.append(asyncio.ensure_future(refused.wait()))
        try:
            await asyncio.wait(ended, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiting in ended:
                waiting.cancel()
    finally:
        await nc.close()
    if refused is not None and refused.is_set() and not done.is_set():
        raise SubscriptionRefused(subject)
    return 0


def _run(args: argparse.Namespace) -> int:
    try:
        return asyncio.run(_tail(args))
    except (NotASubject, ConfigError, SubscriptionRefused) as exc:
        return report_failure("tail", exc, 2)
    except KeyboardInterrupt:
        return 0


def add_tail_command(commands: Any) -> None:
    """Register `tail` on the `parley` parser's subcommands."""
    tail = commands.add_parser("tail", help="print live traffic decoded (like `nats sub`)")
    tail.add_argument("--config", type=Path, help="TOML settings file (NATS URL, namespace)")
    tail.add_argument("--namespace", help="subject root (default: settings, else parley)")
    tail.add_argument("subject", nargs="?", help="subject filter (default: <namespace>.>)")
    tail.add_argument("--count", type=int, default=0, help="stop after this many messages")
    tail.set_defaults(func=_run)
