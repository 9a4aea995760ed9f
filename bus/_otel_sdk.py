"""The OpenTelemetry SDK's side of tracing: a provider exporting over OTLP/HTTP.

Imported only when an endpoint is configured (bus/_tracing.py), so a process without the
`parley[otel]` extra never imports the SDK.

A collector that does not answer is said once per outage: the SDK's exporter logs every
retry of every batch (three warnings and an error each few seconds, in every process of
`parley up`), which buried a system's own lines when an endpoint was set and no collector
ran. `CollectorOutage` passes on the first complaint as one line of Parley's, holds the
rest, and says when spans reach the collector again.
"""

from __future__ import annotations

import contextvars
import logging
import os
from collections.abc import Sequence
from typing import Final

from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExportResult
from opentelemetry.sdk.trace.id_generator import RandomIdGenerator
from opentelemetry.sdk.trace.sampling import ALWAYS_ON, ParentBased, Sampler

__all__ = ("EXPORTER_LOG", "OUTAGE", "CollectorOutage", "make_provider")

EXPORTER_LOG = "opentelemetry.exporter.otlp.proto.http.trace_exporter"
"""The logger the SDK's OTLP/HTTP span exporter and its HTTP client complain on."""

log = logging.getLogger("parley.bus.tracing")

_UNREACHED: Final = ("Transient error", "Failed to export")
"""How the exporter's HTTP client begins each complaint of a batch the collector did not take:
each retry, then the batch given up (its format strings, before their arguments)."""


class CollectorOutage(logging.Filter):
    """Filters the exporter's log: its first complaint of an outage becomes one line of
    Parley's, the rest are dropped until an export succeeds (`answered`). Both run on the
    batch processor's one export thread."""

    def __init__(self) -> None:
        super().__init__()
        self.down = False

    def filter(self, record: logging.LogRecord) -> bool:
        if not str(record.msg).startswith(_UNREACHED):
            return True  # not the collector's absence (a batch too large, one not encoded)
        if self.down:
            return False
        self.down = True
        log.warning(
            "spans cannot reach the OTLP collector: they are dropped until it answers, and "
            "the exporter's retries are not logged meanwhile",
            extra={"endpoint": _endpoint(), "error": record.getMessage()},
        )
        return False

    def answered(self) -> None:
        if self.down:
            self.down = False
            log.info("spans reach the OTLP collector again", extra={"endpoint": _endpoint()})


class _ReportingExporter(OTLPSpanExporter):
    """The SDK's exporter, telling `outage` of each batch the collector took."""

    def __init__(self, outage: CollectorOutage) -> None:
        super().__init__()
        self._outage = outage

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        result = super().export(spans)
        if result is SpanExportResult.SUCCESS:
            self._outage.answered()
        return result


OUTAGE = CollectorOutage()
"""The process's one filter: a provider made again (tests, a restart of tracing) reuses it."""


def _endpoint() -> str:
    env = os.environ
    return env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or env.get(
        "OTEL_EXPORTER_OTLP_ENDPOINT", ""
    )


class _ParleyTraceIds(RandomIdGenerator):
    """Random ids, except that a root span Parley starts takes the Parley trace id."""

    def __init__(self, root_trace_id: contextvars.ContextVar[int]) -> None:
        self._root = root_trace_id

    def generate_trace_id(self) -> int:
        return self._root.get() or super().generate_trace_id()

    def is_trace_id_random(self) -> bool:
        """A Parley trace id is not promised to be random (W3C's `random-trace-id` flag)."""
        return not self._root.get()


def make_provider(
    service: str, instance: str, root_trace_id: contextvars.ContextVar[int]
) -> TracerProvider:
    """A tracer provider batching spans to the OTLP/HTTP endpoint of the environment.

    `OTEL_SERVICE_NAME` (or `service.name` in `OTEL_RESOURCE_ATTRIBUTES`) wins over `service`;
    `instance` is the actor id, so replicas of one actor are told apart.
    """
    resource = Resource.create({"service.instance.id": instance})
    if str(resource.attributes.get(SERVICE_NAME, "")).startswith("unknown_service"):
        resource = resource.merge(Resource({SERVICE_NAME: service}))
    provider = TracerProvider(
        resource=resource, id_generator=_ParleyTraceIds(root_trace_id), sampler=_sampler()
    )
    logging.getLogger(EXPORTER_LOG).addFilter(OUTAGE)  # once: a filter is added once
    provider.add_span_processor(BatchSpanProcessor(_ReportingExporter(OUTAGE)))
    trace.set_tracer_provider(provider)
    return provider


def _sampler() -> Sampler | None:
    """The environment's sampler when it names one (`OTEL_TRACES_SAMPLER`); else every span
    kept, whatever the incoming `traceparent`'s flags say: the header is a sender's claim, and
    the SDK's default (parent-based) let any principal turn tracing off for its own traffic in
    every actor downstream by sending the flags `00`."""
    if os.environ.get("OTEL_TRACES_SAMPLER"):
        return None
    return ParentBased(root=ALWAYS_ON, remote_parent_not_sampled=ALWAYS_ON)
