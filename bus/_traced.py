"""Handlers run inside their spans, for the runtime while tracing is on (bus/_tracing.py).

Kept apart from bus/_runtime.py so the untraced path there stays one check of a module
global: everything that makes, enters or ends a span is here.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence

from opentelemetry.trace import use_span

from bus import _tracing
from bus._actor import Actor
from bus._context import Context
from bus._logging import trace_scope
from schemas import AnyEnvelope

__all__ = ("Batch", "batch_traced", "handle_traced")

Batch = Sequence[tuple[AnyEnvelope, Context]]
"""What a batch handler gets: each envelope with its context."""


async def handle_traced(actor: Actor, envelope: AnyEnvelope, ctx: Context) -> Exception | None:
    """Run `actor.handle` in the envelope's span, current while it runs; its error, if any."""
    span = _tracing.handle_span(envelope, ctx)
    ctx.outbox.span = span
    error: Exception | None = None
    try:
        with trace_scope(ctx.trace_id), use_span(span, end_on_exit=False):
            try:
                await actor.handle(envelope, ctx)
            except Exception as exc:
                error = exc
    finally:
        _tracing.end_handle_span(span, error)
    return error


async def batch_traced(
    batch: Batch,
    handle: Callable[[], Awaitable[list[Exception | None]]],
) -> list[Exception | None]:
    """Run a batch handler with one span per envelope: none is current (the handler works
    on them all at once), each envelope's publishes find theirs on its outbox."""
    spans = [_tracing.handle_span(envelope, ctx) for envelope, ctx in batch]
    for span, (_envelope, ctx) in zip(spans, batch, strict=True):
        ctx.outbox.span = span
    errors: list[Exception | None] = [None] * len(batch)
    try:
        errors = await handle()
    finally:
        for span, error in zip(spans, errors, strict=True):
            _tracing.end_handle_span(span, error)
    return errors
