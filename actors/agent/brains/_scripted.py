"""The scripted brain: deterministic replies read from a TOML script.

It is what the demo and the tests run: no network, no model, the same answer every time, yet
the answer goes through exactly the path a model's would (the same prompt is built, the same
reply contract checks the text). A script is a list of `[[turn]]` tables; the first turn whose
conditions all hold answers. A turn can also misbehave on demand, as real models and hosts do:
answer late (`delay_s`), answer prose instead of JSON (`raw`), fail (`action = "fail"`), or
kill the process (`action = "crash"`).

```toml
[[turn]]
goal = "fairy tale"                 # case-insensitive substring of the goal (omit: any)
round = 1                           # or from_round = 3 (omit both: any round)
message = "Once upon a time ..."    # {name} {goal} {task} {round} {max_rounds} {transcript}
                                    # and {results} (of the agents it called) are filled in
handoff = { to = "gpt", task = "Edit paragraph one." }

[[turn]]                            # ask other agents first (the profile's delegates_to)
goal = "plan"
step = 0                            # rounds of calls made so far
calls = [{ to = "coder", objective = "code for {task}" }, { to = "reviewer" }]  # in parallel

[[turn]]                            # have the tool runtime run a tool (the profile's capabilities)
goal = "read"
step = 0
calls = [{ tool = "use_tool", to = "File.Read", arguments = { path = "notes.txt" } }]

[[turn]]
goal = "plan"
step = 1
message = "Done: {results}"
final = true

[[turn]]                            # a delegate may add seed 003's response fields
kind = "delegation_request"
message = "Two libraries do this."
report = { new_facts = ["csvkit streams"], confidence = 80, used_sources = [
  { owner_scope = "web", source_id = "pypi:csvkit" } ] }
```
"""

from __future__ import annotations

import asyncio
import json
import os
import tomllib
from pathlib import Path
from typing import Any, Literal

import msgspec
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from actors.agent._profile import AgentProfile, ScriptedBrainConfig
from actors.agent._prompt import BrainCall, system_prompt, user_prompt
from actors.agent.brains._protocol import BrainAnswer, BrainError, estimate_tokens, usage_of
from actors.delegation import (
    SUB_AGENT_TOOL,
    USE_TOOL_DEADLINE_MS,
    AgentRequest,
    CallSubAgent,
    Delegate,
    UseTool,
)
from bus import ConfigError, describe_invalid
from schemas import ContextFilter, ErrorCode, SubAgentArgs

__all__ = ("Script", "ScriptedBrain", "ScriptedTurn", "load_script")

CRASH_EXIT_CODE = 70
_AGENT_CALL_DEADLINE_MS = 15_000
"""How long a scripted call to another agent is waited for, unless the script says."""
_FIELDS = ("name", "goal", "task", "round", "max_rounds", "results", "transcript")
_REPORT_FIELDS = frozenset(
    {"summary", "artifacts", "new_facts", "used_sources", "confidence", "requires_followup"}
)


