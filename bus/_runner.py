"""The process skeleton every actor runs in.

uvloop; SIGTERM and SIGINT set a stop event (never a flag polled in a loop); SIGUSR1 dumps
every task's stack; the runtime drains in order (stop fetching, finish in-flight work up to the
grace period, settle effects, drain the connection). Exit codes tell a supervisor what
happened: crash loudly and let it restart us, since durable consumers lose nothing.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import sys
from enum import IntEnum
from typing import TextIO

import uvloop
from nats.errors import NoServersError
from prometheus_client import CollectorRegistry

from bus._actor import Actor
from bus._consumer_config import ConsumerBindError
from bus._fsync_check import FsyncCheckError
from bus._logging import configure_logging
from bus._metrics import ActorMetrics, serve_metrics
from bus._provision import ProvisionError
from bus._runtime import ActorRuntime
from bus._settings import ConfigError
from bus._tracing import configure_tracing, shutdown_tracing

__all__ = ("ExitCode", "dump_tasks", "run_actor")

log = logging.getLogger("parley.bus.runner")


class ExitCode(IntEnum):
    """How an actor process ended."""

    OK = 0
    CRASHED = 1
    CONFIG = 2
    UNAVAILABLE = 3


def dump_tasks(out: TextIO | None = None) -> None:
    """Write the stack of every asyncio task to `out` (stderr): SIGUSR1's answer to "stuck?"."""
    stream = out or sys.stderr
    tasks = asyncio.all_tasks()
    print(f"--- {len(tasks)} asyncio tasks ---", file=stream)
    for task in tasks:
        print(f"{task.get_name()}: {task.get_coro()!r}", file=stream)
        task.print_stack(file=stream)
    stream.flush()


async def _serve(actor: Actor) -> ExitCode:
    settings = actor.settings
    registry = CollectorRegistry()
    metrics = ActorMetrics(registry, actor.actor_id)
    if settings.metrics_port is not None:
        port = serve_metrics(registry, settings.metrics_host, settings.metrics_port)
        # `parley up` reads this line for its Prometheus targets (tools/_metrics_targets.py).
        log.info("metrics served", extra={"port": port, "host": settings.metrics_host})
    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stopping.set)
    loop.add_signal_handler(signal.SIGUSR1, dump_tasks)
    runtime = ActorRuntime(actor, metrics)
    code = ExitCode.OK
    try:
        await runtime.run(stopping)
    except* (FsyncCheckError, ConsumerBindError, ConfigError) as group:  # misconfigured
        log.error("refusing to start", extra={"error": str(group.exceptions[0])})
        code = ExitCode.CONFIG
    except* (OSError, NoServersError, ProvisionError) as group:
        log.error("bus unavailable", extra={"error": repr(group.exceptions[0])})
        code = ExitCode.UNAVAILABLE
    log.info("stopped", extra={"exit_code": int(code)})
    return code


def run_actor(actor: Actor) -> int:
    """Run `actor` in this process until a stop signal; return the exit code."""
    configure_logging(actor.actor_id, actor.settings.log_level)
    configure_tracing(actor.kind, actor.actor_id)  # only if OTEL_* asks for it
    try:
        return int(uvloop.run(_serve(actor)))
    except Exception:
        log.exception("actor crashed")
        return int(ExitCode.CRASHED)
    finally:
        shutdown_tracing()  # the spans still batched are exported before the process ends
