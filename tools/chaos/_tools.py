"""The tool mix of a chaos run's load (`--tools N`): a person has a tool-using agent run
steps with outside effects while the schedule kills the tool runtime among the other actors.

N workers delegate to the toolsmith as the person, one request after another (the delegation
mix's worker, tools/chaos/_delegations.py, with each request's input its own envelope id);
the toolsmith has the tool runtime append a line with File.Write, then run a command that
appends one and lingers (tools/chaos/_agents.py). The runtime is a child of the run like
every actor (tools/chaos/_topology.py, its workspaces in the run's directory): the seeded
schedule kills, pauses and restarts it, and a named plan may kill it on purpose.

When the load is over the run waits, bounded, until every step the gate admitted has a
result (a step still running when the last delegation was answered is late, not lost; one
still unanswered at the bound is the checker's to report), then counts the lines in the
workspaces by the call and capability each names, and the starts the runtime logged by step
(tools/chaos/_tool_check.py).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import Counter
from pathlib import Path

from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.api import DeliverPolicy

from actors.delegation import Delegate
from schemas import Decision, Namespace, decode_envelope
from tools.chaos._agents import COMMANDS_LOG, TOOL_AGENT, TOOLS_OBJECTIVE, WRITES_LOG
from tools.chaos._delegations import DEADLINE_MS

__all__ = ("ToolSteps", "count_effects", "count_starts", "tool_request")

STARTED = "step started"
"""What the runtime logs, with the step's id, before each execution (actors/tools/_steps.py)."""


def tool_request(envelope_id: str) -> Delegate:
    """The person's delegation to the toolsmith; its input, the envelope's own id, is what
    the steps' lines name."""
    return Delegate(
        request_id="chaos-tools",
        target_employee=TOOL_AGENT,
        objective=f"{TOOLS_OBJECTIVE}: a write and a command",
        input=envelope_id,
        deadline_ms=DEADLINE_MS,
    )


def count_effects(workspaces: Path) -> Counter[tuple[str, str]]:
    """How often each (call, capability) line is in the workspaces' logs: one line per
    step's effect. A line of another shape counts under its whole text (a stray effect)."""
    found: Counter[tuple[str, str]] = Counter()
    for name in (WRITES_LOG, COMMANDS_LOG):
        for log in sorted(workspaces.glob(f"*/{name}")):
            for line in log.read_text(errors="replace").splitlines():
                call, _, capability = line.strip().partition(" ")
                found[(call, capability) if capability else (line, "")] += 1
    return found


def count_starts(log: Path) -> Counter[str]:
    """How often the runtime's log (every run of the process, appended) says each step id
    started. A line that is no JSON (a traceback's) is not a start."""
    found: Counter[str] = Counter()
    if not log.exists():
        return found
    for line in log.read_text(errors="replace").splitlines():
        if STARTED not in line:
            continue
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict) and record.get("msg") == STARTED:
            found[str(record.get("step_id", ""))] += 1
    return found


class ToolSteps:
    """The toolsmith's steps the gate admitted, and those a result came back for (or, made
    with the LLM mix's kinds and agent, the narrator's model calls and their answers)."""

    def __init__(
        self,
        agent: str = TOOL_AGENT,
        request_kind: str = "tool_request",
        result_kind: str = "tool_result",
    ) -> None:
        self._agent, self._request_kind, self._result_kind = agent, request_kind, result_kind
        self.admitted: set[str] = set()
        self.answered: set[str] = set()
        self._changed = asyncio.Event()

    @property
    def open(self) -> set[str]:
        """Steps admitted and not answered yet."""
        return self.admitted - self.answered

    async def follow(self, js: JetStreamContext, ns: Namespace) -> None:
        """Follow the gate's decisions on tool requests and results, as the delegation mix
        follows its answers (an ordered consumer on an operator's connection)."""

        async def on_decision(raw: Msg) -> None:
            try:
                decision = decode_envelope(raw.data)
            except ValueError:
                return
            if not isinstance(decision, Decision) or not decision.allowed:
                return
            kind = decision.envelope_kind
            if kind == self._request_kind and decision.sender == self._agent:
                self.admitted.add(decision.envelope_id)
            elif kind == self._result_kind and decision.target == self._agent:
                self.answered.add(decision.causation_id)
            else:
                return
            self._changed.set()

        await js.subscribe(
            ns.wildcard("decisions"),
            stream=ns.stream("events"),
            cb=on_decision,
            ordered_consumer=True,
            deliver_policy=DeliverPolicy.NEW,
            idle_heartbeat=0.5,
        )

    async def settle(self, until: float) -> None:
        """Wait until every admitted step has a result, or `until` (monotonic) passes."""
        while self.open and (left := until - time.monotonic()) > 0:
            self._changed.clear()
            try:
                async with asyncio.timeout(left):
                    await self._changed.wait()
            except TimeoutError:
                return
