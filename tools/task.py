"""`parley task @agent "objective"`: a person's task for one agent, approvals asked inline.

The command opens a task session (seed 002 §7): the objective goes to the router as a single
call to the agent, which works on it with the tools its bundle grants. It follows the
session's timeline (`parley.events.<person>.<session>`) and prints each step as it comes, with
the task's state whenever it changes (SESSION_RUNNING, WAITING_FOR_LLM, WAITING_FOR_TOOL,
WAITING_FOR_APPROVAL, ... folded from the timeline by actors/console/_task.py, as the
console folds it). A tool request held for the person's approval is printed with its summary
and risk and asked `y/n/e`, as `parley orchestrate` asks for a draft: y approves it, n rejects
it (and asks the reason, which the agent is told), e explains instead: the line typed goes to
the agent as the reason of a rejection. A held request cannot be edited: the tool runtime runs
exactly the request whose digest was shown, never anything a decision carries.

The decisions are the `control`s `parley approvals approve|reject` sends, to the tool runtime,
which applies them only from the person the task works for. Without keys (standard input
ended, or not a terminal, pipe or file) a held request is printed with those two commands,
to decide from another terminal. Ctrl-C stops the task (a second Ctrl-C leaves at once).

Exit codes: 0 completed, 1 failed, refused or silent, 2 bad arguments, 3 no NATS (or lost),
130 cancelled.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from datetime import datetime
from pathlib import Path
from typing import Final, TextIO

from nats.aio.client import Client as NATS
from nats.aio.msg import Msg

from actors.console import TaskView
from schemas import (
    Control,
    Decision,
    DecodeError,
    Error,
    HumanMessage,
    Namespace,
    SessionEvent,
    decode_envelope,
    new_id,
    utc_now,
)
from tools._local import local_settings
from tools._orchestrate_keys import END_OF_INPUT, stdin_lines
from tools._session_lines import render
from tools._waiting import (
    EXIT_LOST,
    ConnectionLost,
    Watch,
    connect_watched,
    give_up,
    lost_line,
    on_stop_signals,
    run_command,
    stop_control,
    stop_line,
    submit_as,
    waited,
)

__all__ = ("add_task_command",)

SENDER: Final = "cli"
_SILENCE_S: Final = 60.0
"""How long to wait for the session to open, before the router's call says its deadline."""
_SLACK_S: Final = 30.0
_END: Final = {"session_completed": 0, "session_failed": 1, "session_canceled": 130}
_QUESTION: Final = "approve? [y]es / [n]o / [e]xplain instead"
News = asyncio.Queue[SessionEvent | Decision | Error | str | None]


