"""The OpenTelemetry SDK's side of tracing: a provider exporting over OTLP/HTTP.

Imported only when an endpoint is configured (bus/_tracing.py), so a process without the
`parley[otel]` extra never imports the SDK.
"""

from __future__ import annotations

import contextvars
import os

from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.sdk.trace.id_generator import RandomIdGenerator
from opentelemetry.sdk.trace.sampling import ALWAYS_ON, ParentBased, Sampler

__all__ = ("make_provider",)


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
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
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
