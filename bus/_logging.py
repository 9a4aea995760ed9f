"""Structured JSON logs, one object per line, carrying the trace id of the message in hand.

The trace id lives in a context variable set by the consumer loop for each message, so handler
code logs normally and every line still says which trace it belongs to.
"""

from __future__ import annotations

import contextvars
import logging
import sys
import time
from typing import Any, Final

import msgspec

from schemas import redact

__all__ = ("configure_logging", "current_trace_id", "trace_scope")

current_trace_id: Final[contextvars.ContextVar[str]] = contextvars.ContextVar(
    "parley_trace_id", default=""
)

_RESERVED = frozenset(vars(logging.LogRecord("", 0, "", 0, "", None, None)).keys()) | {
    "message",
    "asctime",
    "taskName",
}


def _as_text(value: object) -> str:
    """A value JSON cannot carry, as its repr: libraries pass objects as `extra` (websockets
    passes its connection, through a weak proxy, with every line it logs), and a log line
    must never fail for it (logging prints "--- Logging error ---" and a traceback instead)."""
    try:
        return repr(value)
    except Exception:  # a dead weak proxy, a repr that raises: say what it was
        return f"<{type(value).__name__}>"


_encoder = msgspec.json.Encoder(enc_hook=_as_text)


class _JsonFormatter(logging.Formatter):
    def __init__(self, actor: str) -> None:
        super().__init__()
        self._actor = actor

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "actor": self._actor,
            "logger": record.name,
            "msg": record.getMessage(),
        }
        trace_id = current_trace_id.get()
        if trace_id:
            entry["trace_id"] = trace_id
        entry.update(
            (key, value)
            for key, value in record.__dict__.items()
            if key not in _RESERVED and not key.startswith("_")
        )
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        # No secret reaches a log line, whoever logged it (markers keep the line JSON).
        return redact(_encoder.encode(entry).decode("utf-8", "replace"))


class trace_scope:
    """Set the current trace id for the duration of a `with` block."""

    __slots__ = ("_token", "_trace_id")

    def __init__(self, trace_id: str) -> None:
        self._trace_id = trace_id
        self._token: contextvars.Token[str] | None = None

    def __enter__(self) -> None:
        self._token = current_trace_id.set(self._trace_id)

    def __exit__(self, *_: object) -> None:
        if self._token is not None:
            current_trace_id.reset(self._token)


def configure_logging(actor: str, level: str = "INFO") -> None:
    """Send every log record of this process to stderr as one JSON line."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_JsonFormatter(actor))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # nats-py logs every reconnect attempt at error level; our own callbacks report them.
    logging.getLogger("nats").setLevel(logging.CRITICAL)