class TaskRun:
    """One task followed from a terminal."""

    def __init__(
        self, nc: NATS, ns: Namespace, msg: HumanMessage, person: str, out: TextIO, watch: Watch
    ) -> None:
        self.nc, self.ns, self.msg, self.person, self.out = nc, ns, msg, person, out
        self.watch = watch
        self.session_id = msg.session_id or ""
        self.news: News = asyncio.Queue()
        self.view = TaskView()
        self.state = ""
        self.asking: list[str] = []
        """Approval ids awaiting the person's answer, the first one asked."""
        self.input_ended = False
        self.ends_by: datetime | None = None

    def say(self, line: str) -> None:
        print(line, file=self.out, flush=True)

    async def submit(self, envelope: HumanMessage | Control) -> None:
        await waited(submit_as(self.nc, self.ns, self.person, envelope), None, self.watch)

    async def decide(self, approval_id: str, approve: bool, reason: str = "") -> None:
        await self.submit(
            Control(
                id=new_id(),
                created_at=utc_now(),
                action="approve" if approve else "reject",
                session_id=self.session_id,
                target="tools",
                approval_id=approval_id,
                reason=reason,
                user_id=self.msg.user_id,
            )
        )
        self.view.decision_sent(approval_id)
        self.say(f"{'approved' if approve else 'rejected'}: the tool runtime is told")

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
        while (line := await lines.get()) != END_OF_INPUT:
            self.news.put_nowait(line.strip())
        self.news.put_nowait(END_OF_INPUT)

    async def follow(self, stop: asyncio.Event) -> int:
        self.say(
            f"task session {self.session_id} (Ctrl-C stops it; `{stop_line(self.session_id)}`)"
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
                self.say(f"no news from the task for {wait_s:.0f} s: gave up waiting")
                why = f"the command gave up after {wait_s:.0f} s without news"
                stop = stop_control(self.session_id, self.msg.user_id, why)
                await give_up(self.nc, self.watch, self.ns, self.person, stop, self.out)
                return 1
            if item is None:  # Ctrl-C
                await self.submit(stop_control(self.session_id, self.msg.user_id, "Ctrl-C"))
                self.say("stop requested")
                # Then what it held for the person, rejected: held on, each counted among
                # the agent's calls in flight until it expired (a next task was refused).
                for approval_id in [x["approvalId"] for x in self.view.awaiting()]:
                    await self.decide(
                        str(approval_id), approve=False, reason="the task was stopped"
                    )
                self.asking.clear()
            elif isinstance(item, str):
                await self.on_line(item)
            elif isinstance(item, Decision):
                if not item.allowed:
                    self.say(f"refused by the gate: {item.code}: {item.message}")
                    return 1
            elif isinstance(item, Error):
                self.say(f"refused: {item.code}: {item.message}")
            elif (code := self.on_event(item)) is not None:
                return code

    def _wait_s(self) -> float | None:
        """None while the person is asked; else until the router's call is judged, plus slack
        (the router ends the task itself when its agent does not answer in time)."""
        if self.asking:
            return None
        if self.ends_by is None:
            return _SILENCE_S
        return max((self.ends_by - utc_now()).total_seconds(), 0.0) + _SLACK_S

    def on_event(self, event: SessionEvent) -> int | None:
        ends_by = event.payload.get("ends_by")
        if event.event_type == "step_started" and isinstance(ends_by, str):
            self.ends_by = datetime.fromisoformat(ends_by)
        line = render(event, 1)
        if event.event_type == "approval_requested":
            line = line.split("\n", 1)[0] if line else None  # the y/n/e question decides it
        if line is not None:
            self.say(line)
        for implied, payload in self.view.apply(event.event_type, dict(event.payload)):
            self.say(f"{implied}: {payload.get('decision')}")
        if event.event_type == "approval_requested":
            approval_id = str(event.payload.get("approval_id", ""))
            self.asking.append(approval_id)
            if self.input_ended:  # each one, or the second held went without its command
                self.say(self._unanswerable(approval_id))
            elif len(self.asking) == 1:
                self.say(_QUESTION)
        self.asking = [
            a for a in self.asking if a in {x["approvalId"] for x in self.view.awaiting()}
        ]
        if self.view.state != self.state:
            self.state = self.view.state
            self.say(f"state: {self.state}")
        return _END.get(event.event_type)

    def _unanswerable(self, approval_id: str) -> str:
        return (
            "standard input has ended: decide it with "
            f"`parley approvals approve {approval_id} --session {self.session_id}` (or reject)"
        )

    async def on_line(self, line: str) -> None:
        key = line[:1].lower()
        if line == END_OF_INPUT:
            self.input_ended = True
            if self.asking:
                self.say(self._unanswerable(self.asking[0]))
            return
        if not self.asking or key not in ("y", "n", "e"):
            if line:
                self.say("keys: y/n/e when a tool request awaits your approval; Ctrl-C stops")
            return
        approval_id = self.asking.pop(0)
        if key == "y":
            await self.decide(approval_id, approve=True)
        else:
            self.say("reason for the agent:" if key == "n" else "what the agent should do instead:")
            text = await _next_text(self.news)
            if text == END_OF_INPUT:
                self.asking.insert(0, approval_id)
                self.input_ended = True
                self.say(self._unanswerable(approval_id))
                return
            reason = text if key == "n" else f"the person asks instead: {text}"
            await self.decide(approval_id, approve=False, reason=reason)
        if self.asking:
            self.say(_QUESTION)


async def _next_text(news: News) -> str:
    """The next line the person types (events arriving meanwhile are put back after it)."""
    held: list[SessionEvent | Decision | Error | None] = []
    try:
        while not isinstance(item := await news.get(), str):
            held.append(item)
        return item
    finally:
        for item in held:
            news.put_nowait(item)


async def _forward(stop: asyncio.Event, news: News) -> None:
    while True:
        await stop.wait()
        stop.clear()
        news.put_nowait(None)


def task_message(agent: str, objective: str, user: str) -> HumanMessage:
    target = agent.removeprefix("@")
    return HumanMessage(
        id=new_id(),
        created_at=utc_now(),
        text=objective,
        call_id=new_id(),
        user_id=user,
        mode="single",
        participants=(target,),
        first_speaker=target,
        max_rounds=1,
        session_id=new_id(),
    )


async def _run(args: argparse.Namespace) -> int:
    settings = local_settings(args.config, SENDER)
    ns = Namespace(settings.namespace)
    person = settings.actor_id or SENDER
    msg = task_message(args.agent, " ".join(args.objective), args.user)
    nc, watch = await connect_watched(settings, person)
    stop = on_stop_signals()
    try:
        return await TaskRun(nc, ns, msg, person, sys.stdout, watch).follow(stop)
    except asyncio.CancelledError:
        return 130
    finally:
        await watch.close(nc)


def add_task_command(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add `task` to the `parley` command."""
    cmd = commands.add_parser(
        "task", help="give one agent a task it works on with its tools; approve its actions"
    )
    cmd.add_argument("agent", help="the agent, as @name")
    cmd.add_argument("objective", nargs="+", help="what the agent should achieve")
    cmd.add_argument("--config", type=Path, help="TOML settings file")
    cmd.add_argument("--user", default="", help="user id carried by the session")
    cmd.set_defaults(func=_command, command="task")


def _command(args: argparse.Namespace) -> int:
    """Refuse a task with nothing to do before anything is sent (exit 2), else run it."""
    if not " ".join(args.objective).strip():
        print("parley task: invalid arguments: say what the agent should achieve", file=sys.stderr)
        return 2
    return run_command("task", lambda: _run(args))