class _Handoff(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    to: str
    task: str


class ScriptedCall(BaseModel):
    """One request to another agent a scripted turn makes (actors/delegation/)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    tool: Literal["delegate_to_agent", "call_sub_agent", "use_tool"] = "delegate_to_agent"
    to: str
    """The agent called, or with `tool = "use_tool"` the capability used (`File.Read`)."""
    arguments: dict[str, Any] = {}
    """A tool's arguments; string values are templates like `objective`."""
    objective: str = "{task}"
    input: str = ""
    chain: bool = False
    """Pass the previous step's results on as `handoff_data.intermediate_results`."""
    deadline_ms: int | None = Field(default=None, ge=1)
    """How long the host waits for the answer: 15 s for a call to an agent; a tool request's
    default is `UseTool`'s, long enough for a person's approval (actors/delegation)."""
    max_tokens: int = Field(default=1200, ge=1)
    context: dict[str, Any] | None = None
    """A sub-agent call's `ContextFilter` fields (seed 004)."""
    max_context_tokens: int = Field(default=4000, ge=1)
    allowed_tools: tuple[str, ...] | None = None
    allow_nested_calls: bool = False

    def request(self, index: int, call: BrainCall, fields: dict[str, Any]) -> AgentRequest:
        objective = self.objective.format_map(fields)
        text_input = self.input.format_map(fields)
        if self.tool == "use_tool":
            arguments = {
                key: value.format_map(fields) if isinstance(value, str) else value
                for key, value in self.arguments.items()
            }
            return UseTool(
                request_id=f"call-{index}",
                capability=self.to,
                arguments=arguments,
                deadline_ms=self.deadline_ms or USE_TOOL_DEADLINE_MS,
            )
        if self.tool == SUB_AGENT_TOOL:
            context = None
            if self.context is not None:
                context = msgspec.convert(self.context, ContextFilter)
            args = SubAgentArgs(
                agent_name=self.to,
                task=objective,
                context=context,
                input=text_input or None,
                max_context_tokens=self.max_context_tokens,
                allowed_tools=self.allowed_tools,
                allow_nested_calls=self.allow_nested_calls,
            )
            return CallSubAgent(
                request_id=f"call-{index}", args=args, deadline_ms=self._agent_wait_ms
            )
        previous = call.rounds[-1].results if call.rounds and self.chain else ()
        return Delegate(
            request_id=f"call-{index}",
            target_employee=self.to,
            objective=objective,
            input=text_input,
            intermediate_results=[r.readable for r in previous] if previous else None,
            max_tokens=self.max_tokens,
            deadline_ms=self._agent_wait_ms,
        )

    @property
    def _agent_wait_ms(self) -> int:
        return self.deadline_ms or _AGENT_CALL_DEADLINE_MS


class ScriptedTurn(BaseModel):
    """One scripted answer and the calls it answers."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    goal: str = ""
    round: int | None = Field(default=None, ge=1)
    from_round: int | None = Field(default=None, ge=1)
    kind: Literal["agent_call", "delegation_request", "sub_agent_call"] | None = None
    attempt: int | None = Field(default=None, ge=1)
    step: int | None = Field(default=None, ge=0)
    """How many rounds of calls to other agents came before (0: none yet)."""
    calls: tuple[ScriptedCall, ...] = ()
    """Ask these agents first (in parallel); a later turn with `step` answers from `{results}`."""
    message: str = ""
    handoff: _Handoff | None = None
    final: bool = False
    raw: str | None = None
    report: dict[str, Any] | None = None
    """Seed 003's response fields to add beside `message` when answering a delegation
    (summary, artifacts, new_facts, used_sources, confidence, requires_followup)."""
    delay_s: float = Field(default=0.0, ge=0)
    action: Literal["reply", "fail", "crash"] = "reply"
    error: ErrorCode = ErrorCode.AGENT_UNAVAILABLE
    retryable: bool = True

    @model_validator(mode="after")
    def _says_something(self) -> ScriptedTurn:
        if self.action == "reply" and not (self.message or self.raw or self.calls):
            raise ValueError("a replying turn needs `message`, `raw` or `calls`")
        templates = [self.message, self.raw or ""]
        templates += [t for c in self.calls for t in (c.objective, c.input)]
        if self.handoff is not None:
            templates.append(self.handoff.task)
        unknown = set(self.report or {}) - _REPORT_FIELDS
        if unknown:
            raise ValueError(f"report: not seed 003 response fields: {sorted(unknown)}")
        for template in templates:  # a bad placeholder fails at start, not at a call
            try:
                template.format_map(dict.fromkeys(_FIELDS, ""))
            except (KeyError, ValueError, IndexError) as exc:
                raise ValueError(f"bad placeholder in {template[:60]!r}: {exc!r}") from None
        return self

    def matches(self, call: BrainCall) -> bool:
        return (
            (not self.goal or self.goal.lower() in call.goal.lower())
            and (self.round is None or call.round == self.round)
            and (self.from_round is None or call.round >= self.from_round)
            and (self.kind is None or call.kind == self.kind)
            and (self.attempt is None or call.attempt == self.attempt)
            and (self.step is None or len(call.rounds) == self.step)
        )

    @staticmethod
    def fields_for(call: BrainCall, name: str) -> dict[str, Any]:
        last = call.rounds[-1].results if call.rounds else ()
        return {
            "name": name,
            "goal": call.goal,
            "task": call.task,
            "round": call.round,
            "max_rounds": call.max_rounds,
            "results": "\n".join(f"[{r.status}] {r.readable}" for r in last),
            "transcript": " | ".join(f"[{t.name or t.role}] {t.text}" for t in call.transcript),
        }

    def text_for(self, call: BrainCall, name: str) -> str:
        fields = self.fields_for(call, name)
        if self.raw is not None:
            return self.raw.format_map(fields)
        reply: dict[str, Any] = {"message": self.message.format_map(fields)}
        if self.handoff is not None:
            reply["handoff"] = {"to": self.handoff.to, "task": self.handoff.task.format_map(fields)}
        if self.final:
            reply["final"] = True
        if self.report is not None and call.kind == "delegation_request":
            reply.update(self.report)  # anywhere else they would break seed 001's contract
        return json.dumps(reply, ensure_ascii=False)


class Script(BaseModel):
    """A whole script: its turns, tried in order."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    turn: tuple[ScriptedTurn, ...] = Field(min_length=1)


def load_script(path: Path) -> Script:
    """Read and validate a script file.

    Raises:
        ConfigError: missing, not TOML, or not a valid script.
    """
    try:
        return Script.model_validate(tomllib.loads(path.read_text()))
    except FileNotFoundError:
        raise ConfigError(f"agent script not found: {path}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"agent script {path} is not valid TOML: {exc}") from None
    except ValidationError as exc:
        raise ConfigError(
            describe_invalid(f"invalid agent script {path}", exc, "(script)")
        ) from None


class ScriptedBrain:
    """Answers from a script; loaded when constructed so a bad script fails at start."""

    backend = "scripted"

    def __init__(self, profile: AgentProfile, config: ScriptedBrainConfig) -> None:
        self._profile = profile
        self._script = load_script(config.script)
        self._system = system_prompt(profile)

    async def start(self) -> None:
        """Nothing to open: the script was read when the brain was made."""

    async def close(self) -> None:
        """Nothing to release."""

    async def reply(self, call: BrainCall) -> BrainAnswer:
        turn = next((t for t in self._script.turn if t.matches(call)), None)
        if turn is None:
            raise BrainError(
                ErrorCode.INTERNAL_ERROR,
                f"the script of {self._profile.name!r} has no turn for round {call.round} "
                f"of a {call.kind} with goal {call.goal[:80]!r}",
                retryable=False,
            )
        if turn.delay_s:
            await asyncio.sleep(turn.delay_s)  # the scripted stand-in for a slow model
        if turn.action == "crash":
            os._exit(CRASH_EXIT_CODE)
        if turn.action == "fail":
            raise BrainError(
                turn.error, f"scripted failure in round {call.round}", retryable=turn.retryable
            )
        prompt = estimate_tokens(self._system, user_prompt(call, self._profile))
        if turn.calls and call.offers_requests:
            fields = turn.fields_for(call, self._profile.name)
            requests = tuple(c.request(i, call, fields) for i, c in enumerate(turn.calls))
            said = turn.message.format_map(fields)
            return BrainAnswer(said, usage_of(prompt, estimate_tokens(said)), requests)
        text = turn.text_for(call, self._profile.name)
        return BrainAnswer(text=text, usage=usage_of(prompt, estimate_tokens(text)))
