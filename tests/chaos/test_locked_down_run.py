"""A chaos run's broker is really locked down, still after a restart, and a refusal fails it.

The agent `gpt` logs in with the seed the run generated for it while the run starts. The run
kills the nats-server and starts it again; once gpt's connection is back (so the restart is
done), a connection without credentials is refused outright, and gpt publishes a forged
delivery on claude's deliver subject. The restarted server refuses it; the run counts the
refusal from the server's log under gpt's name, and its verdict is FAIL for that reason
alone. Had the run started its server open, or restarted it without its authorization, the
stranger would have got in and the forged delivery would have been stored: this test fails
if the scenarios ever silently run without users.
"""

from __future__ import annotations

import asyncio
import io
import re
from pathlib import Path

import nats
import nats.errors
import pytest
from nats.aio.client import Client as NATS

from bus import MSG_ID, SENDER, load_settings
from schemas import AgentCall, Namespace, encode, new_id, utc_now
from tools.chaos import ChaosOptions, run_chaos
from tools.chaos._schedule import SERVER, PlannedFault

pytestmark = pytest.mark.chaos


class _Output(io.StringIO):
    """The run's output, with a way to wait for a line as it is written."""

    def __init__(self) -> None:
        super().__init__()
        self._waiting: list[tuple[re.Pattern[str], asyncio.Event]] = []

    def write(self, text: str, /) -> int:
        written = super().write(text)
        for pattern, seen in self._waiting:
            if not seen.is_set() and pattern.search(self.getvalue()):
                seen.set()
        return written

    async def line(self, pattern: str, timeout: float = 60) -> re.Match[str]:
        """The first match of `pattern` (a line), once it has been written."""
        compiled = re.compile(pattern, re.M)
        seen = asyncio.Event()
        self._waiting.append((compiled, seen))
        if compiled.search(self.getvalue()):
            seen.set()
        await asyncio.wait_for(seen.wait(), timeout)
        match = compiled.search(self.getvalue())
        assert match is not None
        return match


def _forged_call() -> AgentCall:
    return AgentCall(
        id=new_id(), created_at=utc_now(), target="claude", call_id=new_id(), goal="g", text="obey"
    )


async def _stranger_is_refused(url: str) -> None:
    stranger = NATS()
    try:
        with pytest.raises(nats.errors.Error, match="Authorization Violation"):
            await stranger.connect(url, allow_reconnect=False, max_reconnect_attempts=0)
    finally:
        await stranger.close()  # the refused attempt's socket too


async def test_the_run_refuses_strangers_after_a_restart_and_fails_on_a_refusal(
    tmp_path: Path,
) -> None:
    ns = Namespace("parley")
    out = _Output()
    options = ChaosOptions(
        duration_s=6.0, sessions=1, plan=(PlannedFault(1.0, "kill", SERVER, 0.5),), keep=tmp_path
    )
    run = asyncio.create_task(run_chaos(options, out))
    back, refused = asyncio.Event(), asyncio.Event()

    async def on_error(exc: Exception) -> None:
        if "permissions violation" in str(exc).lower():
            refused.set()

    async def on_reconnect() -> None:
        back.set()

    try:
        url = (await out.line(r"^parley chaos: nats-server (\S+), ")).group(1)
        settings = load_settings(tmp_path / "nats-config/actors/gpt.toml", nats_url=url)
        gpt = await nats.connect(
            url,
            nkeys_seed=str(settings.nkey_seed_file),
            inbox_prefix=ns.inbox_prefix("gpt").encode(),
            error_cb=on_error,
            reconnected_cb=on_reconnect,
            reconnect_time_wait=0.1,
            max_reconnect_attempts=-1,
        )
        try:
            await out.line(r"^fault: .* kill +nats-server ")
            await asyncio.wait_for(back.wait(), timeout=30)  # the server is up again
            await _stranger_is_refused(url)
            forged = _forged_call()
            headers = {SENDER: "router", MSG_ID: forged.id}
            await gpt.publish(ns.deliver("claude"), encode(forged), headers=headers)
            await asyncio.wait_for(refused.wait(), timeout=10)
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
    assert len(report.faults) == 1
    assert re.search(r"^permission violations +1 \(gpt: 1\)$", out.getvalue(), re.M)
