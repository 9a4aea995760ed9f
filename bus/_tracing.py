"""OpenTelemetry spans around every handled and every published envelope, made here, in the
bus, so that no handler makes its own.

Tracing is off unless the process configured it (`configure_tracing`): the OpenTelemetry SDK
(the `parley[otel]` extra) is installed and an OTLP endpoint is set in the standard
`OTEL_EXPORTER_OTLP_ENDPOINT` (or `..._TRACES_ENDPOINT`). Off, the runtime's and the outbox's
only cost is reading the module global `tracer` and finding it None: no span, no context, no
header parsing. On, a handled envelope gets a consumer span whose parent is the `traceparent`
header it came with, and each envelope published while it is handled a producer span, child
of that one, whose context replaces the `traceparent` the envelope goes out with. The next
actor continues from there, so one trace spans every process a request passes through.

Spans are named after seed 002 §18's trace boundaries (the actor's bounded context) and the
operation: `Policy and Guardrails handle`, `Agent Execution publish`. A trace Parley starts
(a publish with no span around it) takes the Parley trace id as its OpenTelemetry trace id
when that id is 32 hex digits, so `parley trace <id>` and a tracing backend name one thing.
"""

from __future__ import annotations

import contextvars
import logging
import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Final

import msgspec
from opentelemetry import trace
from opentelemetry.context import Context as OtelContext
from opentelemetry.context import get_current
from opentelemetry.trace import Span, SpanKind, Status, StatusCode, Tracer, use_span
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from bus._headers import HOP_COUNT, SESSION, TRACE_ID, TRACEPARENT

if TYPE_CHECKING:
    from bus._context import Context
    from schemas import AnyEnvelope

__all__ = (
    "BOUNDARIES",
    "boundary_of",
    "carried_traceparent",
    "configure_tracing",
    "continue_carried",
    "end_handle_span",
    "handle_span",
    "publish_span",
    "shutdown_tracing",
    "trace_publish",
    "tracer",
)

log = logging.getLogger("parley.bus.tracing")

tracer: Tracer | None = None
"""The tracer spans are made with; None while tracing is off (the hot path's only check)."""

BOUNDARIES: Final[Mapping[str, str]] = {
    "agent": "Agent Execution",
    "tools": "Tool Execution",
    "gate": "Policy and Guardrails",
    "auditor": "Policy and Guardrails",
    "llm": "LLM Gateway",
    "router": "Session Coordination",
    "relay": "Session Coordination",
    "console": "Session Coordination",
    "person": "Session Coordination",
}
"""Seed 002 §18's trace boundaries by actor kind (`person`: a person's command); an actor not
named here (an example actor) coordinates sessions."""

_APPROVAL_KINDS: Final = frozenset({"approval_request"})
_WORKSPACE_KINDS: Final = frozenset({"tool_result"})

_propagator: Final = TraceContextTextMapPropagator()
_provider: Any = None
_identity: tuple[str, str] = ("", "")
"""(actor id, actor kind) of this process: one actor, or one person's command, per process."""
_root_trace_id: contextvars.ContextVar[int] = contextvars.ContextVar(
    "parley_root_trace_id", default=0
)
"""The trace id a root span should take (0: a random one); read by the SDK's id generator."""


class _Peek(msgspec.Struct):
    """What a publish span says about the envelope it sends, read without decoding it all."""

    kind: str = ""
    target: str = ""
    session_id: str | None = None
    code: str | None = None
    allowed: bool | None = None


_peek = msgspec.json.Decoder(_Peek)


def boundary_of(actor_kind: str, envelope_kind: str = "") -> str:
    """The seed 002 §18 boundary a span of `actor_kind` handling `envelope_kind` belongs to:
    approvals are the gate's Approval context, a tool's answer is Workspace and Artifacts."""
    if envelope_kind in _APPROVAL_KINDS:
        return "Approval"
    if actor_kind == "tools" and envelope_kind in _WORKSPACE_KINDS:
        return "Workspace and Artifacts"
    return BOUNDARIES.get(actor_kind, "Session Coordination")


