"""A real nats-server running the least-privilege config of `parley nats-config`.

Every actor connects as its own nkey user, with the settings file the generator wrote for it,
exactly as a deployment would; the provisioner creates the streams first.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from nats.aio.client import Client as NATS
from nats.js import JetStreamContext
from prometheus_client import CollectorRegistry

from bus import (
    ActorMetrics,
    EmbeddedServer,
    Input,
    Settings,
    connect,
    consumer_config,
    jetstream,
    load_settings,
)
from schemas import Namespace
from tools.natsconf import DEFAULT_ACTORS
from tools.provision import provision_once

__all__ = ("LOCKED_ACTORS", "LockedDown", "violations")

LOCKED_ACTORS = DEFAULT_ACTORS  # what `parley nats-config` writes by default


@dataclass(frozen=True)
class LockedDown:
    """The server, the generated config directory and the namespace it was written for."""

    server: EmbeddedServer
    config_dir: Path
    ns: Namespace

    def settings_file(self, actor: str) -> Path:
        return self.config_dir / "actors" / f"{actor}.toml"

    def settings(self, actor: str) -> Settings:
        return load_settings(self.settings_file(actor), nats_url=self.server.url)

    async def connect(self, actor: str, metrics: ActorMetrics | None = None) -> NATS:
        """Connect as `actor`'s nkey user, the way the actor runtime does."""
        return await connect(self.settings(actor), actor, metrics, reconnect_forever=False)

    def js(self, nc: NATS, actor: str) -> JetStreamContext:
        """`actor`'s JetStream context on `nc`: agents and persons reach JetStream only through
        the API their own account imports (tools/natsconf/_permissions.py)."""
        return jetstream(nc, self.settings(actor))

    def tune(self, actor: str, **values: str) -> Path:
        """Add settings (TOML values, as text) to `actor`'s settings file; return its path."""
        path = self.settings_file(actor)
        lines = [f"{key} = {value}" for key, value in values.items()]
        path.write_text(path.read_text() + "\n".join(lines) + "\n")
        return path

    async def gate_submissions(self, js: JetStreamContext) -> JetStreamContext.PullSubscription:
        """What every actor submits, read as the gate reads it: through the gate's own durable
        (the only consumer the gate's user may create on PARLEY_SUBMIT), for a test that plays
        the gate with the gate's credentials."""
        spec = Input(self.ns.stream("submit"), self.ns.wildcard("submit"), "gate", "subject")
        await js.add_consumer(spec.stream, consumer_config(spec, self.settings("gate")))
        return await js.pull_subscribe_bind(durable="gate", stream=spec.stream)

    async def provision(self) -> str:
        """Streams, buckets, and the consumers of every actor that may not create its own."""
        actors = sorted((self.config_dir / "actors").glob("*.toml"))
        return await provision_once(self.settings_file("provisioner"), self.server.url, actors)


def violations(registry: CollectorRegistry, actor: str) -> float:
    """How many permission violations the server reported to `actor`'s connection so far
    (counted by the error callback of bus/_connection.py)."""
    value = registry.get_sample_value("parley_permission_violations_total", {"actor": actor})
    return value or 0.0
