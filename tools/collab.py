"""`parley collab` and `parley say`: a person's side of a session, from a terminal.

The command submits a human message on `parley.submit.cli` (a root: its trace id is its own
id), then follows `parley.events.<person>.<session>` live and prints each turn as it happens. The
session id is chosen here and the subscriptions are confirmed by the server before the
message is submitted, so not one event can be missed while the connection holds. A person's
account imports the timelines and its own decisions as read-only streams: it creates no
consumer, since a consumer's creator chooses where the server writes what it reads.

Ctrl-C sends Stop (a `control` envelope) and waits for the router to confirm; a second
Ctrl-C leaves at once. A refusal by the gate (its decision on `parley.decisions.cli`) ends
the command with the gate's reason. `--stop SESSION` sends the same Stop for a session this
terminal no longer follows, `--follow SESSION` follows one already running, and `--detach`
opens a session and leaves it running. Of a session that had ended, `--follow` and `--stop`
say so at once, from the last event its timeline stored (tools/_stored_events.py).

The wait follows the session's own clock: each call the router makes carries the moment the
session ends at the latest (its deadline plus the sweep's margin, `ends_by`), and the command
waits until then plus `SLACK_S` before saying what it was waiting for and giving up, longer
while a tool request waits for the person's approval, as the router waits
(tools/_session_wait.py); `--timeout` replaces that with a fixed silence. A session given up
on is stopped, and a lost connection ends the wait within seconds (tools/_waiting.py,
docs/cli.md).

Exit codes: 0 the session completed, 1 it failed, was refused or went silent, 2 the arguments
(or the configuration) are invalid, 3 NATS cannot be reached or was lost, 130 it was
canceled. Arguments are checked against the
envelope's own schema before anything is sent: a `--max-rounds` out of range is named with its
limits and value at once, instead of being dead-lettered by the gate while the command waits.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Final, TextIO

import msgspec
from nats.aio.client import Client as NATS
from nats.aio.msg import Msg
from nats.js import JetStreamContext

from bus import jetstream
from schemas import (
    Decision,
    DecodeError,
    Error,
    HumanMessage,
    Namespace,
    SessionEvent,
    decode_envelope,
)
from tools._collab_args import check_arguments, human_message
from tools._local import local_settings
from tools._session_lines import call_line, render
from tools._session_wait import OPENING_S, SessionWait
from tools._stored_events import ENDS, caught_up, read_live, unopened_line
from tools._typing_line import TypingLine
from tools._waiting import (
    EXIT_LOST,
    ConnectionLost,
    Watch,
    connect_watched,
    detached_line,
    give_up,
    lost_line,
    on_stop_signals,
    run_command,
    stop_control,
    stop_session,
    submit_as,
    waited,
)

__all__ = ("SessionEnd", "add_collab_commands", "call_line", "follow_session", "render")

"""Where `parley up` writes its embedded server's URL for the commands run beside it."""

SENDER: Final = "cli"
_END = ENDS
_STOP_WAIT_S: Final = 10.0
"""How long `--stop` waits to see the session end before saying the Stop is stored."""