def configure_tracing(actor_kind: str, actor_id: str) -> bool:
    """Export spans over OTLP/HTTP if the environment asks for it; True when tracing is on.

    `actor_kind` picks the spans' boundary names and the default service name
    (`parley-<kind>`), `actor_id` the service instance.

    Configured by the standard variables alone: an endpoint (`OTEL_EXPORTER_OTLP_ENDPOINT` or
    `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`) turns it on, `OTEL_SDK_DISABLED=true` or
    `OTEL_TRACES_EXPORTER=none` keep it off, `OTEL_SERVICE_NAME` and
    `OTEL_RESOURCE_ATTRIBUTES` name the process (else `parley-<kind>` does), `OTEL_BSP_*` pace
    the batches and `OTEL_EXPORTER_OTLP_HEADERS` authenticate them.
    """
    global tracer, _provider, _identity
    env = os.environ
    endpoint = env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or env.get(
        "OTEL_EXPORTER_OTLP_ENDPOINT"
    )
    if (
        tracer is not None
        or not endpoint
        or env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true"
        or env.get("OTEL_TRACES_EXPORTER", "").strip().lower() == "none"
    ):
        return tracer is not None
    try:
        from bus._otel_sdk import make_provider
    except ImportError as exc:  # the extra is not installed: say so once, run untraced
        log.warning(
            "an OTLP endpoint is set but the OpenTelemetry SDK is not installed: "
            "install parley[otel] to export traces",
            extra={"error": str(exc)},
        )
        return False
    _identity = (actor_id, actor_kind)
    _provider = make_provider(f"parley-{actor_kind}", actor_id, _root_trace_id)
    tracer = _provider.get_tracer("parley.bus")
    log.info("tracing to OTLP", extra={"endpoint": endpoint})
    return True


def shutdown_tracing() -> None:
    """Export what is still batched and stop; tracing is off afterwards."""
    global tracer, _provider
    provider, _provider, tracer = _provider, None, None
    if provider is not None:
        provider.shutdown()


def _traceparent(span: Span) -> str:
    context = span.get_span_context()
    flags = int(context.trace_flags)
    return f"00-{context.trace_id:032x}-{context.span_id:016x}-{flags:02x}"


def _parley_trace(parley_trace_id: str) -> int:
    """The Parley trace id as an OpenTelemetry one, or 0 if it is not 32 hex digits."""
    digits = parley_trace_id.replace("-", "").lower()
    if len(digits) != 32:
        return 0
    try:
        return int(digits, 16)
    except ValueError:
        return 0


def _start(name: str, kind: SpanKind, parent: OtelContext | None, parley_trace_id: str) -> Span:
    """A span under `parent`; a root (no valid parent) takes the Parley trace id."""
    active = tracer
    if active is None:
        raise RuntimeError("a span was started while tracing is off")
    if parent is not None and trace.get_current_span(parent).get_span_context().is_valid:
        return active.start_span(name, parent, kind)
    token = _root_trace_id.set(_parley_trace(parley_trace_id))
    try:
        return active.start_span(name, parent, kind)
    finally:
        _root_trace_id.reset(token)


def handle_span(envelope: AnyEnvelope, ctx: Context) -> Span:
    """Start the span of one handled envelope, continuing the `traceparent` it came with.

    The caller ends it (`end_handle_span`), and makes it current where the handler runs
    alone; its publishes find it on the context's outbox either way.
    """
    kind = envelope.__struct_config__.tag
    headers = ctx.headers
    parent = _propagator.extract(headers) if TRACEPARENT in headers else None
    span = _start(
        f"{boundary_of(_identity[1], str(kind))} handle",
        SpanKind.CONSUMER,
        parent,
        ctx.trace_id,
    )
    attributes: dict[str, str | int] = {
        "parley.actor": _identity[0],
        "parley.kind": str(kind),
        "parley.sender": ctx.sender,
        "parley.hop": ctx.hop_count,
        "parley.trace_id": ctx.trace_id,
        "messaging.system": "nats",
        "messaging.destination.name": ctx.subject,
        "messaging.message.id": envelope.id,
    }
    target = getattr(envelope, "target", "")
    if isinstance(target, str) and target:
        attributes["parley.target"] = target
    session = getattr(envelope, "session_id", None) or headers.get(SESSION, "")
    if isinstance(session, str) and session:
        attributes["parley.session"] = session
    span.set_attributes(attributes)
    return span


