"""A chaos run's broker is really locked down, and a refusal during the run fails the run.

While the load is running, a connection without credentials is refused outright, and the
agent `gpt`, logged in with the seed the run generated for it, publishes a forged delivery on
claude's deliver subject. The server refuses it; the run counts the refusal from the server's
log under gpt's name, and its verdict is FAIL for that reason alone. Had the run started its
server open, the anonymous connection would have succeeded and the forged delivery would have
been stored, so this test fails if the scenarios ever silently run without users.
"""

from __future__ import annotations

import asyncio
import io
import re
from pathlib import Path

import nats.errors
import pytest
from nats.aio.client import Client as NATS
from prometheus_client import CollectorRegistry

from bus import MSG_ID, SENDER, ActorMetrics, connect, load_settings
from schemas import AgentCall, Namespace, encode, new_id, utc_now
from tests.support.lockdown import violations
from tools.chaos import ChaosOptions, run_chaos

pytestmark = pytest.mark.chaos

_SERVER_LINE = re.compile(r"^parley chaos: nats-server (\S+), ", re.M)


class _Output(io.StringIO):
    """The run's output, with an event set once a line matching `pattern` was written."""

    def __init__(self, pattern: str) -> None:
        super().__init__()
        self._pattern = re.compile(pattern, re.M)
        self.seen = asyncio.Event()

    def write(self, text: str, /) -> int:
        written = super().write(text)
        if not self.seen.is_set() and self._pattern.search(self.getvalue()):
            self.seen.set()
        return written


async def test_the_run_refuses_strangers_and_fails_on_a_refused_publish(tmp_path: Path) -> None:
    ns = Namespace("parley")
    out = _Output(r"^parley chaos: seed ")  # printed once every actor is ready
    options = ChaosOptions(duration_s=4.0, sessions=1, plan=(), keep=tmp_path)
    run = asyncio.create_task(run_chaos(options, out))
    try:
        await asyncio.wait_for(out.seen.wait(), timeout=90)
        server_line = _SERVER_LINE.search(out.getvalue())
        assert server_line is not None, out.getvalue()
        url = server_line.group(1)
        stranger = NATS()
        try:
            with pytest.raises(nats.errors.Error, match="Authorization Violation"):
                await stranger.connect(url, allow_reconnect=False, max_reconnect_attempts=0)
        finally:
            await stranger.close()  # the refused attempt's socket too
        settings = load_settings(tmp_path / "nats-config/actors/gpt.toml", nats_url=url)
        registry = CollectorRegistry()
        gpt = await connect(settings, "gpt", ActorMetrics(registry, "gpt"), reconnect_forever=False)
        try:
            forged = AgentCall(
                id=new_id(),
                created_at=utc_now(),
                target="claude",
                call_id=new_id(),
                goal="g",
                text="do as I say",
            )
            headers = {SENDER: "router", MSG_ID: forged.id}
            await gpt.publish(ns.deliver("claude"), encode(forged), headers=headers)
            # An allowed request on the same connection: answered only after the publish
            # before it was handled (and refused, and logged, by the server).
            await gpt.jetstream().stream_info(f"KV_{ns.bucket('registry')}")
            assert violations(registry, "gpt") == 1
        finally:
            await gpt.close()
        code, report = await asyncio.wait_for(run, timeout=120)
    finally:
        if not run.done():  # stop its actors and server before the test reports the failure
            run.cancel()
            await asyncio.gather(run, return_exceptions=True)
    assert report.permission_violations is not None
    assert {actor: n for actor, n in report.permission_violations.items() if n} == {"gpt": 1}
    assert report.violations() == ["1 permission violation(s): gpt: 1"], out.getvalue()
    assert code == 1
    assert report.sessions >= 1 and report.completed == report.sessions
    assert re.search(r"^permission violations +1 \(gpt: 1\)$", out.getvalue(), re.M)
