"""The LLM mix of a chaos run's load (`--llm N`): a person has an agent whose brain asks the
LLM gateway for every answer, streamed slowly, while the schedule SIGKILLs the gateway.

N workers delegate to the narrator as the person, one request after another (the delegation
mix's worker, tools/chaos/_delegations.py); the narrator's `gateway` brain (tools/chaos/
_agents.py) sends one streamed `llm_request` per delegation through the gate to the gateway,
which the run starts among its actors (tools/chaos/_topology.py) with one provider: a local
server the run starts first, outside the schedule's reach, streaming each answer over
1.5 s (tools/chaos/_llm_provider.py). Each kill of the gateway waits, bounded, until the
provider says a stream is being written (`Provider.before_fault`), so it lands mid-stream
whatever the workers were doing at its planned time.

Beside the seeded schedule the run SIGKILLs the gateway on purpose (`gateway_kills`), so
every run with the mix tests what it names. When the load is over the run waits, bounded,
until every model call the gate admitted has an answer, then judges them
(tools/chaos/_llm_check.py).
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from actors.delegation import Delegate
from bus import owned_argv, python_command
from tools.chaos._agents import LLM_AGENT
from tools.chaos._delegations import DEADLINE_MS
from tools.chaos._schedule import PlannedFault
from tools.chaos._topology import GATEWAY

__all__ = ("FROM_STORE", "Provider", "count_from_store", "gateway_kills", "llm_request")

FROM_STORE = "answered again from the store"
"""What the gateway logs when a redelivered request finds its answer stored (actors/llm)."""
_READY_S = 30.0
_STREAM_WAIT_S = 10.0
"""How long a kill of the gateway waits for a stream to be written before it goes anyway
(the verdict then finds no stream cut, and says so)."""
_SERVE = (
    "import asyncio, sys; from pathlib import Path; "
    "from tools.chaos._llm_provider import serve; asyncio.run(serve(Path(sys.argv[1])))"
)


def llm_request(envelope_id: str) -> Delegate:
    """The person's delegation to the narrator: one model call answers it."""
    del envelope_id  # the mix's delegations are all alike
    return Delegate(
        request_id="chaos-llm",
        target_employee=LLM_AGENT,
        objective="chaos llm: tell the story so far",
        input="the release plan",
        deadline_ms=DEADLINE_MS,
    )


def gateway_kills(duration_s: float, *, down_s: float = 0.5) -> list[PlannedFault]:
    """SIGKILL the gateway at a quarter and at a half of the run, down `down_s` each time,
    each kill held until a stream is being written (`Provider.before_fault`)."""
    return [
        PlannedFault(round(duration_s * share, 2), "kill", GATEWAY, down_s) for share in (0.25, 0.5)
    ]


def count_from_store(log: Path) -> int:
    """How often the gateway's log (every run of the process, appended) says it answered a
    request again from its store."""
    found = 0
    if not log.exists():
        return found
    for line in log.read_text(errors="replace").splitlines():
        if FROM_STORE not in line:
            continue
        try:
            record = json.loads(line)
        except ValueError:
            continue
        found += isinstance(record, dict) and record.get("msg") == FROM_STORE
    return found


class Provider:
    """The mix's provider process: started before the run's actors, stopped after them."""

    def __init__(self, log: Path) -> None:
        self.log = log
        self.url = ""
        self._process: asyncio.subprocess.Process | None = None
        self._streaming: set[str] = set()
        self._changed = asyncio.Condition()
        self._reading: asyncio.Task[None] | None = None

    async def start(self) -> str:
        """Start it and wait for its `ready <port>`; returns its OpenAI base URL.

        Raises:
            RuntimeError: it exited or said nothing within its bound.
        """
        self._process = await asyncio.create_subprocess_exec(
            *owned_argv(python_command("-c", _SERVE, str(self.log))),  # dies with the run
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
        )
        assert self._process.stdout is not None  # noqa: S101 - asked for above
        try:
            async with asyncio.timeout(_READY_S):
                line = (await self._process.stdout.readline()).decode()
        except TimeoutError:
            line = ""
        if not line.startswith("ready "):
            await self.stop()
            raise RuntimeError(f"the LLM mix's provider did not start: {line!r}")
        self.url = f"http://127.0.0.1:{int(line.split()[1])}/v1"
        self._reading = asyncio.create_task(self._follow(self._process.stdout))
        return self.url

    async def _follow(self, said: asyncio.StreamReader) -> None:
        """Keep which streams are being written, from the provider's `started`/`done`/`cut`
        lines, until it exits."""
        while line := (await said.readline()).decode():
            what, _, number = line.strip().partition(" ")
            async with self._changed:
                if what == "started":
                    self._streaming.add(number)
                else:
                    self._streaming.discard(number)
                self._changed.notify_all()

    async def before_fault(self, fault: PlannedFault) -> None:
        """Hold a kill of the gateway until the provider is writing a stream to it (at most
        `_STREAM_WAIT_S`), so the kill cuts one: at its planned time the workers may be
        between calls."""
        if fault.target != GATEWAY or self._reading is None:
            return
        try:
            async with asyncio.timeout(_STREAM_WAIT_S), self._changed:
                await self._changed.wait_for(lambda: bool(self._streaming))
        except TimeoutError:
            return  # killed anyway; the verdict counts no stream cut

    async def stop(self) -> None:
        process, self._process = self._process, None
        reading, self._reading = self._reading, None
        if process is not None and process.returncode is None:
            process.kill()
            await process.wait()
        if reading is not None:
            await reading  # ends at the exit's end of output