def publish_span(
    parent: Span | None,
    subject: str,
    payload: bytes,
    headers: dict[str, str],
) -> None:
    """Record one published envelope as a producer span and send it out in its context.

    `parent` is the span of the envelope being handled (None: the current span, or a new
    trace). The envelope's `traceparent` header becomes the new span's, so the receiver's
    handling continues from here; a gate decision's verdict is added to the handling span.
    """
    try:
        peek = _peek.decode(payload)
    except msgspec.DecodeError:  # not JSON we can read: still traced, without details
        peek = _Peek()
    context = trace.set_span_in_context(parent) if parent is not None else None
    span = _start(
        f"{boundary_of(_identity[1], peek.kind)} publish",
        SpanKind.PRODUCER,
        context if context is not None else _current(),
        headers.get(TRACE_ID, ""),
    )
    attributes: dict[str, str | int] = {
        "parley.actor": _identity[0],
        "parley.sender": _identity[0],
        "parley.kind": peek.kind,
        "parley.hop": _int(headers.get(HOP_COUNT, "")),
        "parley.trace_id": headers.get(TRACE_ID, ""),
        "messaging.system": "nats",
        "messaging.destination.name": subject,
    }
    if peek.target:
        attributes["parley.target"] = peek.target
    if peek.session_id:
        attributes["parley.session"] = peek.session_id
    if peek.kind == "decision":
        code = peek.code or ("ALLOW" if peek.allowed else "")
        attributes["parley.decision_code"] = code
        if parent is not None and code:
            parent.set_attribute("parley.decision_code", code)
    span.set_attributes(attributes)
    headers[TRACEPARENT] = _traceparent(span)
    span.end()


def trace_publish(subject: str, payload: bytes, headers: dict[str, str]) -> None:
    """For a publish made outside a handler's outbox (a person's command, a console, a relay
    forwarding): a producer span under the current one, or a trace's root, and its
    `traceparent` on the envelope. Nothing while tracing is off."""
    if tracer is not None and TRACEPARENT in headers:
        publish_span(None, subject, payload, headers)


def carried_traceparent(parent: Span | None, kind: str, attributes: Mapping[str, str | int]) -> str:
    """The `traceparent` a message leaving by another way than the bus carries inside itself
    (a relay's sealed frame): a producer span for it, child of `parent` (the handled
    envelope's span; None: the current one), ended at once. "" while tracing is off or with
    no span to continue: a frame never starts a trace of its own."""
    if tracer is None:
        return ""
    context = trace.set_span_in_context(parent) if parent is not None else _current()
    if context is None:
        return ""
    span = _start(f"{boundary_of(_identity[1], kind)} publish", SpanKind.PRODUCER, context, "")
    span.set_attributes({"parley.actor": _identity[0], "parley.kind": kind, **attributes})
    traceparent = _traceparent(span)
    span.end()
    return traceparent


@contextmanager
def continue_carried(
    traceparent: str, kind: str, attributes: Mapping[str, str | int]
) -> Iterator[None]:
    """Handle a message that came in by another way than the bus (a relay's frame) in a
    consumer span continuing the `traceparent` it carried, current inside the block so the
    envelopes published there (`trace_publish`) are its children. Nothing while tracing is
    off or without a traceparent."""
    if tracer is None or not traceparent:
        yield
        return
    parent = _propagator.extract({TRACEPARENT: traceparent})
    span = _start(f"{boundary_of(_identity[1], kind)} handle", SpanKind.CONSUMER, parent, "")
    span.set_attributes({"parley.actor": _identity[0], "parley.kind": kind, **attributes})
    with use_span(span, end_on_exit=True):
        yield


def end_handle_span(span: Span, error: BaseException | None) -> None:
    """Mark a handling span as failed by `error` (None: it succeeded) and end it."""
    if error is not None:
        span.record_exception(error)
        span.set_status(Status(StatusCode.ERROR, type(error).__name__))
    span.end()


def _current() -> OtelContext | None:
    """The context of the span around this code (a handler's, when it runs alone), if any."""
    return get_current() if trace.get_current_span().get_span_context().is_valid else None


def _int(raw: str) -> int:
    return int(raw) if raw.isascii() and raw.isdigit() and len(raw) < 19 else 0
