"""`parley audit query|verify` and `parley trace`: reading the audit history.

`query` and `trace` read through server-side subject filters: a query for one profile
subscribes to that profile's audit subject only, so it is never sent another profile's
records. `verify` re-walks a whole audit stream (the live one, or a copy given by name) with
the chain verifier, checking every checkpoint's signature against the given public key and,
when given, the checkpoints the auditor wrote to its log. (`parley tail`, live traffic, is
tools/tail.py.)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import sys
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Final

import msgspec
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from nats.aio.client import Client as NATS
from nats.js import JetStreamContext

from actors.auditor import CHECKPOINT_PROFILE, ChainReport, ChainVerifier
from bus import (
    ConfigError,
    HistoryError,
    KeyFileError,
    jetstream,
    read_history,
    read_history_batches,
    through_elections,
)
from bus import load_public_key as bus_load_public_key
from schemas import (
    AuditRecord,
    Namespace,
    check_token,
    key_id,
)
from tools._command_connection import connect_local
from tools._errors import refusal_seen, report_failure
from tools._local import LOCAL_AUDIT_KEY, local_settings
from tools._terminal_text import terminal_safe
from tools._trace_keys import named_key, read_for_key, records_of
from tools._tracetree import render_trace
from tools.natsconf import AUDIT_READER

__all__ = (
    "add_audit_commands",
    "query_records",
    "read_off_box",
    "verify_stream",
)

_record_decoder = msgspec.json.Decoder(AuditRecord)
_DURATION = re.compile(r"(\d+)([smhd])")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


class AuditToolError(Exception):
    """Bad arguments or files for the audit tools."""


def load_public_key(path: Path) -> Ed25519PublicKey:
    """The auditor's checkpoint public key (PEM)."""
    try:
        return bus_load_public_key(path)
    except KeyFileError as exc:
        raise AuditToolError(str(exc)) from None


_CHILD_PREFIX: Final = re.compile(r"\[([\w.-]+)\] ")
"""How `parley up` names the child a line of its output came from."""


def read_off_box(lines: Iterable[str]) -> list[bytes]:
    """Signed checkpoints from the auditor's log lines (or from bare DSSE JSON lines), as
    the auditor wrote them or as `parley up` shows them (`[auditor] {...}`): an operator who
    keeps `parley up`'s output as the off-box copy gave a file this read nothing of."""
    found = []
    for raw_line in lines:
        named = _CHILD_PREFIX.match(raw_line)
        if named is not None and not named.group(1).startswith("auditor"):
            continue  # another child's line: an agent's own program may print anything
        line = raw_line[named.end() :] if named is not None else raw_line
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if isinstance(entry, dict) and isinstance(entry.get("checkpoint"), str):
            found.append(entry["checkpoint"].encode())
        elif isinstance(entry, dict) and "payloadType" in entry:
            found.append(line.strip().encode())
    return found


async def verify_stream(
    js: JetStreamContext,
    stream: str,
    *,
    trusted: dict[str, Ed25519PublicKey],
    off_box: Iterable[bytes] = (),
    strict: bool = False,
    refused: asyncio.Event | None = None,
) -> ChainReport:
    """Walk every message of `stream` through the chain verifier, streaming.

    The history is read a batch at a time (the next one already requested while this one is
    checked), and the verifier keeps only the chain's head and counters: memory stays flat
    however long the stream (docs/audit.md, "Verifying at scale"). A stream with an age limit
    (`retention.audit_s`) may have lost its oldest records: the walk then begins at the first
    one kept (docs/audit.md, "Retention").
    """
    # Answered only by the stream's leader: on a cluster, asked again through an election,
    # unless the broker refused it (`refused`: a single server's refusal was waited out 50 s).
    info = await through_elections(
        lambda: js.stream_info(stream), f"the {stream} stream's info", stop=refused
    )
    retained = bool(info.config.max_age)
    verifier = ChainVerifier(trusted=trusted, off_box=off_box, strict=strict, retained=retained)
    feed = verifier.feed
    async for batch in read_history_batches(js, stream):
        for message in batch:
            feed(message.seq, message.subject, message.data)
    return verifier.finish()


def parse_since(text: str, now: datetime | None = None) -> datetime:
    """`--since`: an RFC 3339 time, or a duration back from now (`90s`, `15m`, `2h`, `1d`)."""
    match = _DURATION.fullmatch(text)
    if match:
        return (now or datetime.now(UTC)) - timedelta(
            seconds=int(match.group(1)) * _UNITS[match.group(2)]
        )
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        raise AuditToolError(f"--since {text!r}: give an RFC 3339 time or 30s/15m/2h/1d") from None
    return when if when.tzinfo else when.replace(tzinfo=UTC)


