"""How sessions stand, read by the tool runtime and the LLM gateway (bus/_session_ends.py),
when the broker does not answer the read: a config written before the read was granted.

Against a real locked-down nats-server, read as a person (`cli`), whose grants cover only its
own sessions' standing, so reading another person's goes unanswered as a missing grant does.
"""

from __future__ import annotations

import logging
import time

import pytest

from bus import EndedSessions
from tests.support.lockdown import LockedDown


async def test_two_unanswered_reads_stop_the_asking_for_a_while_and_say_so_once(
    locked_down: LockedDown, caplog: pytest.LogCaptureFixture
) -> None:
    """Each action would otherwise wait the read's 2 s bound for nothing, every time."""
    await locked_down.provision()
    nc = await locked_down.connect("cli")
    try:
        sessions = EndedSessions(locked_down.js(nc, "cli"), locked_down.ns)
        with caplog.at_level(logging.WARNING, logger="parley.bus.session_ends"):
            assert await sessions.ended("person-bob", "s1") is None  # unanswered: runs on
            assert await sessions.ended("person-bob", "s2") is None
            started = time.monotonic()
            assert await sessions.ended("person-bob", "s3") is None
            asked_not = time.monotonic() - started
        said = [r for r in caplog.records if "actions go on unasked" in r.getMessage()]
        assert len(said) == 1, caplog.records
        assert asked_not < 1.0, asked_not  # not asked: the read's own bound is 2 s
    finally:
        await nc.close()
