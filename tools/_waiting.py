"""How a `parley` command waits on the bus while a person waits on it (docs/cli.md).

`parley collab`, `say`, `orchestrate` and `delegate` each submit something and then wait for
its news. Two things must never leave that person guessing:

- **A lost connection is said within seconds.** The command's connection reconnects for
  `RECONNECT_WINDOW_S` only (ten seconds when `parley up` keeps the server and so restarts it,
  tools/_local.py) and pings every two seconds (bus/_connection.py); when it closes
  for good, `Watch` ends every wait at once with `ConnectionLost`, and the command exits 3 with
  one line: what was lost, what to check, and, when it had opened a session, that the session
  may still be running and the command that stops it once the server is back.
- **A session given up on is stopped.** When the command's own timer runs out it submits the
  same Stop that Ctrl-C sends, as the person who opened the session. The Stop is stored in the
  same durable queue as the opening, behind it, so a router that has not opened the session
  yet (a stalled gate) applies it when it does (actors/router/_early_stops.py) instead of
  running every round with nobody watching. `--detach` is the way to leave a session running.

Exit codes, the same for every such command: 0 done, 1 failed, refused or given up, 2 invalid
arguments or configuration, 3 NATS cannot be reached (at the start, or lost while waiting),
130 canceled (Ctrl-C).
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sys
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any, Final, TextIO, TypeVar

import nats
from nats.aio.client import Client as NATS
from nats.aio.msg import Msg
from nats.js import JetStreamContext

from bus import (
    RECONNECT_WINDOW_S,
    ConfigError,
    Settings,
    TraceHeaders,
    configure_tracing,
    shutdown_tracing,
    trace_publish,
)
from schemas import (
    Control,
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
from tools._command_connection import connect_local
from tools._errors import debug_traceback, report_failure
from tools._local import reconnect_window_s
from tools._still_waiting import announced
from tools._stored_events import StoredUnreadable, ended_line, stored_end
from tools._terminal_gone import guarded_output, silence_terminal, when_terminal_gone
from tools._trace_keys import remember_trace

__all__ = (
    "EXIT_LOST",
    "ConnectionLost",
    "Unreachable",
    "Watch",
    "connect_watched",
    "detached_line",
    "give_up",
    "lost_line",
    "on_stop_signals",
    "run_command",
    "stop_control",
    "stop_line",
    "stop_session",
    "submit_as",
    "waited",
)

EXIT_LOST: Final = 3
_STOP_SIGNALS: Final = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
"""What a person does to end a command: Ctrl-C, `kill`, closing the terminal."""
_STOP_SUBMIT_S: Final = 5.0
"""How long a give-up waits for its Stop to be stored before saying it could not be."""

T = TypeVar("T")


class ConnectionLost(Exception):
    """The command's connection closed for good while it waited (the server is gone)."""

    def __init__(self, url: str) -> None:
        super().__init__(f"lost the connection to nats at {url}")
        self.url = url


class Unreachable(Exception):
    """No server answered when the command connected (what to set is in the message)."""


@dataclass
class Watch:
    """Whether a command's connection is lost: once it has been down for `window_s` (a
    server that hangs instead of refusing lets each reconnect attempt wait for its connect
    timeout), or once nats-py gave up and closed it, unless the command closed the connection
    itself."""

    url: str
    window_s: float = RECONNECT_WINDOW_S
    lost: asyncio.Event = field(default_factory=asyncio.Event)
    closing: bool = False
    _window: asyncio.TimerHandle | None = None

    async def on_closed(self) -> None:
        if not self.closing:
            self.lost.set()

    async def on_lost(self) -> None:
        """The connection dropped: lost for good unless it is back within the window."""
        if self._window is None and not self.closing:
            loop = asyncio.get_running_loop()
            self._window = loop.call_later(self.window_s, self.lost.set)

    async def on_back(self) -> None:
        if self._window is not None:
            self._window.cancel()
            self._window = None

    async def close(self, nc: NATS) -> None:
        """Close the connection as the command's own act (not a loss)."""
        self.closing = True
        await self.on_back()
        await nc.close()


async def connect_watched(settings: Settings, person: str) -> tuple[NATS, Watch]:
    """Connect a command as `person`, watched for the loss of its connection.

    Raises:
        Unreachable: no server answered at the settings' URL.
    """
    watch = Watch(settings.nats_url, reconnect_window_s(settings))
    try:
        nc = await connect_local(
            settings,
            person,
            on_closed=watch.on_closed,
            on_lost=watch.on_lost,
            on_back=watch.on_back,
        )
    except ConfigError as exc:  # nothing answers there: exit 3 like a loss, not 2
        raise Unreachable(str(exc)) from None
    return nc, watch


