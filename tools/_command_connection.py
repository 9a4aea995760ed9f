"""A command's connection to the system's NATS server: retried while nothing listens there,
and said at once when the server there does not answer (tools/_local.py's settings).

A command connects as the role its settings name and reconnects for a few seconds only
(`reconnect_window_s`): a person waits on it. Its first connect is tried again while nothing
listens at the address, for the same window (a server `parley up` is restarting); a server
that takes the socket and never answers (stopped, overloaded, or no NATS server) is said at
once, after two tries of the connect timeout each: a frozen server kept commands waiting two
minutes, then told them to start a `parley up` that was running (an operator's walk).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Final
from urllib.parse import urlsplit

from nats.aio.client import Client as NATS
from nats.errors import NoServersError

from bus import RECONNECT_WAIT_S, ConfigError, Settings, connect
from tools._errors import ServerUnreachable
from tools._local import reconnect_window_s
from tools._refused import Refusals, refusal_line
from tools._still_waiting import announced

__all__ = ("connect_local",)

_LISTENING_S: Final = 1.0
"""How long a look at whether anything listens at the server's address waits."""
_TRIES_BEYOND_THE_FIRST: Final = 1
"""nats-py gives up on a server after its first try and this many more: two tries a round."""
_SILENT_AFTER_S: Final = 8.0
"""A round this long waited out its tries' connect timeouts (5 s each), where a server that is
down refuses them at once."""


async def connect_local(
    settings: Settings,
    role: str,
    *,
    on_closed: Callable[[], Awaitable[None]] | None = None,
    on_lost: Callable[[], Awaitable[None]] | None = None,
    on_back: Callable[[], Awaitable[None]] | None = None,
) -> NATS:
    """Connect a command as `role`, or fail with what to set (module doc); `on_closed`,
    `on_lost` and `on_back` (bus.connect's) hear how it fares (tools/_waiting.py watches it).

    Raises:
        ServerUnreachable: no server answered at the settings' URL.
        ConfigError: the server rejected the credentials.
    """
    loop = asyncio.get_running_loop()
    window = reconnect_window_s(settings)
    deadline = loop.time() + window

    async def first_connect() -> NATS:
        while True:
            started = loop.time()
            try:
                return await connect(
                    settings,
                    role,
                    reconnect_forever=False,
                    reconnect_window_s=window,
                    on_closed=on_closed,
                    on_lost=on_lost,
                    on_back=on_back,
                    first_attempts=_TRIES_BEYOND_THE_FIRST,
                )
            except (NoServersError, OSError, TimeoutError):
                if refusals.first() is not None or loop.time() >= deadline:
                    raise
                # Refused at once, it was down; then listening, a restart has just begun:
                # tried again. Only tries that each waited out the timeout mean silence.
                silent = loop.time() - started >= _SILENT_AFTER_S
                if silent and await _listening(settings.nats_servers):
                    raise
            await asyncio.sleep(RECONNECT_WAIT_S)  # a server being restarted: try again

    refusals = Refusals().install()  # rejected credentials also end as "no servers"
    try:
        return await announced(
            first_connect(),
            f"the NATS server at {settings.nats_url} to answer (connecting as `{role}`)",
        )
    except (NoServersError, OSError, TimeoutError) as exc:
        rejected = refusals.first()
        if rejected is not None and rejected.credentials_rejected:
            raise ConfigError(refusal_line(rejected)) from None
        if await _listening(settings.nats_servers):
            raise ServerUnreachable(
                f"the NATS server at {settings.nats_url} takes connections but does not answer "
                "them: it is stopped (SIGSTOP), overloaded, or no NATS server listens there"
            ) from None
        raise ServerUnreachable(
            f"no NATS server answers at {settings.nats_url} ({exc.__class__.__name__}): "
            "start the local system with `parley up` in this directory, or set NATS_URL "
            "(and --config with this role's credentials for a locked-down broker)"
        ) from None
    finally:
        refusals.remove()


async def _listening(urls: Sequence[str]) -> bool:
    """Whether something at one of `urls` accepts a TCP connection within a second."""
    for url in urls:
        parts = urlsplit(url if "://" in url else f"nats://{url}")
        try:
            async with asyncio.timeout(_LISTENING_S):
                _, writer = await asyncio.open_connection(parts.hostname, parts.port or 4222)
        except (OSError, TimeoutError, ValueError):
            continue
        writer.close()
        return True
    return False