async def query_records(
    js: JetStreamContext,
    ns: Namespace,
    *,
    tenant: str | None = None,
    profile: str | None = None,
    trace: str | None = None,
    session: str | None = None,
    since: datetime | None = None,
) -> list[AuditRecord]:
    """Audit records of `tenant` (every tenant's when None; one profile's only, when given),
    oldest first.

    Tenant and profile become the read's subject filter, so the server sends nothing else.
    Every tenant is the default: a local system has one, named in its gate's settings
    (`demo` for the shipped ones), and a reader that guessed `default` found nothing.
    """
    subject = (
        f"{ns.root}.audit.{check_token(tenant, 'tenant') if tenant else '*'}."
        f"{check_token(profile, 'profile') if profile else '*'}"
    )
    records = []
    async for message in read_history(js, ns.stream("audit"), subject=subject):
        if message.subject.endswith("." + CHECKPOINT_PROFILE):
            continue
        try:
            record = _record_decoder.decode(message.data)
        except msgspec.DecodeError:
            continue  # `parley audit verify` reports it
        if trace and record.trace_id != trace:
            continue
        if session and record.session_id != session:
            continue
        if since and record.created_at < since:
            continue
        records.append(record)
    return records


def _row(record: AuditRecord) -> str:
    when = record.created_at.strftime("%Y-%m-%dT%H:%M:%S")
    code = record.decision_code or "-"
    what = record.objective or record.output_preview or record.failure_reason or ""
    # One record, one line: the excerpt's line breaks and tabs folded, what a model may have
    # written to move a terminal's cursor shown as escapes.
    what = terminal_safe(" ".join(what.split()))
    return (
        f"#{record.chain_index:<6} {when}  {record.profile:<12} {record.fact:<13} "
        f"{record.requester or '-'} -> {record.target or '-'}  {record.status} {code}  "
        f"{record.task}  trace {record.trace_id[:13]}  {what[:60]}"
    )


async def _open(args: argparse.Namespace) -> tuple[NATS, Namespace, JetStreamContext]:
    """Connect as the audit reader (tools/_local.py says how the system is found)."""
    settings = local_settings(args.config, AUDIT_READER, namespace=args.namespace)
    nc = await connect_local(settings, AUDIT_READER)
    return nc, Namespace(settings.namespace), jetstream(nc, settings)


async def _query(args: argparse.Namespace) -> int:
    nc, ns, js = await _open(args)
    try:
        records = await query_records(
            js,
            ns,
            tenant=args.tenant,
            profile=args.profile,
            trace=args.trace,
            session=args.session,
            since=parse_since(args.since) if args.since else None,
        )
    finally:
        await nc.close()
    for record in records:
        print(msgspec.json.encode(record).decode() if args.json else _row(record))
    if not records:  # said on standard error: the listing itself stays empty for a script
        print("parley audit: no records match", file=sys.stderr)
    return 0


async def _verify(args: argparse.Namespace) -> int:
    if not args.key.exists() and args.key == LOCAL_AUDIT_KEY:
        raise AuditToolError(
            f"no auditor's key at {LOCAL_AUDIT_KEY} (the local system's, made by `parley up`): "
            "name the auditor's public key with --key"
        )
    public = load_public_key(args.key)
    off_box: list[bytes] = []
    for path in args.checkpoints or ():
        try:
            text = await asyncio.to_thread(Path(path).read_text)
        except OSError as exc:
            raise AuditToolError(f"cannot read {path}: {exc}") from None
        found = read_off_box(text.splitlines())
        if not found:  # compared against nothing, the chain's end would go unchecked, unsaid
            raise AuditToolError(
                f"{path} holds no checkpoint: give the auditor's log, or `parley up`'s output "
                "(their `checkpoint` lines)"
            )
        off_box += found
    nc, ns, js = await _open(args)
    try:
        report = await verify_stream(
            js,
            args.stream or ns.stream("audit"),
            trusted={key_id(public): public},
            off_box=off_box,
            strict=args.strict,
            refused=refusal_seen(),
        )
    finally:
        await nc.close()
    summary = (
        f"{_counted(report.records, 'record')}, {_counted(report.checkpoints, 'checkpoint')}, "
        f"{report.covered} pinned by a signed checkpoint"
    )
    if off_box:
        summary += f", {_counted(len(off_box), 'off-box checkpoint')} compared"
    if args.json:
        print(json.dumps({**report.__dict__, "ok": report.ok, "off_box": len(off_box)}))
        return 0 if report.ok else 1
    if report.ok:
        print(f"audit chain intact: {summary}")
        if report.expired:
            print(f"  note: records 1..{report.expired} aged out (the stream's retention)")
        for note in report.unvouched:
            print(f"  note: {note}")
    else:
        print(f"audit chain BROKEN at seq {report.first_bad_seq}: {report.problem} ({summary})")
    if report.alerts:  # beside the chain: they never break it, and are never hidden either
        print(f"  ALERT: the auditor recorded {report.alerts} foreign write(s) in the chain")
    for foreign in report.foreign:
        print(f"  ALERT: foreign message, not part of the chain: {foreign}")
    if report.foreign_total > len(report.foreign):
        print(f"  ALERT: {report.foreign_total - len(report.foreign)} more foreign messages")
    return 0 if report.ok else 1


