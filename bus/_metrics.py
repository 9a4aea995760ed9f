"""Prometheus metrics of an actor process, all in one class on an injected registry.

Handlers never touch metrics: the consumer loop and the connection callbacks record them, so
observability stays a layer around the actor and tests can read a private registry.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

__all__ = ("ActorMetrics", "serve_metrics")

_LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5, 1, 5, 30, 120)


class ActorMetrics:
    """The counters, gauges and histograms every actor exports."""

    def __init__(self, registry: CollectorRegistry, actor: str) -> None:
        self.registry = registry
        self.actor = actor
        self.received = Counter(
            "parley_messages_received",
            "Messages fetched from JetStream, by input stream.",
            ["actor", "stream"],
            registry=registry,
        )
        self.handled = Counter(
            "parley_messages_handled",
            "Messages finished, by outcome (acked, nacked, dead_lettered, abandoned).",
            ["actor", "outcome"],
            registry=registry,
        )
        self.dead_lettered = Counter(
            "parley_dead_lettered",
            "Messages moved to the dead-letter stream, by reason.",
            ["actor", "reason"],
            registry=registry,
        )
        self.dead_letters_dropped = Counter(
            "parley_dead_letters_dropped",
            "Dead letters dropped from PARLEY_DEAD because their sender reached its quota.",
            ["actor", "sender"],
            registry=registry,
        )
        self.handler_seconds = Histogram(
            "parley_handler_seconds",
            "Time from fetch to ack of one message, effects included.",
            ["actor"],
            buckets=_LATENCY_BUCKETS,
            registry=registry,
        )
        self.in_flight = Gauge(
            "parley_messages_in_flight", "Messages being handled now.", ["actor"], registry=registry
        )
        self.published = Counter(
            "parley_effects_published",
            "Envelopes published by handlers and acknowledged by JetStream.",
            ["actor"],
            registry=registry,
        )
        self.permission_violations = Counter(
            "parley_permission_violations",
            "Publishes or subscriptions the server refused for lack of permission.",
            ["actor"],
            registry=registry,
        )
        self.connection_events = Counter(
            "parley_connection_events",
            "Disconnects, reconnects and asynchronous errors of the NATS connection.",
            ["actor", "event"],
            registry=registry,
        )
        self.possible_deaths = Counter(
            "parley_possible_deaths",
            "Redeliveries of a message whose earlier delivery was never seen to settle: the "
            "process holding it may have died of it (each one is also logged as an error).",
            ["actor", "stream"],
            registry=registry,
        )
        self.rebinds = Counter(
            "parley_consumer_rebinds",
            "Times the watchdog re-bound a pull subscription that stayed silent.",
            ["actor"],
            registry=registry,
        )


def serve_metrics(registry: CollectorRegistry, host: str, port: int) -> int:
    """Serve `/metrics` for `registry` on a background thread; return the bound port."""
    server, _thread = start_http_server(port, addr=host, registry=registry)
    return int(server.server_port)
