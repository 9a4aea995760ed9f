"""A log line never fails for what a library passes as `extra`.

websockets passes its connection (a weak proxy) with every line it logs; the JSON formatter
could not encode it, so each browser connection to the console printed "--- Logging error ---"
and a traceback instead of the line. Such a value is now written as its repr.
"""

from __future__ import annotations

import io
import json
import logging
import sys
import weakref
from collections.abc import Iterator

import pytest

from bus import configure_logging


@pytest.fixture(autouse=True)
def _root_logger_kept() -> Iterator[None]:
    """configure_logging replaces the root logger's handlers: the other tests get theirs back."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    nats_level = logging.getLogger("nats").level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)
    logging.getLogger("nats").setLevel(nats_level)


class _Connection:
    """Stands for a library's object: no JSON encoding of its own."""


def test_an_object_passed_as_extra_is_logged_as_its_repr(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    err = io.StringIO()
    monkeypatch.setattr(sys, "stderr", err)
    configure_logging("console")
    monkeypatch.setattr(logging, "raiseExceptions", True)  # as in any process
    connection = _Connection()
    proxy = weakref.proxy(connection)
    logger = logging.getLogger("websockets.server")
    logger.info("connection open", extra={"websocket": proxy})
    del connection
    logger.info("connection closed", extra={"websocket": proxy})  # its object is gone
    lines = err.getvalue().splitlines()
    assert "Logging error" not in err.getvalue(), err.getvalue()
    opened, closed = (json.loads(line) for line in lines)
    assert opened["msg"] == "connection open"
    assert "weakproxy" in opened["websocket"]
    assert closed["msg"] == "connection closed"