async def _trace(args: argparse.Namespace) -> int:
    nc, ns, js = await _open(args)
    try:
        records, traces = await read_for_key(
            lambda: query_records(js, ns, tenant=args.tenant), args.key
        )
    finally:
        await nc.close()
    if not traces:
        print(
            f"parley trace: the audit history holds no {named_key(args.key)} (`parley audit "
            "query` lists what it holds)",
            file=sys.stderr,
        )
        return 1
    now = datetime.now(UTC)
    for index, trace in enumerate(traces):
        if index:
            print()
        for line in render_trace(trace, records_of(records, [trace]), now=now):
            print(line)
    return 0


def _counted(count: int, noun: str) -> str:
    """`1 checkpoint`, `2 checkpoints`."""
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


def _runner(coro: Any) -> Any:
    def run(args: argparse.Namespace) -> int:
        try:
            code: int = asyncio.run(coro(args))
        except (AuditToolError, ConfigError, HistoryError) as exc:
            return report_failure(args.command, exc, 2)
        # A timeout escapes: it is a refusal by the broker or a server that does not answer,
        # which tools/_errors.py tells apart.
        except KeyboardInterrupt:
            return 0
        return code

    return run


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", type=Path, help="TOML settings file (NATS URL, namespace)")
    parser.add_argument("--namespace", help="subject root (default: settings, else parley)")


def add_audit_commands(commands: Any) -> None:
    """Register `audit` and `trace` on the `parley` parser's subcommands."""
    audit = commands.add_parser("audit", help="query and verify the audit history")
    verbs = audit.add_subparsers(dest="audit_command", required=True)

    query = verbs.add_parser("query", help="print audit records (one profile's, when given)")
    _common(query)
    query.add_argument("--tenant", help="one tenant's records only (default: every tenant's)")
    query.add_argument("--profile", help="only this profile's records (its subject only)")
    query.add_argument("--trace", help="only records of this trace id")
    query.add_argument("--session", help="only records of this session id")
    query.add_argument("--since", help="RFC 3339 time, or 30s / 15m / 2h / 1d ago")
    query.add_argument("--json", action="store_true", help="one JSON record per line")
    query.set_defaults(func=_runner(_query))

    verify = verbs.add_parser("verify", help="re-walk the chain and the signed checkpoints")
    _common(verify)
    verify.add_argument(
        "--key",
        type=Path,
        default=LOCAL_AUDIT_KEY,
        help=f"auditor's public key (PEM; default: {LOCAL_AUDIT_KEY}, the local system's)",
    )
    verify.add_argument("--stream", help="verify this stream (a copy) instead of PARLEY_AUDIT")
    verify.add_argument(
        "--checkpoints", action="append", help="auditor log file with off-box checkpoints"
    )
    verify.add_argument(
        "--strict", action="store_true", help="every record must be pinned by a checkpoint"
    )
    verify.add_argument("--json", action="store_true", help="print the report as JSON")
    verify.set_defaults(func=_runner(_verify))

    trace = commands.add_parser("trace", help="draw the causal tree of a trace")
    _common(trace)
    trace.add_argument(
        "key",
        metavar="TRACE_SESSION_OR_LAST",
        help="a trace id, a session id (each of its traces), or `last`: the trace the last "
        "command here started",
    )
    trace.add_argument("--tenant", help="look in one tenant's records only (default: all)")
    trace.set_defaults(func=_runner(_trace))