@dataclass(frozen=True)
class SessionEnd:
    """How a followed session ended: its last event (None if it never ended) and exit code."""

    event: SessionEvent | None
    code: int
    events: tuple[SessionEvent, ...]


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
    watch: Watch | None = None,
    opens: bool = True,
    history: JetStreamContext | None = None,
) -> SessionEnd:
    """Submit `msg` and print its session's events until it ends, or until the session's own
    `ends_by` (plus slack) passes without it ending, or `timeout` of silence if given; then
    the session, given up on, is stopped (tools/_waiting.py). `opens=False` follows a session
    opened before (`msg` only names it): nothing is submitted, giving up stops nothing, and
    with `history` (the person's JetStream) a session that had ended says so at once, and a
    running one starts from its last stored event (tools/_stored_events.py).

    Setting `stop_requested` submits a Stop for the session; the function still waits for the
    router's `session_canceled`. A `watch` ends the wait as soon as the connection is lost.
    """
    assert msg.session_id is not None  # noqa: S101 - callers always choose one
    news: asyncio.Queue[SessionEvent | Decision | Error | None] = asyncio.Queue()

    async def on_decision(raw: Msg) -> None:
        try:
            envelope = decode_envelope(raw.data)
        except DecodeError:
            return  # not ours to judge
        if isinstance(envelope, Decision) and envelope.envelope_id == msg.id:
            news.put_nowait(envelope)

    typing = TypingLine(out)  # the agent's answer as it is written, on a terminal

    async def on_typing(raw: Msg) -> None:
        typing.received(raw.data)

    timeline = await nc.subscribe(ns.events(person, msg.session_id))  # read in order below
    subs = [timeline, await nc.subscribe(ns.decisions(person), cb=on_decision)]
    if typing.live:
        subs.append(await nc.subscribe(ns.typing(person, msg.session_id), cb=on_typing))
    seen: list[SessionEvent] = []
    max_rounds = msg.max_rounds if msg.mode == "collaborate" else 1
    wait = SessionWait("the router to open the session" if opens else "the session's next event")
    reader: asyncio.Task[None] | None = None
    shown: str | None = None  # the event shown from the store, whose live copy is dropped
    async with asyncio.TaskGroup() as tasks:
        if stop_requested is not None:
            stopper = tasks.create_task(_on_stop(stop_requested, news))
        try:
            await waited(nc.flush(), None, watch)  # the server has both subscriptions first
            if opens and stop_requested is not None and stop_requested.is_set():
                print("canceled before the session was opened", file=out, flush=True)
                return SessionEnd(None, 130, ())
            if opens:
                await waited(submit_as(nc, ns, person, msg), None, watch)
            else:
                caught = await waited(
                    caught_up(history, ns, person, msg.session_id, timeline), None, watch
                )
                if caught.ended is not None:
                    print(f"session {msg.session_id} had ended already", file=out)
                    print(render(caught.ended, max_rounds) or "", file=out, flush=True)
                    return SessionEnd(caught.ended, _END[caught.ended.event_type], (caught.ended,))
                if caught.opening is not None:  # its limits, and how many rounds it has
                    wait.on_event(caught.opening)
                    max_rounds = int(caught.opening.payload.get("max_rounds", max_rounds))
                for first in caught.first:
                    news.put_nowait(first)
                shown = caught.shown
                print(f"following session {msg.session_id} (Ctrl-C stops it)", file=out, flush=True)
                if caught.nothing_stored:
                    wait = SessionWait(f"session {msg.session_id} to open")
                    print(unopened_line(msg.session_id, OPENING_S), file=out, flush=True)
            reader = tasks.create_task(read_live(timeline, news, shown))
            while True:
                wait_s = timeout if timeout is not None else wait.wait_s()
                waiting_for = wait.waiting_for
                try:
                    item = await waited(news.get(), wait_s, watch, what=waiting_for)
                except TimeoutError:
                    typing.wipe()
                    print(
                        f"no news from the session for {wait_s:.0f} s: gave up waiting for "
                        f"{waiting_for}",
                        file=out,
                        flush=True,
                    )
                    if opens:
                        why = f"the command gave up waiting for {waiting_for}"
                        stop = stop_control(msg.session_id, msg.user_id, why)
                        await give_up(nc, watch, ns, person, stop, out)
                    return SessionEnd(None, 1, tuple(seen))
                typing.wipe()  # whatever is printed next takes the live line's place
                if item is None:  # Ctrl-C: ask the router to stop, and keep following
                    stop = stop_control(msg.session_id, msg.user_id, "Ctrl-C")
                    await waited(submit_as(nc, ns, person, stop), None, watch)
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
                wait.on_event(item)
                line = render(item, max_rounds)
                if line is not None:
                    print(line, file=out, flush=True)
                if item.event_type in _END:
                    return SessionEnd(item, _END[item.event_type], tuple(seen))
        except ConnectionLost as lost:
            typing.wipe()
            print(lost_line(lost.url, msg.session_id), file=out, flush=True)
            return SessionEnd(None, EXIT_LOST, tuple(seen))
        finally:
            if stop_requested is not None:
                stopper.cancel()
            if reader is not None:
                reader.cancel()
            if not nc.is_closed:
                for sub in subs:
                    await sub.unsubscribe()


async def _on_stop(
    stop_requested: asyncio.Event, news: asyncio.Queue[SessionEvent | Decision | Error | None]
) -> None:
    await stop_requested.wait()
    news.put_nowait(None)


async def _run(args: argparse.Namespace, *, single: bool) -> int:
    settings = local_settings(args.config, SENDER)
    ns = Namespace(settings.namespace)
    msg = human_message(args, single=single)
    if args.follow:
        msg = msgspec.structs.replace(msg, session_id=args.follow)
    person = settings.actor_id or SENDER  # one person, one principal (its own settings)
    nc, watch = await connect_watched(settings, person)
    # Only now is Ctrl-C a Stop to send: while connecting it leaves at once (exit 130), as
    # there is nothing to stop; a Stop asked for before the opening is sent opens nothing.
    stop_requested = on_stop_signals()
    try:
        if args.stop:
            stop = stop_control(args.stop, args.user, "stopped from the command line")
            wait_s = args.timeout or _STOP_WAIT_S
            history = jetstream(nc, settings)
            return await stop_session(nc, watch, ns, person, stop, wait_s, sys.stdout, history)
        if args.detach:
            await waited(submit_as(nc, ns, person, msg), None, watch)
            print(detached_line(msg.session_id or ""), flush=True)
            return 0
        end = await follow_session(
            nc,
            ns,
            msg,
            out=sys.stdout,
            timeout=args.timeout,
            stop_requested=stop_requested,
            person=person,
            watch=watch,
            opens=not args.follow,
            history=jetstream(nc, settings),
        )
    except asyncio.CancelledError:
        return 130
    finally:
        await watch.close(nc)
    return end.code


def _cmd(single: bool) -> Callable[[argparse.Namespace], int]:
    def command(args: argparse.Namespace) -> int:
        problem = check_arguments(args, single=single)
        if problem is not None:
            print(f"parley {args.command}: {problem}", file=sys.stderr)
            return 2
        return run_command(args.command, lambda: _run(args, single=single))

    return command


def add_collab_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add `collab` and `say` to the `parley` command."""
    collab = commands.add_parser("collab", help="start a collaboration session and follow it")
    collab.add_argument("goal", nargs="*", help="what the agents should do together")
    collab.add_argument("--agents", default="gpt,claude", help="participants, comma-separated")
    collab.add_argument("--first", help="who speaks first (default: the first of --agents)")
    collab.add_argument("--max-rounds", type=int, default=6, help="round cap (default 6)")
    collab.add_argument("--stop", metavar="SESSION", help="stop a session (any you opened)")
    collab.add_argument("--follow", metavar="SESSION", help="follow a session already running")
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
            help="give up (and stop the session) after this many silent seconds (default: "
            "when the session's own deadline and the router's sweep margin have passed)",
        )
        parser.add_argument(
            "--detach",
            action="store_true",
            help="open the session and leave it running; print how to follow and stop it",
        )
        parser.set_defaults(func=_cmd(single), stop=None, follow=None)