async def waited(
    awaitable: Awaitable[T], timeout: float | None, watch: Watch | None, what: str | None = None
) -> T:
    """`awaitable`'s result; `TimeoutError` after `timeout` seconds (None: no limit), and
    `ConnectionLost` as soon as `watch` says the connection is gone, whatever was awaited.
    Given `what` it waits for, a wait of more than a few seconds says so, once
    (tools/_still_waiting.py)."""
    if what is not None:
        awaitable = announced(awaitable, what, limit_s=timeout)
    if watch is None:
        return await asyncio.wait_for(awaitable, timeout)
    task = asyncio.ensure_future(awaitable)
    if watch.lost.is_set():
        task.cancel()
        raise ConnectionLost(watch.url)
    lost = asyncio.ensure_future(watch.lost.wait())
    try:
        done, _ = await asyncio.wait(
            {task, lost}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED
        )
    finally:
        lost.cancel()
        if not task.done():
            task.cancel()
            with contextlib.suppress(BaseException):
                await task
    if task in done:
        return task.result()
    if watch.lost.is_set():
        raise ConnectionLost(watch.url)
    raise TimeoutError


async def submit_as(nc: NATS, ns: Namespace, person: str, envelope: HumanMessage | Control) -> None:
    """Submit `envelope` as the person: a root envelope, whose trace is its own id. Stored
    (JetStream acknowledged it) when this returns."""
    headers = TraceHeaders(trace_id=envelope.id, origin=person).to_headers(envelope.id)
    payload = encode(envelope)
    trace_publish(ns.submit(person), payload, headers)  # a trace's root span, when tracing
    await nc.jetstream().publish(ns.submit(person), payload, headers=headers)
    if isinstance(envelope, HumanMessage):
        remember_trace(envelope.id)  # `parley trace last`, `parley calls last`


def stop_control(session_id: str, user_id: str, reason: str) -> Control:
    return Control(
        id=new_id(),
        created_at=utc_now(),
        action="stop",
        session_id=session_id,
        user_id=user_id,
        reason=reason,
    )


def stop_line(session_id: str) -> str:
    """The command that stops a session (any kind: the router finds it by its id)."""
    return f"parley collab --stop {session_id}"


def lost_line(url: str, session_id: str | None) -> str:
    """The one line a command ends with when its connection is lost."""
    line = f"lost the connection to nats at {url}: is `parley up` still running?"
    if session_id is None:
        return line
    return (
        f"{line} the session {session_id} may still be running: once the server is back, "
        f"stop it with `{stop_line(session_id)}`"
    )


def detached_line(session_id: str) -> str:
    """What `--detach` prints: the session runs on, and how to follow or stop it."""
    return (
        f"session {session_id} runs on without this terminal: follow it with "
        f"`parley collab --follow {session_id}`, stop it with `{stop_line(session_id)}`"
    )


async def give_up(
    nc: NATS,
    watch: Watch | None,
    ns: Namespace,
    person: str,
    stop: Control,
    out: TextIO,
) -> None:
    """Cancel the session the command opened and is giving up on: submit `stop` as the person
    who opened it, durably, behind the opening (a router that opens the session later applies
    it then). Says whether the Stop was stored."""
    session_id = stop.session_id or ""
    try:
        await waited(submit_as(nc, ns, person, stop), _STOP_SUBMIT_S, watch)
    except (ConnectionLost, TimeoutError, nats.errors.Error, OSError):
        url = watch.url if watch is not None else "the server"
        print(f"could not ask to stop it: {lost_line(url, session_id)}", file=out, flush=True)
        return
    print(
        f"stop requested for session {session_id}: it ends as canceled, even if it opens later",
        file=out,
        flush=True,
    )


