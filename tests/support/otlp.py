"""A real OTLP/HTTP trace receiver for tests: an HTTP server in the test process that decodes
each export as the protobuf `ExportTraceServiceRequest` the OpenTelemetry exporter sends
(`opentelemetry-proto`), and keeps the spans it finds.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span as SpanProto


@dataclass(frozen=True)
class ReceivedSpan:
    """One span as the receiver decoded it, with its process's resource attributes."""

    trace_id: str
    span_id: str
    parent_id: str
    name: str
    kind: int
    attributes: dict[str, str | int | bool | float]
    resource: dict[str, str | int | bool | float]

    @property
    def service(self) -> str:
        return str(self.resource.get("service.name", ""))

    @property
    def instance(self) -> str:
        return str(self.resource.get("service.instance.id", ""))


def _value(value: AnyValue) -> str | int | bool | float:
    match value.WhichOneof("value"):
        case "string_value":
            return value.string_value
        case "int_value":
            return value.int_value
        case "bool_value":
            return value.bool_value
        case "double_value":
            return value.double_value
        case other:
            return f"<{other}>"


class OtlpReceiver:
    """Collects the spans exported to `endpoint` (`OTEL_EXPORTER_OTLP_ENDPOINT`)."""

    def __init__(self) -> None:
        self.spans: list[ReceivedSpan] = []
        self.requests = 0
        self.errors: list[str] = []
        self.unavailable = False
        """While set, every export is answered 503 (a collector overloaded or restarting:
        the exporter retries, then drops the batch)."""
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                if self.path != "/v1/traces":
                    receiver.errors.append(f"export to {self.path}")
                    self.send_error(404)
                    return
                if receiver.unavailable:
                    self.send_error(503)
                    return
                receiver.take(ExportTraceServiceRequest.FromString(body))
                answer = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, format: str, *args: object) -> None:
                pass  # the test reads the spans, not an access log

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def endpoint(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def take(self, request: ExportTraceServiceRequest) -> None:
        spans: list[ReceivedSpan] = []
        for batch in request.resource_spans:
            resource = {a.key: _value(a.value) for a in batch.resource.attributes}
            for scope in batch.scope_spans:
                spans.extend(_span(span, resource) for span in scope.spans)
        with self._lock:
            self.requests += 1
            self.spans.extend(spans)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)


def _span(span: SpanProto, resource: dict[str, str | int | bool | float]) -> ReceivedSpan:
    return ReceivedSpan(
        trace_id=span.trace_id.hex(),
        span_id=span.span_id.hex(),
        parent_id=span.parent_span_id.hex(),
        name=span.name,
        kind=span.kind,
        attributes={a.key: _value(a.value) for a in span.attributes},
        resource=resource,
    )


@contextmanager
def otlp_receiver() -> Iterator[OtlpReceiver]:
    """A receiver listening on a free loopback port for the block's duration."""
    receiver = OtlpReceiver()
    receiver.start()
    try:
        yield receiver
    finally:
        receiver.stop()


def otel_env(endpoint: str) -> dict[str, str]:
    """The standard variables that have a Parley process export its spans to `endpoint`,
    in batches sent every 100 ms (a process still exports the rest when it stops)."""
    return {
        "OTEL_EXPORTER_OTLP_ENDPOINT": endpoint,
        "OTEL_BSP_SCHEDULE_DELAY": "100",
    }
