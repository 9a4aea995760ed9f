"""`parley collab` and `parley say`: a person's side of a session, from a terminal.

The command submits a human message on `parley.submit.cli` (a root: its trace id is its own
id), then follows `parley.events.<person>.<session>` live and prints each turn as it happens. The
session id is chosen here and the subscriptions are confirmed by the server before the
message is submitted, so not one event can be missed while the connection holds. A person's
account imports the timelines and its own decisions as read-only streams: it creates no
consumer, since a consumer's creator chooses where the server writes what it reads.

Ctrl-C sends Stop (a `control` envelope) and waits for the router to confirm; a second
Ctrl-C leaves at once. A refusal by the gate (its decision on `parley.decisions.cli`) ends
the command with the gate's reason.

The wait follows the session's own clock: each call the router makes carries the moment the
session ends at the latest (its deadline plus the sweep's margin, `ends_by`), and the command
waits until then plus `_SLACK_S` before saying what it was waiting for and giving up;
`--timeout` replaces that with a fixed silence.

Exit codes: 0 the session completed, 1 it failed, was refused or went silent, 2 the arguments
(or the configuration) are invalid, 130 it was canceled. Arguments are checked against the
envelope's own schema before anything is sent: a `--max-rounds` out of range is named with its
limits and value at once, instead of being dead-lettered by the gate while the command waits.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Final, TextIO

import msgspec
import nats
from nats.aio.client import Client as NATS
from nats.aio.msg import Msg
from nats.js import JetStreamContext

from bus import ConfigError, TraceHeaders
from schemas import (
    Control,
    Decision,
    DecodeError,
    Error,
    HumanMessage,
    Namespace,
    SessionEvent,
    decode_envelope,
    encode,
    new_id,
    utc_now,
)
from tools._interactions import seconds
from tools._local import connect_local, local_settings

__all__ = ("SessionEnd", "add_collab_commands", "follow_session")

"""Where `parley up` writes its embedded server's URL for the commands run beside it."""

SENDER: Final = "cli"
_OPENING_S: Final = 60.0
"""How long to wait for a session to open (its first call names its own deadline)."""
_SLACK_S: Final = 10.0
"""Past a session's `ends_by`: the router's sweep runs every few seconds."""
_END = {"session_completed": 0, "session_failed": 1, "session_canceled": 130}


@dataclass(frozen=True)
class SessionEnd:
    """How a followed session ended: its last event (None if it never ended) and exit code."""

    event: SessionEvent | None
    code: int
    events: tuple[SessionEvent, ...]


def render(event: SessionEvent, max_rounds: int) -> str | None:
    """One line (or a few) for the terminal, or None for events not worth a line."""
    payload = event.payload
    match event.event_type:
        case "session_created":
            who = ", ".join(str(p) for p in payload.get("participants", []))
            return f"session {event.session_id}: {who}, up to {max_rounds} rounds"
        case "step_completed":
            head = f"[{event.speaker} · {event.round}/{max_rounds}] {payload.get('message', '')}"
            handoff = payload.get("handoff")
            if isinstance(handoff, dict):
                head += f"\n    → {handoff.get('to')}: {handoff.get('task')}"
            return head
        case "tool_requested" | "tool_completed" if payload.get("call_id"):
            return call_line(event)
        case "session_completed" | "session_failed" | "session_canceled":
            lines = [f"stopped: {event.stop_reason} (round {event.round})"]
            if payload.get("code"):
                lines.append(f"    error: {payload['code']}: {payload.get('message', '')}")
            elif payload.get("message"):
                lines.append(f"    message: {payload['message']}")
            if payload.get("warning"):
                lines.append(f"    warning: {payload['warning']}")
            return "\n".join(lines)
    return None


