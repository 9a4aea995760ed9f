"""`parley up`: the local system, owned by one process.

`parley up` owns what it starts. Its embedded nats-server and every actor die with it however
it ends (bus/_lifeline.py); SIGINT, SIGTERM and SIGHUP (its terminal closed) stop it in order.
Its store is locked from before anything is written for it (bus/_store_lock.py), so a second
`parley up` on the same store is refused at once, naming the first. It writes the server's
URL to `.parley/nats.url` and itself to `.parley/up.pid` (tools/_local_owner.py), so no command
follows the URL of a `parley up` that is gone.

It supervises its server as it supervises its actors: a server that exits is started again on
the same ports and store after a backoff, each restart said; past `SERVER_INTENSITY` restarts
within `SERVER_PERIOD_S` it gives up, naming the server. Actors ride the outage out on their
own reconnects.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import signal
import sys
import time
from collections import deque
from pathlib import Path
from typing import Final
from urllib.parse import urlsplit

from bus import (
    EmbeddedCluster,
    EmbeddedServer,
    NatsServerError,
    Supervisor,
    load_topology,
    shipped,
)
from bus._process import exit_text
from bus._supervisor import GiveUp
from schemas import Namespace
from tools._errors import ServerUnreachable
from tools._llm_settings import take_provider_keys
from tools._local import (
    LOCAL_BROKER,
    LOCAL_DIR,
    claim_local_directory,
    forget_local_system,
    local_cluster,
    local_server_text,
    lock_down,
    provision_locked,
    record_local_system,
)
from tools._local_system import GATEWAY_SETTINGS, LOCAL_SYSTEM, load_system, system_topology
from tools._metrics_targets import TARGETS_FILE, MetricsTargets
from tools._nats_contexts import LOCAL_CONTEXTS, context_hint, write_nats_contexts
from tools._system_policy import (
    RECORD_NAME,
    BundleSource,
    publish_system_policy,
    read_bundle_source,
)
from tools.provision import provision_once

__all__ = (
    "SERVER_BACKOFF_S",
    "SERVER_INTENSITY",
    "SERVER_PERIOD_S",
    "SERVER_STABLE_S",
    "ServerKeeper",
    "up",
)

SERVER_BACKOFF_S = (0.5, 1.0, 2.0, 4.0)
"""The pause before each successive restart of the server."""
SERVER_INTENSITY = 5
"""Restarts of the server allowed within `SERVER_PERIOD_S` before `parley up` gives up."""
SERVER_PERIOD_S = 60.0
_NOT_STARTED = 127
"""The exit counted for a restart that could not start the server at all."""
SERVER_STABLE_S = 10.0
"""A server that ran this long before it exited is restarted after the shortest backoff."""

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
READY_HINT = "run parley commands in another terminal, from this directory; Ctrl-C stops everything"
"""Said once every actor has said it is ready: what a person does next."""
CONSOLE_LINE = re.compile(r"^Console: (\S+)")
"""The console's line for a person (actors/console/_actor.py): its URL goes on the ready
line, which a person reads, not forty lines of JSON above it."""


_CONTROL: Final = re.compile(r"[\x00-\x08\x0a-\x1f\x7f-\x9f]")
"""Control characters but tab, C1 ones too (a terminal may obey U+009B, U+008D...): a
carriage return or an escape sequence in a child's output
(an agent's own program writes there) could redraw the terminal's line as `parley up`'s."""


def shown(line: str) -> str:
    """A child's output line as `parley up` prints it: its control characters made visible."""
    return _CONTROL.sub("\N{REPLACEMENT CHARACTER}", line)


def _say(text: str) -> None:
    """Each line as the server's own (a failed restart's reason spans several: the server's
    last words), so none reads as another process's."""
    for line in text.splitlines() or [""]:
        print(f"[nats] {line}", flush=True)


class ServerKeeper:
    """Restart one embedded server when it exits: same ports, same store, with backoff."""

    server: EmbeddedServer
    """Set once made, with `exited` as its `on_exit`."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.gave_up: str | None = None
        self._loop = loop
        self._exits: asyncio.Queue[int] = asyncio.Queue()
        self._restarts: deque[float] = deque()

    def exited(self, code: int) -> None:
        """The server's `on_exit`, called on its output thread."""
        try:
            self._loop.call_soon_threadsafe(self._exits.put_nowait, code)
        except RuntimeError:  # the loop is closed: `parley up` has ended
            pass

    async def run(self, stopping: asyncio.Event) -> None:
        """Restart the server each time it exits, until `stopping`; past the intensity, say
        why in `gave_up` and set `stopping`."""
        attempt, started = 0, time.monotonic()
        while not stopping.is_set():
            code = await self._next_exit(stopping)
            if code is None:
                return
            now = time.monotonic()
            if now - started > SERVER_STABLE_S:  # it held: a new failure starts the backoff over
                attempt = 0  # (a restart that failed did not hold: `started` is its attempt's)
            self._restarts.append(now)
            while self._restarts and now - self._restarts[0] > SERVER_PERIOD_S:
                self._restarts.popleft()
            if len(self._restarts) > SERVER_INTENSITY:
                self.gave_up = (
                    f"nats-server keeps dying: it exited ({exit_text(code)}) "
                    f"{len(self._restarts)} times within {SERVER_PERIOD_S:g}s "
                    f"(store {self.server.store_dir})"
                )
                stopping.set()
                return
            delay = SERVER_BACKOFF_S[min(attempt, len(SERVER_BACKOFF_S) - 1)]
            attempt += 1
            _say(f"exited ({exit_text(code)}); restarting in {delay:g}s")
            try:
                async with asyncio.timeout(delay):
                    await stopping.wait()
                return
            except TimeoutError:
                pass
            started = time.monotonic()  # judged from the attempt: one that failed did not hold
            try:
                await asyncio.to_thread(self.server.start)
            except NatsServerError as exc:  # its exit is queued; the next turn counts it
                _say(f"restart failed: {exc}")
                continue
            except Exception as exc:  # not even started (no binary, no disk): no exit comes
                _say(f"restart failed: {exc!r}")
                self._exits.put_nowait(_NOT_STARTED)  # counted like an exit, toward giving up
                continue
            _say(f"restarted (pid {self.server.pid}) at {self.server.url}")

    async def _next_exit(self, stopping: asyncio.Event) -> int | None:
        exit_wait = asyncio.ensure_future(self._exits.get())
        stop_wait = asyncio.ensure_future(stopping.wait())
        await asyncio.wait({exit_wait, stop_wait}, return_when=asyncio.FIRST_COMPLETED)
        stop_wait.cancel()
        if not exit_wait.done():
            exit_wait.cancel()
            return None
        return None if stopping.is_set() else exit_wait.result()


_ANSWERS_WITHIN_S = 3.0
"""How long `parley up` given `NATS_URL` waits for a server there to accept a connection."""


async def _check_server_listens(urls: str) -> None:
    """Return once a server at one of `urls` (NATS_URL's, comma-separated) accepts a TCP
    connection: `parley up` given `NATS_URL` supervises actors on a server it does not start,
    and with nothing listening there it started every actor to die reconnecting, then gave up
    on restarts 35 s later without saying the server was missing. Only listening is checked:
    whether these credentials may use it is each actor's to say.

    Raises:
        ServerUnreachable: nothing listens at any of them.
    """
    for url in urls.split(","):
        try:
            parts = urlsplit(url.strip() if "://" in url else f"nats://{url.strip()}")
            async with asyncio.timeout(_ANSWERS_WITHIN_S):
                _, writer = await asyncio.open_connection(parts.hostname, parts.port or 4222)
        except (OSError, TimeoutError, ValueError):
            continue
        writer.close()
        return
    raise ServerUnreachable(
        f"no NATS server answers at {urls} (NATS_URL): start one there, or unset NATS_URL "
        "for `parley up` to start its own"
    )


def _server_line(line: str) -> None:
    if "[WRN]" in line or "[ERR]" in line or "[FTL]" in line:
        _say(line)


async def up(args: argparse.Namespace) -> int:
    """Run `parley up` until a stop signal; its exit code."""
    bundle: BundleSource | None = None
    env = dict(os.environ)
    claim = claim_local_directory()  # before anything is written under `.parley/`
    loop = asyncio.get_running_loop()
    server: EmbeddedServer | EmbeddedCluster | None = None
    keeper: ServerKeeper | None = None
    if "NATS_URL" not in env:
        store = args.store or LOCAL_DIR / ("cluster" if args.cluster else "nats")
        authorization = None if args.open_broker else LOCAL_BROKER / "authorization.conf"
        if args.cluster:
            server = local_cluster(args.cluster, store, authorization)
        else:
            keeper = ServerKeeper(loop)
            server = keeper.server = EmbeddedServer(
                store, on_log=_server_line, authorization=authorization, on_exit=keeper.exited
            )
        server.lock_store()  # before anything is written for it: a second `parley up` stops here
    gateway_settings: Path | None = None  # the provider keys' file, removed at the end
    if args.topology is None or shipped(args.topology).is_dir():
        spec = LOCAL_SYSTEM if args.topology is None else load_system(shipped(args.topology))
        bundle = read_bundle_source(spec.policy)
        keys: dict[str, str] = {}
        if spec.llm:  # the keys are the gateway's alone: no process started here inherits them
            keys = take_provider_keys(os.environ)
            take_provider_keys(env)
        topology = system_topology(spec, bundle.tenant, provider_keys=keys)
        gateway_settings = GATEWAY_SETTINGS if spec.llm else None
    else:
        topology = load_topology(shipped(args.topology))
    people = bundle.people if bundle is not None else ()
    # Every actor serves metrics on a free port of its own, listed in the targets file.
    env.setdefault("PARLEY_METRICS_PORT", "0")
    targets = MetricsTargets(LOCAL_DIR / TARGETS_FILE)
    locked: Namespace | None = None  # the namespace locked down, when it is
    if server is not None:
        if not args.open_broker:
            root = topology.settings.get("namespace", env.get("PARLEY_NAMESPACE", "parley"))
            locked = Namespace(str(root))
            topology = lock_down(topology, locked, people=people)

    waiting_for = {child.name for child in topology.actor}
    console_urls: list[str] = []
    consoles = {child.name for child in topology.actor if child.run == "console"}

    def child_line(name: str, line: str) -> None:
        targets.line(name, line)  # before the line is shown: a reader of both sees them agree
        print(f"[{name}] {shown(line)}", flush=True)
        # Only a console's own line: another child's output (an agent's program) could print
        # the same words to send a person elsewhere.
        console = CONSOLE_LINE.match(line) if name in consoles else None
        if console is not None:
            console_urls[:] = [console.group(1)]  # a console restarted since: its newest
            if not waiting_for:  # told after the ready line: said again where it is read
                _say(f"the console: {console.group(1)}")
        if waiting_for and name in waiting_for and '"msg":"ready"' in line:
            waiting_for.discard(name)
            if not waiting_for:
                names = ", ".join(child.name for child in topology.actor)
                console_at = "".join(f"; the console: {url}" for url in console_urls)
                _say(f"ready: {names}{console_at}; {READY_HINT}")

    stopping = asyncio.Event()
    for signum in STOP_SIGNALS:
        loop.add_signal_handler(signum, stopping.set)
    keeping: asyncio.Task[None] | None = None
    try:
        if server is None:
            await _check_server_listens(env["NATS_URL"])
        else:
            await asyncio.to_thread(server.start)
            env["NATS_URL"] = server.url
            env["PARLEY_MONITOR_URL"] = server.monitor_url
            record_local_system(server.url)  # `parley collab` finds it, while this one lives
            if keeper is not None:
                keeping = asyncio.create_task(keeper.run(stopping))
                # Whatever ends the keeper ends `parley up`: never actors left without a server.
                keeping.add_done_callback(lambda _: stopping.set())
            if locked is not None:
                names = [child.name for child in topology.actor]
                await provision_locked(server.url, names, people=people)
                write_nats_contexts(LOCAL_BROKER, LOCAL_CONTEXTS, server.url, locked)
            elif bundle is not None:  # an open broker: the policy's bucket before its bundle
                await provision_once(None, server.url)
            if bundle is not None:
                namespace = Namespace(env.get("PARLEY_NAMESPACE", "parley"))
                said = await publish_system_policy(
                    server.url,
                    namespace,
                    bundle,
                    locked=locked is not None,
                    record_file=server.store_dir / RECORD_NAME,
                    replace=args.replace_policy,
                )
                if said:
                    _say(said)
            _say(
                f"{local_server_text(server)} (store {server.store_dir}, "
                + (f"locked down: {LOCAL_BROKER}" if locked is not None else "open broker")
                + ")"
            )
            if locked is not None:
                _say(context_hint(LOCAL_CONTEXTS))
        targets.write()  # none yet: a Prometheus reading it finds no stale endpoints
        supervisor = Supervisor(topology, base_env=env, on_line=child_line)
        await supervisor.run(stopping)
        if keeping is not None:
            (failed,) = await asyncio.gather(keeping, return_exceptions=True)
            if failed is not None:
                raise GiveUp(f"the nats-server keeper failed: {failed!r}")
        if keeper is not None and keeper.gave_up is not None:
            raise GiveUp(keeper.gave_up)
    except GiveUp as exc:
        print(f"parley up: giving up: {exc}", file=sys.stderr, flush=True)
        return 1
    finally:
        stopping.set()
        targets.clear()
        if keeping is not None:
            await asyncio.gather(keeping, return_exceptions=True)
        if server is not None:
            forget_local_system()
            await asyncio.to_thread(server.stop)
        if gateway_settings is not None:  # the keys stay no longer than the gateway needs them
            gateway_settings.unlink(missing_ok=True)
        claim.close()  # last: a second `parley up` here finds this one's server gone
    print("parley up: stopped", flush=True)
    return 0