async def stop_session(
    nc: NATS,
    watch: Watch,
    ns: Namespace,
    person: str,
    stop: Control,
    wait_s: float,
    out: TextIO,
    history: JetStreamContext | None = None,
) -> int:
    """`parley collab --stop SESSION`: the Stop Ctrl-C sends, for a session no terminal follows
    (given up on, detached, or its terminal gone); waits up to `wait_s` to see it end. With
    `history` (the person's JetStream), a session whose timeline stored its end is not sent a
    Stop: that it had ended is said at once, exit 1 (nothing was stopped)."""
    session_id = stop.session_id or ""
    ended: asyncio.Queue[SessionEvent | Error] = asyncio.Queue()

    async def on_message(raw: Msg) -> None:
        with contextlib.suppress(DecodeError):
            envelope = decode_envelope(raw.data)
            if isinstance(envelope, Error) or (
                isinstance(envelope, SessionEvent) and envelope.stop_reason is not None
            ):
                ended.put_nowait(envelope)

    try:
        await nc.subscribe(ns.events(person, session_id), cb=on_message)
        await waited(nc.flush(), None, watch)  # an end stored after the read below comes live
        end = await waited(_stored_end(history, ns, person, session_id), None, watch)
        if end is not None:
            print(ended_line(session_id, end), file=out)
            return 1
        try:
            await waited(submit_as(nc, ns, person, stop), None, watch)
        except (TimeoutError, nats.errors.Error) as exc:  # not stored: never say it was
            print(f"the stop was not stored ({exc!r}): try again", file=out)
            return 1
        news = await waited(ended.get(), wait_s, watch, what=f"session {session_id} to end")
    except TimeoutError:
        print(
            f"stop requested for session {session_id}; it did not end within {wait_s:.0f} s: "
            "it ends as canceled once the router opens it (unless it had ended already, too "
            "long ago to read)",
            file=out,
        )
        return 0
    except ConnectionLost as lost:
        print(lost_line(lost.url, session_id), file=out)
        return EXIT_LOST
    if isinstance(news, Error):
        print(f"refused: {news.code}: {news.message}", file=out)
        return 1
    print(f"stopped: {news.stop_reason} (round {news.round})", file=out)
    return 0


async def _stored_end(
    history: JetStreamContext | None, ns: Namespace, person: str, session_id: str
) -> SessionEvent | None:
    """The session's end, if one is stored (tools/_stored_events.py `stored_end`)."""
    if history is None:
        return None
    try:
        return await stored_end(history, ns, person, session_id)
    except StoredUnreadable as exc:  # a broker that does not grant the read, say
        print(
            f"could not read how session {session_id} stands ({exc}): sending the stop",
            file=sys.stderr,
        )
        return None


def on_stop_signals() -> asyncio.Event:
    """The event the first Ctrl-C (SIGINT), SIGTERM or closed terminal (SIGHUP, or a write
    finding it hung up: tools/_terminal_gone.py) sets: the command asks the router to stop
    the session it opened, as it does when it gives up. A second Ctrl-C cancels the running
    task (the person leaves at once); a second SIGTERM or SIGHUP does not, so a session
    manager sending both cannot cut the Stop short. A signal ignored when the command started
    stays ignored: `nohup parley collab …` keeps running past the person's logout. Call from
    the command's task.

    SIGTERM and SIGHUP used to end the process where it stood: a session whose terminal was
    closed ran on to its cap with nobody watching (with real models, paid calls)."""
    stop = asyncio.Event()
    main = asyncio.current_task()
    presses = 0

    def on_signal(signum: signal.Signals) -> None:
        nonlocal presses
        if signum is signal.SIGHUP:
            silence_terminal()  # the terminal is gone: what is printed next goes nowhere
        elif signum is signal.SIGINT:
            presses += 1
            if presses > 1 and main is not None:
                main.cancel()  # the second Ctrl-C: leave without waiting for the router
        stop.set()

    loop = asyncio.get_running_loop()
    for signum in _STOP_SIGNALS:
        if signal.getsignal(signum) is not signal.SIG_IGN:
            loop.add_signal_handler(signum, on_signal, signum)
    when_terminal_gone(stop.set)
    return stop


def run_command(name: str, command: Callable[[], Coroutine[Any, Any, int]]) -> int:
    """Run a waiting command and turn what ends it into its exit code, with one line on
    standard error for a configuration that cannot work or a server that cannot be reached."""
    configure_tracing("person", name)  # only if OTEL_* asks for it
    try:
        with guarded_output():  # a terminal closed mid-write still stops the session
            return asyncio.run(command())
    except ConfigError as exc:
        return report_failure(name, exc, 2)
    except ConnectionLost as exc:
        debug_traceback(exc)
        print(f"parley {name}: {lost_line(exc.url, None)}", file=sys.stderr)
        return EXIT_LOST
    except Unreachable as exc:
        debug_traceback(exc)
        print(f"parley {name}: {exc}", file=sys.stderr)
        return EXIT_LOST
    except BrokenPipeError:
        raise  # `parley … | head`: the reader left, which the guard (run_guarded) says nothing of
    except (OSError, nats.errors.NoServersError, nats.errors.ConnectionClosedError) as exc:
        return report_failure(name, exc, EXIT_LOST)
    finally:
        shutdown_tracing()  # the command's root spans are exported before it exits
