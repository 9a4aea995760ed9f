"""`parley run a2a`: the A2A edge as an actor process.

It reads no stream. Its own nkey user beats its heartbeat and reads the signed policy bundle
(to know which agents are exposed); everything it does for a client goes through the gate as
that client's own principal (actors/a2a/_clients.py), exactly as the console does for a person.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import Sequence

import uvicorn

from actors.a2a._app import EdgeApp, edge_app
from actors.a2a._clients import Clients
from actors.a2a._exposure import Exposure
from actors.a2a._options import A2aOptions
from bus import (
    Actor,
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

__all__ = ("A2aActor",)

log = logging.getLogger("parley.a2a")


class A2aActor(Actor):
    """Serves the exposed agents' Agent Cards and A2A methods until stopped."""

    kind = "a2a"

    def __init__(self, settings: Settings) -> None:
        super().__init__(settings)
        self.options = validated_options(A2aOptions, settings.options, "a2a")
        try:
            self._trusted = load_public_keys(self.options.policy_keys)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
        self.clients = Clients(self.options.tokens_file, self.options.people_dir, settings.nats_url)
        self.exposure: Exposure | None = None
        self.app: EdgeApp = edge_app(self.clients, self.exposed, self.options)

    def inputs(self) -> Sequence[Input]:
        return ()

    def exposed(self) -> frozenset[str]:
        """The agents the bundle in force exposes (none without a bundle)."""
        return self.exposure.agents() if self.exposure is not None else frozenset()

    async def start(self, bus: BusHandle) -> None:
        policy = await asked_at_start(
            bus.refusals,
            lambda: bus.js.key_value(self.namespace.bucket("policy")),
            "the policy bucket",
        )
        self.exposure = Exposure(policy, self._trusted, self.options.tenant)
        await self.exposure.refresh()

    async def background(self, stopping: asyncio.Event) -> None:
        """Follow the bundle, and serve: bound first, so the logged URL accepts at once."""
        watching = None
        if self.exposure is not None:
            refresh_s = self.options.bundle_refresh_s
            watching = asyncio.create_task(self.exposure.follow(stopping, refresh_s))
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind((self.options.host, self.options.port))
        listener.listen(128)
        host, port = listener.getsockname()[:2]
        url = f"http://{host}:{port}"
        self.app.base_url = self.options.public_url or url
        config = uvicorn.Config(
            self.app, log_config=None, access_log=False, lifespan="off", timeout_graceful_shutdown=5
        )
        server = uvicorn.Server(config)
        serving = asyncio.create_task(server.serve(sockets=[listener]))
        log.info("a2a listening", extra={"url": url, "exposed": sorted(self.exposed())})
        if self.options.url_file is not None:
            self.options.url_file.parent.mkdir(parents=True, exist_ok=True)
            self.options.url_file.write_text(url + "\n")
        stop_wait = asyncio.create_task(stopping.wait())
        await asyncio.wait({serving, stop_wait}, return_when=asyncio.FIRST_COMPLETED)
        server.should_exit = True
        stop_wait.cancel()
        await serving
        listener.close()
        if watching is not None:
            await watching

    async def stop(self) -> None:
        if self.options.url_file is not None:
            self.options.url_file.unlink(missing_ok=True)
        await self.clients.close()

    async def handle(self, envelope: AnyEnvelope, ctx: Context) -> None:
        raise RuntimeError("the A2A edge reads no stream")