async def follow_session(
    nc: NATS,
    ns: Namespace,
    msg: HumanMessage,
    *,
    out: TextIO,
    timeout: float | None = None,
    stop_requested: asyncio.Event | None = None,
    on_event: Callable[[SessionEvent], None] | None = None,
    person: str = SENDER,
) -> SessionEnd:
    """Submit `msg` and print its session's events until it ends, or until the session's own
    `ends_by` (plus slack) passes without it ending, or `timeout` of silence if given.

    Setting `stop_requested` submits a Stop for the session; the function still waits for the
    router's `session_canceled`.
    """
    assert msg.session_id is not None  # noqa: S101 - callers always choose one
    js = nc.jetstream()
    news: asyncio.Queue[SessionEvent | Decision | Error | None] = asyncio.Queue()

    async def on_message(raw: Msg) -> None:
        try:
            envelope = decode_envelope(raw.data)
        except DecodeError:
            return  # not ours to judge; the timeline stays readable
        if isinstance(envelope, SessionEvent | Error):
            news.put_nowait(envelope)
        elif isinstance(envelope, Decision) and envelope.envelope_id == msg.id:
            news.put_nowait(envelope)

    subs = [
        await nc.subscribe(ns.events(person, msg.session_id), cb=on_message),
        await nc.subscribe(ns.decisions(person), cb=on_message),
    ]
    await nc.flush()  # the server has both subscriptions before anything is submitted
    seen: list[SessionEvent] = []
    max_rounds = msg.max_rounds if msg.mode == "collaborate" else 1
    waiting_for, ends_by = "the router to open the session", None
    async with asyncio.TaskGroup() as tasks:
        if stop_requested is not None:
            stopper = tasks.create_task(_on_stop(stop_requested, news))
        try:
            await _submit(js, ns, msg, person)
            while True:
                wait_s = timeout if timeout is not None else _wait_s(ends_by)
                try:
                    item = await asyncio.wait_for(news.get(), wait_s)
                except TimeoutError:
                    print(
                        f"no news from the session for {wait_s:.0f} s: gave up waiting for "
                        f"{waiting_for}",
                        file=out,
                        flush=True,
                    )
                    return SessionEnd(None, 1, tuple(seen))
                if item is None:  # Ctrl-C: ask the router to stop, and keep following
                    await _submit(js, ns, _stop(msg), person)
                    print("stop requested", file=out, flush=True)
                    continue
                if isinstance(item, Decision):
                    if item.allowed:
                        continue
                    print(f"refused by the gate: {item.code}: {item.message}", file=out)
                    return SessionEnd(None, 1, tuple(seen))
                if isinstance(item, Error):  # the router refused what we sent; its end follows
                    print(f"refused: {item.code}: {item.message}", file=out, flush=True)
                    continue
                seen.append(item)
                if on_event is not None:
                    on_event(item)
                if item.event_type == "session_created":
                    max_rounds = int(item.payload.get("max_rounds", max_rounds))
                if item.event_type == "step_started":
                    ends_by = _when(item.payload.get("ends_by"))
                    due = f", due by {ends_by:%H:%M:%S} UTC" if ends_by else ""
                    waiting_for = f"{item.speaker}'s answer in round {item.round}{due}"
                line = render(item, max_rounds)
                if line is not None:
                    print(line, file=out, flush=True)
                if item.event_type in _END:
                    return SessionEnd(item, _END[item.event_type], tuple(seen))
        finally:
            if stop_requested is not None:
                stopper.cancel()
            for sub in subs:
                await sub.unsubscribe()


def call_line(event: SessionEvent) -> str | None:
    """Seed 004's lines for a call between agents the gate told the timeline of
    (actors/gate/_timeline.py): `gpt calling coder with task: …` when it is made (and
    `coder returned: REFUSED (…)` if the gate refused it), `coder returned: SUCCESS (812
    tokens, 2s)` when its answer comes, with the tools it used under it."""
    payload = event.payload
    status = str(payload.get("status", "")).upper()
    reason = str(payload.get("reason", ""))
    if event.event_type == "tool_requested":
        target = payload.get("target", "?")
        line = f"{payload.get('caller', '?')} calling {target} with task: {payload.get('task', '')}"
        return f"{line}\n{target} returned: REFUSED ({reason})" if status == "REFUSED" else line
    figures = []
    if isinstance(payload.get("tokens"), int):
        figures.append(f"{payload['tokens']} tokens")
    if isinstance(payload.get("duration_ms"), int):
        figures.append(seconds(payload["duration_ms"]))
    detail = ", ".join(figures)
    if status != "SUCCESS" and reason:
        detail = f"{detail}; {reason}" if detail else reason
    line = f"{payload.get('agent', '?')} returned: {status}" + (f" ({detail})" if detail else "")
    used = payload.get("tools_used")
    if isinstance(used, list) and used:
        line += f"\n  Tools used: {', '.join(str(name) for name in used)}"
    return line


def _when(value: object) -> datetime | None:
    try:
        return datetime.fromisoformat(value) if isinstance(value, str) else None
    except ValueError:
        return None


def _wait_s(ends_by: datetime | None) -> float:
    """How long to wait for the next event: to the session's `ends_by` plus slack."""
    if ends_by is None:
        return _OPENING_S
    return max((ends_by - utc_now()).total_seconds(), 0.0) + _SLACK_S


async def _on_stop(
    stop_requested: asyncio.Event, news: asyncio.Queue[SessionEvent | Decision | Error | None]
) -> None:
    await stop_requested.wait()
    news.put_nowait(None)


async def _submit(
    js: JetStreamContext, ns: Namespace, envelope: HumanMessage | Control, person: str
) -> None:
    """Submit as the person: a root envelope, whose trace is its own id."""
    headers = TraceHeaders(trace_id=envelope.id, origin=person).to_headers(envelope.id)
    await js.publish(ns.submit(person), encode(envelope), headers=headers)


def _stop(msg: HumanMessage) -> Control:
    assert msg.session_id is not None  # noqa: S101
    return Control(
        id=new_id(),
        created_at=utc_now(),
        action="stop",
        session_id=msg.session_id,
        user_id=msg.user_id,
        reason="Ctrl-C",
    )


