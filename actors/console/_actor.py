"""`parley run console`: the web console and JSON-RPC control API as an actor process.

It reads no stream and owns no state on the bus: it is an HTTP server (uvicorn) and, for each
person, that person's own principal (actors/console/_person.py). Its own nkey user beats its
heartbeat and reads the policy bundle (to check it before a session starts, seed 002 §6);
everything it does for a person goes through the gate as that person.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import Sequence

import uvicorn

from actors.console._agents import AgentDirectory
from actors.console._app import MAX_BODY_BYTES, console_app
from actors.console._handshake import Handshake
from actors.console._options import ConsoleOptions
from actors.console._people import People
from bus import (
    Actor,
    BundleReader,
    BusHandle,
    ConfigError,
    Context,
    Input,
    Settings,
    asked_at_start,
    load_public_keys,
    validated_options,
)
from schemas import AnyEnvelope

__all__ = ("ConsoleActor",)

log = logging.getLogger("parley.console")


class ConsoleActor(Actor):
    """Serves the console on `options.host:options.port` until stopped."""

    kind = "console"

    def __init__(self, settings: Settings) -> None:
        super().__init__(settings)
        self.options = validated_options(ConsoleOptions, settings.options, "console")
        self.people = People(self.options, settings.nats_url)

    def inputs(self) -> Sequence[Input]:
        return ()

    async def start(self, bus: BusHandle) -> None:
        self.people.agents = AgentDirectory(bus.js, bus.namespace)
        await self.people.open_all()
        if self.options.policy_keys:
            features = {
                "patchPreview": self.options.workspaces is not None,
                "auditViews": self.people.audit is not None,  # configured, and it opened
            }
            self.people.handshake = Handshake(
                await self._bundle_reader(bus), features, directory=self.people.agents
            )

    async def _bundle_reader(self, bus: BusHandle) -> BundleReader:
        """The bundle in force, verified with the signers' keys as the gate verifies it, read
        by a stored message's get (the console serves HTTP: no consumer)."""
        try:
            trusted = load_public_keys(list(self.options.policy_keys))
        except ValueError as exc:
            raise ConfigError(f"console option policy_keys: {exc}") from None
        policy = await asked_at_start(
            bus.refusals,
            lambda: bus.js.key_value(bus.namespace.bucket("policy")),
            "the policy bucket",
        )
        reader = BundleReader(policy, trusted, self.options.tenant)
        await reader.refresh()
        return reader

    async def background(self, stopping: asyncio.Event) -> None:
        """Bind and listen first (so the logged URL already accepts connections), then serve
        until `stopping`; uvicorn finishes the requests in hand."""
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind((self.options.host, self.options.port))
        listener.listen(128)
        host, port = listener.getsockname()[:2]
        config = uvicorn.Config(
            console_app(self.people, self._allowed_hosts()),
            log_config=None,
            access_log=False,
            lifespan="off",
            # The sans-I/O implementation: uvicorn's legacy `websockets` one warns at every
            # start that it is deprecated and will go.
            ws="websockets-sansio",
            timeout_graceful_shutdown=5,
            ws_max_size=MAX_BODY_BYTES,
        )
        server = uvicorn.Server(config)
        serving = asyncio.create_task(server.serve(sockets=[listener]))
        url = f"http://{host}:{port}/"
        log.info("console listening", extra={"url": url})
        self._tell_url(url)
        stop_wait = asyncio.create_task(stopping.wait())
        await asyncio.wait({serving, stop_wait}, return_when=asyncio.FIRST_COMPLETED)
        server.should_exit = True
        stop_wait.cancel()
        await serving
        listener.close()

    def _tell_url(self, url: str) -> None:
        """Say where the page is in words a person reads in `parley up`'s output (the log line
        is JSON), and write it to `url_file` for scripts: with port 0 nobody can guess it."""
        url_file = self.options.url_file
        if url_file is not None:  # first: whoever reads the line may look for the file at once
            url_file.parent.mkdir(parents=True, exist_ok=True)
            url_file.write_text(url + "\n")
        words = f"Console: {url} (sign in with a token from `parley console token`)"
        print(words, flush=True)  # noqa: T201 - for a person, beside the JSON log line

    def _allowed_hosts(self) -> tuple[str, ...]:
        host = self.options.host
        unspecified = host in ("0.0.0.0", "::", "")  # noqa: S104 - compared, not bound
        return self.options.allowed_hosts if unspecified else (*self.options.allowed_hosts, host)

    async def stop(self) -> None:
        if self.options.url_file is not None:
            self.options.url_file.unlink(missing_ok=True)  # a stopped console has no URL
        await self.people.close()

    async def handle(self, envelope: AnyEnvelope, ctx: Context) -> None:
        raise RuntimeError("the console reads no stream")
