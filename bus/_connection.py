"""Connecting an actor to NATS with settings fit for a long-lived process.

nats-py's defaults suit short scripts: it gives up reconnecting after 60 attempts, notices a
dead server only after minutes, and hands every connection the shared `_INBOX.>` prefix.
Actors know every server they were given (a cluster's nodes), reconnect forever to any of them,
ping every few seconds, use their own inbox prefix (so broker permissions can keep one actor
from reading another's replies), and count the permission violations the server reports
asynchronously (a refused publish does not raise). A command a person waits on is the
opposite: it reconnects for a few seconds only and pings more often, so that a server gone is
said within seconds instead of waited out (tools/_waiting.py).
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections import deque
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any, ClassVar

from nats.aio.client import Client as NATS
from nats.errors import NoServersError
from nats.js import JetStreamContext

from bus._barrier_client import BarrierClient
from bus._fsync_check import check_fsync
from bus._lost_requests import fail_lost_requests
from bus._metrics import ActorMetrics
from bus._settings import ConfigError, Settings
from schemas import Namespace

__all__ = (
    "FIRST_CONNECT_ATTEMPTS",
    "RECONNECT_WAIT_S",
    "RECONNECT_WINDOW_S",
    "Link",
    "connect",
    "connect_when_up",
    "drain",
    "jetstream",
)

log = logging.getLogger("parley.bus.connection")

RECONNECT_WAIT_S = 0.5
"""The pause between reconnect attempts to one server (nats-py's default is 2 s)."""
FIRST_CONNECT_ATTEMPTS = 2
"""Attempts at each server, after the first, before a first connect gives up (`connect`)."""
RECONNECT_WINDOW_S = 2.0
"""How long a short-lived connection (a command a person waits on) tries to reconnect before
it closes for good, by default: short enough that the person hears within seconds that the
server is gone. A command talking to the server `parley up` keeps, which `parley up` restarts,
waits longer (tools/_local.py)."""
_SHORT_PING_S = 2
"""A short-lived connection's ping interval: a ping still unanswered when the next is due (a
frozen server, a cut link) counts as a loss within 4 to 6 s, where an actor's five-second
pings would take 15 to 20."""


class Uptime:
    """When this process could last start hearing others again, in wall-clock time: its
    connection was (re)established, or its own heartbeat was written again after failing
    (JetStream recovers after the connection does; a cluster can lose the registry's quorum
    while connections stay up).

    Another actor's silence says something about it only while we could have heard it: after
    a broker outage everyone's heartbeats are old, and nobody is dead for that.

    It also keeps the outages themselves (`deaf`): from the moment the bus saw the connection
    drop, or a heartbeat fail to be written, to the moment it heard again. A call's deadline
    is extended by exactly that time and by nothing else: the process's own (re)start is not
    an outage, so a router killed and restarted every second does not restart every turn
    clock (actors/router/_turn_watch.py).
    """

    KEPT: ClassVar[int] = 256
    """Outages remembered; older ones lie far behind any call still waiting."""

    def __init__(self) -> None:
        self.since = datetime.now(UTC)
        self._lost_at: datetime | None = None
        self._outages: deque[tuple[datetime, datetime]] = deque(maxlen=self.KEPT)

    def lost(self) -> None:
        """The bus stopped hearing (disconnected, or JetStream refused a heartbeat)."""
        if self._lost_at is None:
            self._lost_at = datetime.now(UTC)

    def mark(self) -> None:
        """The bus hears again: close the outage in progress, if any."""
        self.since = datetime.now(UTC)
        if self._lost_at is not None:
            self._outages.append((self._lost_at, self.since))
            self._lost_at = None

    def deaf(self) -> tuple[tuple[datetime, datetime | None], ...]:
        """The outages seen, oldest first; one still going on ends in None."""
        ongoing = () if self._lost_at is None else ((self._lost_at, None),)
        return (*self._outages, *ongoing)


class Link:
    """Whether the connection is up now, as something a task can wait on.

    nats-py tells a disconnect and a reconnect only to the callbacks given to `connect`, and
    keeps what is published meanwhile in a buffer it sends all at once on reconnect. A pull
    request is the one publish that must not wait there: an idle consumer loop gives up on a
    silent request every few seconds, so after a long outage a dozen requests reach the server
    together and linger there, each for a fetch timeout, though the client waits on one only.
    A message the server hands to one of the others comes while no request is open and is
    given back (bus/_puller.py), to the next orphan, and again, until its deliveries run out:
    the actor never sees it. A puller waits for the link instead (`wait_up`), and ends the
    request it had open when the link goes down (`watch`): lost with the connection, no
    answer and no heartbeat will come for it, and a no-wait request has no heartbeat to miss.
    """

    def __init__(self) -> None:
        self._up = asyncio.Event()
        self._up.set()
        self._watchers: list[Callable[[], None]] = []
        self._back_watchers: list[Callable[[], None]] = []

    def watch(self, on_down: Callable[[], None]) -> None:
        """Call `on_down` each time the connection is lost, until `unwatch`."""
        self._watchers.append(on_down)

    def watch_back(self, on_back: Callable[[], None]) -> None:
        """Call `on_back` each time the connection is back (or closed for good), before
        anything waiting in `wait_up` resumes."""
        self._back_watchers.append(on_back)

    def unwatch(self, on_down: Callable[[], None]) -> None:
        if on_down in self._watchers:
            self._watchers.remove(on_down)

    def down(self) -> None:
        self._up.clear()
        for on_down in list(self._watchers):
            on_down()

    def up(self) -> None:
        """Connected again, or closed for good (a publish then raises instead of waiting)."""
        for on_back in list(self._back_watchers):
            on_back()
        self._up.set()

    async def wait_up(self, nc: NATS) -> None:
        """Return once `nc` is connected (at once if it is, or was closed)."""
        if not nc.is_connected and not nc.is_closed:
            self._up.clear()  # the disconnect callback may not have run yet
        await self._up.wait()


async def connect(
    settings: Settings,
    actor_id: str,
    metrics: ActorMetrics | None = None,
    *,
    reconnect_forever: bool = True,
    reconnect_window_s: float = RECONNECT_WINDOW_S,
    uptime: Uptime | None = None,
    link: Link | None = None,
    on_closed: Callable[[], Awaitable[None]] | None = None,
    on_lost: Callable[[], Awaitable[None]] | None = None,
    on_back: Callable[[], Awaitable[None]] | None = None,
    on_refused: Callable[[str], None] | None = None,
    first_attempts: int | None = None,
) -> NATS:
    """Open the actor's connection and return it (already connected); `link` follows it.

    Without `reconnect_forever` the connection is a command's: it tries to reconnect for
    `reconnect_window_s` worth of attempts, then closes, and `on_closed` is awaited (also
    after a close of our own: the caller tells the two apart). `on_lost` and `on_back` are
    awaited when the connection drops (not by our own close) and when it is back;
    `on_refused` is told each permission violation the server reports (nats-py says it only
    to this callback, while the request it refused just goes unanswered). A command's first
    connect tries as often as its reconnects, unless `first_attempts` bounds it: each try at
    a server that accepts the socket and never answers costs the connect timeout.

    Raises:
        ConfigError: an actor's (`reconnect_forever`) first connect found its credentials
            rejected: a config problem to say as one, not a server to wait for.
        NoServersError, OSError: no server could be reached."""
    ns = Namespace(settings.namespace)
    # A command says in its own words what a lost connection means (tools/_waiting.py): each
    # failed reconnect attempt is not a line for the person waiting on it.
    quiet_or_warn = logging.WARNING if reconnect_forever else logging.DEBUG

    # Who the server knows this connection as, for a refusal's log line: a command names
    # the role and credentials it was refused as (tools/_refused.py).
    who = {"user": settings.user or settings.actor_id or actor_id, "role": actor_id}

    async def on_error(exc: Exception) -> None:
        text = str(exc)
        if "permissions violation" in text.lower():
            if metrics is not None:
                metrics.permission_violations.labels(actor_id).inc()
            log.warning("permission violation", extra={"error": text, **who})
            if on_refused is not None:
                on_refused(text)
        elif "authorization violation" in text.lower():  # credentials this server rejects
            log.warning("authorization violation", extra={"error": text, **who})
            if not client:
                rejected.append(text)
        else:
            if metrics is not None:
                metrics.connection_events.labels(actor_id, "error").inc()
            log.log(quiet_or_warn, "nats error", extra={"error": text})

    client: list[NATS] = []  # set once connected, so callbacks can tell a drain from a loss
    rejected: list[str] = []  # authorization violations before the first connect

    async def on_disconnect() -> None:
        if client and (client[0].is_draining or client[0].is_closed):
            return  # our own graceful close
        if metrics is not None:
            metrics.connection_events.labels(actor_id, "disconnect").inc()
        if uptime is not None:
            uptime.lost()
        if link is not None:
            link.down()
        log.log(quiet_or_warn, "disconnected from nats")
        if on_lost is not None:
            await on_lost()

    async def on_reconnect() -> None:
        if link is not None:
            link.up()
        if uptime is not None:
            uptime.mark()
        if metrics is not None:
            metrics.connection_events.labels(actor_id, "reconnect").inc()
        log.info("reconnected to nats")
        if on_back is not None:
            await on_back()

    async def closed() -> None:
        if link is not None:
            link.up()  # nobody waits for a reconnect that will never come
        if on_closed is not None:
            await on_closed()

    options: dict[str, Any] = {
        "servers": list(settings.nats_servers),
        "name": f"parley-{actor_id}",
        "inbox_prefix": ns.inbox_prefix(actor_id).encode(),
        "error_cb": on_error,
        "disconnected_cb": on_disconnect,
        "reconnected_cb": on_reconnect,
        "closed_cb": closed,
        "ping_interval": 5 if reconnect_forever else _SHORT_PING_S,
        "max_outstanding_pings": 3 if reconnect_forever else 1,
        "reconnect_time_wait": RECONNECT_WAIT_S,
        "max_reconnect_attempts": (
            -1 if reconnect_forever else math.ceil(reconnect_window_s / RECONNECT_WAIT_S)
        ),
        "allow_reconnect": True,
        "connect_timeout": 5,
    }
    if settings.user is not None:
        options["user"] = settings.user
        options["password"] = settings.password or ""
    if settings.creds_file is not None:
        options["user_credentials"] = str(settings.creds_file)
    if settings.nkey_seed_file is not None:
        # nats-py reads the seed from the file at each (re)connect to sign the server's nonce.
        options["nkeys_seed"] = str(settings.nkey_seed_file)
    connection: NATS = BarrierClient()  # its flush() is a barrier (bus/_barrier_client.py)
    # nats-py tries a first connect as it reconnects: under `max_reconnect_attempts=-1`, for
    # ever, never returning to check a deadline or a stop (an actor started with no server
    # ignored Ctrl-C and SIGTERM, and its `server_wait_s` never ran out). The first connect
    # tries each server a few times, then raises NoServersError (`connect_when_up` waits and
    # tries again); once connected, the connection reconnects as configured.
    first = {**options, "max_reconnect_attempts": first_attempts or FIRST_CONNECT_ATTEMPTS}
    try:
        await connection.connect(**(first if reconnect_forever or first_attempts else options))
    except NoServersError:
        if reconnect_forever and rejected:  # an actor: a commands says it in its own words
            raise ConfigError(
                f"the server at {', '.join(settings.nats_servers)} rejected the credentials of "
                f"`{who['user']}` ({rejected[-1]}): it is not a user of this server's config. "
                "Run it with the settings file written for this server (`parley up` writes "
                "them under .parley/broker/actors/, `parley nats-config` under its --out), "
                "after adding it there if it is new"
            ) from None
        raise
    connection.options["max_reconnect_attempts"] = options["max_reconnect_attempts"]
    client.append(connection)
    if link is not None:
        fail_lost_requests(connection, link)  # nats-py's own, as the inbox does its (module doc)
    if uptime is not None:
        uptime.mark()
    return connection


async def connect_when_up(
    settings: Settings,
    actor_id: str,
    metrics: ActorMetrics,
    uptime: Uptime,
    stopping: asyncio.Event,
    link: Link | None = None,
    on_refused: Callable[[str], None] | None = None,
) -> NATS | None:
    """Check the server fsyncs (`check_fsync`) and connect, waiting up to `server_wait_s` for
    a server that is unreachable; None when `stopping` came first.

    An actor (re)started while its server is down (being restarted by `parley up`, a node
    rejoining) would otherwise exit at once, be restarted at once, and use up its
    supervisor's restart intensity in a few seconds: a crash loop about nothing but a short
    outage. A server that stays away past `server_wait_s` is an outage worth exiting for.

    Raises:
        OSError, NoServersError: the server stayed unreachable for `server_wait_s`.
        FsyncCheckError: it answered, and does not fsync every write.
        ConfigError: it answered, and rejected the actor's credentials (said at once, not
            after `server_wait_s` of retries ending in "bus unavailable").
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + settings.server_wait_s
    said = checked = False
    while True:
        try:
            if not checked:  # once told (or not tellable, said once), not asked again
                await check_fsync(settings)
                checked = True
            connecting = asyncio.ensure_future(
                connect(
                    settings, actor_id, metrics, uptime=uptime, link=link, on_refused=on_refused
                )
            )
            stop = asyncio.ensure_future(stopping.wait())
            await asyncio.wait((connecting, stop), return_when=asyncio.FIRST_COMPLETED)
            stop.cancel()
            if not connecting.done():  # a stop while a server takes its time to answer
                connecting.cancel()
                await asyncio.gather(connecting, return_exceptions=True)
                return None
            return connecting.result()
        except (OSError, NoServersError) as exc:
            if loop.time() >= deadline:
                raise
            if not said:
                said = True
                log.warning(
                    "server unreachable at start: waiting for it",
                    extra={"error": repr(exc), "wait_s": settings.server_wait_s},
                )
        try:
            async with asyncio.timeout(min(RECONNECT_WAIT_S, max(deadline - loop.time(), 0))):
                await stopping.wait()
            return None
        except TimeoutError:
            pass


def jetstream(nc: NATS, settings: Settings) -> JetStreamContext:
    """The JetStream context of a connection made with `settings`: its API requests go where
    the actor's account reaches JetStream (`js_api_prefix`)."""
    return nc.jetstream(prefix=settings.js_api_prefix)


async def drain(nc: NATS) -> None:
    """Drain the connection (its subscriptions' messages in hand are handled), or close it
    when that takes over 5 s, or at once when the server is gone.

    An actor stopped while its server is down must still stop cleanly (exit 0), not crash:
    nats-py refuses to drain a reconnecting connection, and its `close()` then writes the
    bytes buffered during the outage to the transport the server's death closed, which
    raises. Those bytes are core publishes nobody was promised; what JetStream acknowledged
    is already stored, and what it did not is redelivered.
    """
    if nc.is_closed:
        return
    if nc.is_connected:
        try:
            await asyncio.wait_for(nc.drain(), timeout=5)
            return
        except Exception as exc:  # closing anyway
            log.debug("drain failed", extra={"error": repr(exc)})
    else:
        log.info("closing without a drain: the server is unreachable")
    try:
        await nc.close()
    except (RuntimeError, OSError) as exc:  # the dead transport; the client is closed anyway
        log.debug("close after the server was gone", extra={"error": repr(exc)})