def human_message(args: argparse.Namespace, *, single: bool) -> HumanMessage:
    """The message a `collab` or `say` command line asks for."""
    if single:
        target = args.agent.removeprefix("@")
        return HumanMessage(
            id=new_id(),
            created_at=utc_now(),
            text=" ".join(args.text),
            call_id=new_id(),
            user_id=args.user,
            mode="single",
            participants=(target,),
            first_speaker=target,
            max_rounds=1,
            session_id=new_id(),
        )
    agents = tuple(a.strip() for a in args.agents.split(",") if a.strip())
    return HumanMessage(
        id=new_id(),
        created_at=utc_now(),
        text=" ".join(args.goal),
        call_id=new_id(),
        user_id=args.user,
        mode="collaborate",
        participants=agents,
        first_speaker=args.first or agents[0],
        max_rounds=args.max_rounds,
        session_id=new_id(),
    )


async def _run(args: argparse.Namespace, *, single: bool) -> int:
    settings = local_settings(args.config, SENDER)
    ns = Namespace(settings.namespace)
    msg = human_message(args, single=single)
    stop_requested = asyncio.Event()
    loop = asyncio.get_running_loop()
    main = asyncio.current_task()

    def on_interrupt() -> None:
        if stop_requested.is_set() and main is not None:
            main.cancel()  # the second Ctrl-C: leave without waiting for the router
        stop_requested.set()

    loop.add_signal_handler(signal.SIGINT, on_interrupt)
    person = settings.actor_id or SENDER  # one person, one principal (its own settings)
    nc = await connect_local(settings, person)
    try:
        end = await follow_session(
            nc,
            ns,
            msg,
            out=sys.stdout,
            timeout=args.timeout,
            stop_requested=stop_requested,
            person=person,
        )
    except asyncio.CancelledError:
        return 130
    finally:
        await nc.close()
    return end.code


def _int_limits(struct: type[msgspec.Struct], name: str) -> tuple[int | None, int | None]:
    """The inclusive bounds the schema puts on an integer field (None: unbounded)."""
    info = msgspec.inspect.type_info(struct)
    assert isinstance(info, msgspec.inspect.StructType)  # noqa: S101 - a Struct's info
    for field in info.fields:
        kind = field.type
        if field.name == name and isinstance(kind, msgspec.inspect.IntType):
            low = kind.ge if kind.gt is None else kind.gt + 1
            high = kind.le if kind.lt is None else kind.lt - 1
            return low, high
    return None, None


def check_arguments(args: argparse.Namespace, *, single: bool) -> str | None:
    """Why the command line cannot make a valid message (field, limit and value), or None."""
    if not single:
        low, high = _int_limits(HumanMessage, "max_rounds")
        value = args.max_rounds
        if (low is not None and value < low) or (high is not None and value > high):
            return f"--max-rounds (max_rounds) must be within {low}..{high}, got {value}"
    try:
        msgspec.json.decode(encode(human_message(args, single=single)), type=HumanMessage)
    except msgspec.ValidationError as exc:
        return f"invalid arguments: {exc}"
    except IndexError:  # no agent named at all
        return "invalid arguments: --agents names no agent"
    return None


def _cmd(single: bool) -> Callable[[argparse.Namespace], int]:
    def command(args: argparse.Namespace) -> int:
        problem = check_arguments(args, single=single)
        if problem is not None:
            print(f"parley: {problem}", file=sys.stderr)
            return 2
        try:
            return asyncio.run(_run(args, single=single))
        except ConfigError as exc:
            print(f"parley: {exc}", file=sys.stderr)
            return 2
        except (OSError, nats.errors.NoServersError) as exc:
            print(f"parley: cannot reach NATS: {exc}", file=sys.stderr)
            return 3

    return command


def add_collab_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add `collab` and `say` to the `parley` command."""
    collab = commands.add_parser("collab", help="start a collaboration session and follow it")
    collab.add_argument("goal", nargs="+", help="what the agents should do together")
    collab.add_argument("--agents", default="gpt,claude", help="participants, comma-separated")
    collab.add_argument("--first", help="who speaks first (default: the first of --agents)")
    collab.add_argument("--max-rounds", type=int, default=6, help="round cap (default 6)")
    say = commands.add_parser("say", help="one call to one agent: parley say @gpt 'hello'")
    say.add_argument("agent", help="the agent, as @name or name")
    say.add_argument("text", nargs="+")
    for parser, single in ((collab, False), (say, True)):
        parser.add_argument("--config", type=Path, help="TOML settings file")
        parser.add_argument("--user", default="", help="user id carried by the session")
        parser.add_argument(
            "--timeout",
            type=float,
            default=None,
            help="give up after this many silent seconds (default: when the session's own "
            "deadline and the router's sweep margin have passed)",
        )
        parser.set_defaults(func=_cmd(single))
