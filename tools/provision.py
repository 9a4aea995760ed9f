"""`parley provision`: create or update the streams and buckets, as the only user allowed to.

Under the least-privilege broker config (deploy/nats/) actors run with `provision = false` and
cannot create, update, purge or delete streams, so an operator provisions once, with the
provisioner's credentials, before the actors start (and again after changing a definition).
Streams and buckets get three replicas on a cluster of three or more nodes, one otherwise, or
the settings' `replicas`, and the settings' quotas (`[quotas]`, docs/quotas.md), applied to
existing streams and buckets as an update. Receivers that may not create consumers (agents,
the router, the CLI) get their durable here, configured from their own settings files:
`parley provision --config P DIR/actors/*.toml`; each agent among them gets its own buckets
(its waits, bounded on their own: docs/quotas.md), which an agent may not create either.
The relay's durables are one per name it serves (actors/relay/_serving.py): the names
`parley nats-config --relay-serves` granted it, read from that config's manifest
(`DIR/actors.json`) unless `--relay-serves` names them.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from nats.errors import Error as NatsError
from nats.js.errors import APIError

from actors.relay import relay_inputs
from bus import (
    AGENT_BUCKETS,
    BUCKETS,
    ConfigError,
    ExitCode,
    Input,
    ProvisionError,
    connect,
    consumer_config,
    load_settings,
    provision,
    stream_configs,
    through_elections_if_clustered,
)
from schemas import Namespace
from tools._errors import report_failure
from tools.natsconf import RELAY, TOOLS, relay_serves_of, role_of

__all__ = ("add_provision_command", "provision_once", "provisioned_inputs")


def provisioned_inputs(
    ns: Namespace, actor_id: str, relay_serves: Sequence[str] = ()
) -> list[Input]:
    """The durables an actor that may not create its own reads: its deliveries, for the
    router, the agents and the tool runtime their reminders (actors/router/_actor.py,
    actors/agent/_delegating.py, actors/tools/_actor.py), for the tool runtime how sessions
    stand, and for the relay the deliveries of each name it serves (`relay_serves`)."""
    if role_of(actor_id) == RELAY:
        return list(relay_inputs(ns, relay_serves))
    inputs = [Input.deliver(ns, actor_id)]
    if role_of(actor_id) in ("router", TOOLS):
        inputs.append(Input.timers(ns, actor_id))
    if role_of(actor_id) == TOOLS:
        inputs.append(Input.session_ends(ns, actor_id))
    elif role_of(actor_id) == "agent":  # in its own stream (`Namespace.agent_stream`)
        inputs.append(Input.agent_timers(ns, actor_id))
    return inputs


async def provision_once(
    config: Path | None,
    nats_url: str | None = None,
    actors: Sequence[Path] = (),
    relay_serves: Sequence[str] | None = None,
) -> str:
    """Provision the namespace of the settings in `config`; return what now exists.

    Each of `actors` (an actor's settings file) that may not create its own consumers gets
    its durables (`provisioned_inputs`), configured from that file as the actor would have; it binds
    to it at start and refuses to start if it differs. Each agent among them gets its own
    buckets (`AGENT_BUCKETS`). `nats_url` overrides the settings'
    server (which otherwise come from `NATS_URL`). `relay_serves`: the relay's served names,
    else those in the manifest of the config its settings file belongs to.

    Raises:
        ConfigError: the settings are invalid, or an actor's namespace is another.
        ProvisionError: JetStream refused a definition.
        OSError, nats.errors.Error: the server cannot be reached or did not answer.
    """
    settings = load_settings(config, nats_url=nats_url)
    ns = Namespace(settings.namespace)
    receivers = [load_settings(path) for path in actors]
    serves = {
        path: tuple(relay_serves)
        if relay_serves is not None
        else relay_serves_of(path.parent.parent)
        for path in actors
    }
    for receiver in receivers:
        if receiver.namespace != ns.root:
            raise ConfigError(
                f"actor {receiver.actor_id} is in namespace {receiver.namespace}, not {ns.root}"
            )
    agents = list(
        dict.fromkeys(
            r.actor_id for r in receivers if r.actor_id and role_of(r.actor_id) == "agent"
        )
    )
    nc = await connect(settings, settings.actor_id or "provisioner", reconnect_forever=False)
    created = []
    try:
        js = nc.jetstream()
        replicas = await provision(
            js,
            ns,
            max_msg_size=settings.max_payload,
            replicas=settings.replicas,
            quotas=settings.quotas,
            agents=agents,
            retention=settings.retention,
        )
        for path, receiver in zip(actors, receivers, strict=True):
            if receiver.create_consumers or not receiver.actor_id:
                continue
            for spec in provisioned_inputs(ns, receiver.actor_id, serves[path]):
                try:  # a cluster started again: the stream may be electing its leader
                    await through_elections_if_clustered(
                        js,
                        functools.partial(
                            js.add_consumer, spec.stream, consumer_config(spec, receiver)
                        ),
                        f"the consumer {spec.durable} on {spec.stream}",
                    )
                except APIError as exc:
                    raise ProvisionError(
                        f"cannot create consumer {spec.durable} on {spec.stream}: {exc}"
                    ) from exc
                created.append(f"{spec.stream}/{spec.durable}")
    finally:
        await nc.close()
    streams = ", ".join(
        [c.name or "" for c in stream_configs(ns)]
        + [ns.agent_stream("timers", agent) for agent in agents]
    )
    buckets = ", ".join(
        [ns.bucket(spec.name) for spec in BUCKETS]
        + [ns.agent_bucket(spec.name, agent) for agent in agents for spec in AGENT_BUCKETS]
    )
    consumers = f"; consumers {', '.join(created)}" if created else ""
    return (
        f"provisioned namespace {ns.root} at {replicas} replica{'s' if replicas > 1 else ''}: "
        f"streams {streams}; buckets {buckets}{consumers}"
    )


def _cmd_provision(args: argparse.Namespace) -> int:
    try:
        serves = None
        if args.relay_serves is not None:
            serves = [name.strip() for name in args.relay_serves.split(",") if name.strip()]
        print(asyncio.run(provision_once(args.config, actors=args.actors, relay_serves=serves)))
    except ConfigError as exc:
        return report_failure("provision", exc, int(ExitCode.CONFIG))
    except (ProvisionError, OSError, NatsError, TimeoutError) as exc:
        return report_failure("provision", exc, int(ExitCode.UNAVAILABLE))
    return 0


def add_provision_command(commands: Any) -> None:
    """Register `parley provision` on the CLI's subcommands."""
    cmd = commands.add_parser(
        "provision", help="create or update streams and buckets (the provisioner's job)"
    )
    cmd.add_argument(
        "--config", type=Path, help="settings TOML (e.g. the provisioner's from nats-config)"
    )
    cmd.add_argument(
        "actors",
        nargs="*",
        type=Path,
        help="actors' settings files: each that may not create its consumer gets it",
    )
    cmd.add_argument(
        "--relay-serves",
        default=None,
        help="comma-separated names the relay serves (default: those its nats-config "
        "granted it, from the actors.json beside its settings file)",
    )
    cmd.set_defaults(func=_cmd_provision)
