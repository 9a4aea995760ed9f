"""`parley orchestrate`: a person's local agent talks to a shared agent, under their control.

The command opens an orchestrated session (seed 000) on the router, then follows its
timeline (`parley.events.<person>.<session>`) and prints it as three voices: `Local Agent`
(the drafts), `Remote Agent` (the shared agent's answers) and `You` (what the person decided
or typed), each outbound message marked auto-sent, approved, edited or typed by you. When a
draft waits for approval (every draft in `manual` mode, a risky one in `semi_auto`), it asks
`y/n/e` on standard input: y sends it, n rejects it (and asks the reason, which goes back to
the local agent), e reads the edited text to send instead.

A draft held across a pause is asked again on resume (a y/n/e typed while paused is told to
wait for it). The command prints the session id first, with the command that stops it from
another terminal. Manual mode needs somebody at standard input: without a terminal, pipe or
file there (`< /dev/null`) it is refused at once (exit 2), naming the modes that need nobody.

At any other time a line with one key steers the run: `p` pause, `r` resume, `s` stop, `t`
take over (the next line is the message to send). Ctrl-C stops the session (a second Ctrl-C
leaves at once). A banner says so when a limit (maxTurns, maxDurationMs, maxFailures,
maxTokensBudget) ends the run. A session given up on (silent too long) is stopped, a lost
connection is said within seconds, and `--detach` (full_auto only: nobody is left to approve)
leaves the session running (tools/_waiting.py, docs/cli.md).

Exit codes: 0 completed, 1 error (refused, or silent), 2 bad arguments, 3 no NATS (or lost),
130 stopped.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from datetime import datetime
from typing import Final, TextIO

import msgspec
from nats.aio.client import Client as NATS
from nats.aio.msg import Msg

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
from tools._local import local_settings
from tools._orchestrate_args import (
    add_orchestrate_arguments,
    invalid_arguments_line,
    orchestration_message,
)
from tools._orchestrate_keys import END_OF_INPUT, keys_readable, no_keys_line, stdin_lines
from tools._session_lines import banner, render_event
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
    stop_line,
    submit_as,
    waited,
)

__all__ = ("add_orchestrate_command", "banner", "render_event")

_KEYS: Final = {
    **{word: word[0] for word in ("yes", "no", "edit", "pause", "resume", "stop")},
    **{word[0]: word[0] for word in ("yes", "no", "edit", "pause", "resume", "stop")},
    "t": "t",
    "take over": "t",
    "takeover": "t",
}
"""The lines that are keys, each a whole line: "send it" or "stop here" are not a `s`, nor
"no thanks" a rejection (a newcomer's walk: any line was taken by its first letter)."""

SENDER: Final = "cli"
_SILENCE_S: Final = 60.0  # for the session to open
_SLACK_S: Final = 30.0  # past the call in flight's `ends_by`, when the router judges it
_END = {"session_completed": 0, "session_failed": 1, "session_canceled": 130}


class Run:
    """One orchestrated session followed from a terminal."""

    def __init__(
        self, nc: NATS, ns: Namespace, msg: HumanMessage, person: str, out: TextIO, watch: Watch
    ) -> None:
        self.nc, self.ns, self.msg, self.person, self.out = nc, ns, msg, person, out
        self.watch = watch
        self.session_id = msg.session_id or ""
        self.news: asyncio.Queue[SessionEvent | Decision | Error | str | None] = asyncio.Queue()
        self.max_turns = msg.orchestration.max_turns if msg.orchestration else 8
        self.approval: str | None = None  # the draft awaiting approval, until resolved
        self.draft = ""
        self.asking = False  # its question stands: the next y/n/e answers it
        self.input_ended = False
        self.ends_by: datetime | None = None
        self.paused = False
        self.stranded = False
        """A draft awaits an approval and standard input has ended: nobody can give it."""

    def say(self, line: str) -> None:
        print(line, file=self.out, flush=True)

    async def submit(self, envelope: HumanMessage | Control) -> None:
        await waited(submit_as(self.nc, self.ns, self.person, envelope), None, self.watch)

    async def control(
        self, action: str, *, approval_id: str | None = None, reason: str = "", text: str = ""
    ) -> None:
        await self.submit(
            Control(
                id=new_id(),
                created_at=utc_now(),
                action=action,  # type: ignore[arg-type]  # one of Control's actions
                session_id=self.session_id,
                user_id=self.msg.user_id,
                approval_id=approval_id,
                reason=reason,
                text=text,
            )
        )

    async def on_message(self, raw: Msg) -> None:
        try:
            envelope = decode_envelope(raw.data)
        except DecodeError:
            return
        if isinstance(envelope, SessionEvent | Error):
            self.news.put_nowait(envelope)
        elif isinstance(envelope, Decision) and envelope.envelope_id == self.msg.id:
            self.news.put_nowait(envelope)

    async def keys(self, lines: asyncio.Queue[str]) -> None:
        """The person's keys: answers to an approval, or p/r/s/t at any time."""
        while (line := await lines.get()) != END_OF_INPUT:
            self.news.put_nowait(line.strip())
        self.news.put_nowait(END_OF_INPUT)

    async def on_line(self, line: str) -> None:
        key = _KEYS.get(line.lower(), "")
        if line == END_OF_INPUT:
            self.input_ended = True
            if self.approval is not None:
                self.say(self._unanswerable())
        elif self.approval is not None and key in ("y", "n", "e") and self.paused:
            # The router refuses an answer while paused; the question comes back on resume.
            self.say("paused: resume (r) first; the draft still awaits your approval")
        elif self.approval is not None and self.asking and key in ("y", "n", "e"):
            await self._answer(key, self.approval)
        elif key in ("p", "r", "s"):
            await self.control({"p": "pause", "r": "resume", "s": "stop"}[key])
        elif key == "t":
            self.say("your message to send:")
            if (text := await self._next_text()) is not None:
                await self.control("take_over", text=text)
        elif key and self.approval is not None:  # answered already, not resolved yet
            self.say("your answer to this draft was sent: waiting for the router to apply it")
        elif key:  # y, n or e with no draft awaiting an answer
            self.say("no draft awaits your approval now: nothing was sent")
        elif line:
            self.say(
                f"not a key: {line[:40]!r}; y/n/e for a draft awaiting approval; "
                "p pause, r resume, s stop, t take over (a whole line each)"
            )

    async def _answer(self, key: str, approval: str) -> None:
        """y sends the draft, n rejects it with a reason, e sends the person's edit instead.
        The approval stays awaited until the router resolves it: a refused answer (a pause
        that reached the router first) is asked again on resume."""
        if key == "y":
            self.asking = False
            await self.control("approve", approval_id=approval)
        elif key == "n":
            self.say("reason for the local agent:")
            if (reason := await self._next_text()) is not None:
                self.asking = False
                await self.control("reject", approval_id=approval, reason=reason)
        else:
            self.say("your edited message:")
            if (text := await self._next_text()) is not None:
                self.asking = False
                await self.control("approve", approval_id=approval, text=text)

    async def _next_text(self) -> str | None:
        """The next line typed, or None (said) when standard input has ended before it."""
        if not self.input_ended and (text := await _next_text(self.news)) != END_OF_INPUT:
            return text
        self.input_ended = True
        self.say("standard input ended: nothing was sent")
        if self.approval is not None:
            self.say(self._unanswerable())
        return None

    def _unanswerable(self) -> str:
        """Said when a draft awaits an approval nobody here can give any more; the loop then
        stops the session (the console, signed in as another principal, cannot approve a
        draft of this command's person: the command waited until killed)."""
        self.stranded = True
        return (
            "a draft awaits your approval but standard input has ended: nobody can answer it "
            "here, so the session is stopped (`--mode full_auto` runs without approvals)"
        )

    async def follow(self, stop: asyncio.Event) -> int:
        self.say(
            f"session {self.session_id} (s or Ctrl-C stops it; from another terminal: "
            f"`{stop_line(self.session_id)}`)"
        )
        subs = [
            await self.nc.subscribe(
                self.ns.events(self.person, self.session_id), cb=self.on_message
            ),
            await self.nc.subscribe(self.ns.decisions(self.person), cb=self.on_message),
        ]
        try:
            async with stdin_lines() as lines, asyncio.TaskGroup() as tasks:
                keys = tasks.create_task(self.keys(lines))
                stopper = tasks.create_task(_forward(stop, self.news))
                try:
                    await waited(self.nc.flush(), None, self.watch)
                    await self.submit(self.msg)
                    return await self._loop()
                except ConnectionLost as lost:
                    self.say(lost_line(lost.url, self.session_id))
                    return EXIT_LOST
                finally:
                    keys.cancel()
                    stopper.cancel()
        finally:
            if not self.nc.is_closed:
                for sub in subs:
                    await sub.unsubscribe()

    async def _loop(self) -> int:
        while True:
            wait_s = self._wait_s()
            try:
                item = await waited(self.news.get(), wait_s, self.watch)
            except TimeoutError:
                self.say(f"no news from the session for {wait_s:.0f} s: gave up waiting")
                why = f"the command gave up after {wait_s:.0f} s without news"
                stop = stop_control(self.session_id, self.msg.user_id, why)
                await give_up(self.nc, self.watch, self.ns, self.person, stop, self.out)
                return 1
            if item is None:  # Ctrl-C
                await self.control("stop", reason="Ctrl-C")
                self.say("stop requested")
            elif isinstance(item, str):
                await self.on_line(item)
            elif isinstance(item, Decision):
                if not item.allowed:
                    self.say(f"refused by the gate: {item.code}: {item.message}")
                    return 1
            elif isinstance(item, Error):
                self.say(f"refused: {item.code}: {item.message}")
            else:
                code = self.on_event(item)
                if code is not None:
                    return code
            if self.stranded:
                why = "standard input ended while a draft awaited approval"
                stop = stop_control(self.session_id, self.msg.user_id, why)
                await give_up(self.nc, self.watch, self.ns, self.person, stop, self.out)
                return 1

    def _wait_s(self) -> float | None:
        """None while the person is asked (or the session paused): the session's own
        maxDurationMs ends it; else until the call in flight is judged, plus slack."""
        if self.approval is not None or self.paused:
            return None
        if self.ends_by is None:
            return _SILENCE_S
        return max((self.ends_by - utc_now()).total_seconds(), 0.0) + _SLACK_S

    def on_event(self, event: SessionEvent) -> int | None:
        state = event.payload.get("state")
        ends_by = event.payload.get("ends_by")
        if isinstance(ends_by, str):
            self.ends_by = datetime.fromisoformat(ends_by)
        self.paused = state == "paused"
        line = render_event(event, self.max_turns)
        if line is not None:
            self.say(line)
        if event.event_type == "approval_requested":
            self.approval = str(event.payload.get("approval_id"))
            self.draft = str(event.payload.get("draft", ""))
            self._ask()
        elif event.event_type == "approval_resolved":
            self.approval, self.asking = None, False
        elif event.event_type == "session_resumed" and self.approval is not None:
            self.say(f"    still awaiting your approval: {self.draft}")
            self._ask()  # the draft held across the pause is asked again
        return _END.get(event.event_type)

    def _ask(self) -> None:
        self.asking = True
        self.say(self._unanswerable() if self.input_ended else "send it? [y]es / [n]o / [e]dit")


async def _next_text(news: asyncio.Queue[SessionEvent | Decision | Error | str | None]) -> str:
    """The next line the person types (events arriving meanwhile are put back after it)."""
    held: list[SessionEvent | Decision | Error | None] = []
    try:
        while not isinstance(item := await news.get(), str):
            held.append(item)
        return item
    finally:
        for item in held:
            news.put_nowait(item)


async def _forward(
    stop: asyncio.Event, news: asyncio.Queue[SessionEvent | Decision | Error | str | None]
) -> None:
    while True:
        await stop.wait()
        stop.clear()
        news.put_nowait(None)


async def _run(args: argparse.Namespace, msg: HumanMessage) -> int:
    settings = local_settings(args.config, SENDER)
    ns = Namespace(settings.namespace)
    person = settings.actor_id or SENDER
    nc, watch = await connect_watched(settings, person)
    stop = on_stop_signals()  # after connecting: a Ctrl-C before it leaves at once (exit 130)
    try:
        if args.detach:
            await waited(submit_as(nc, ns, person, msg), None, watch)
            print(detached_line(msg.session_id or ""), flush=True)
            return 0
        return await Run(nc, ns, msg, person, sys.stdout, watch).follow(stop)
    except asyncio.CancelledError:
        return 130
    finally:
        await watch.close(nc)


def _command(args: argparse.Namespace) -> int:
    try:
        msg = orchestration_message(args)
        msgspec.json.decode(encode(msg), type=HumanMessage)
    except (msgspec.ValidationError, ValueError, TypeError) as exc:
        print(f"parley orchestrate: {invalid_arguments_line(str(exc))}", file=sys.stderr)
        return 2
    if args.mode == "manual" and not args.detach and not keys_readable():
        print(no_keys_line(args.mode), file=sys.stderr)
        return 2
    if args.detach and args.mode != "full_auto":
        print(
            f"parley orchestrate: --detach leaves nobody to approve {args.mode}'s drafts: "
            "use --mode full_auto",
            file=sys.stderr,
        )
        return 2
    return run_command("orchestrate", lambda: _run(args, msg))


def add_orchestrate_command(
    commands: argparse._SubParsersAction[argparse.ArgumentParser],
) -> None:
    """Add `orchestrate` to the `parley` command."""
    cmd = commands.add_parser(
        "orchestrate", help="your local agent talks to a shared agent, under your control"
    )
    add_orchestrate_arguments(cmd)
    cmd.set_defaults(func=_command)
