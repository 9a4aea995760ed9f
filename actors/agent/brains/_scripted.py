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
message = "Once upon a time ..."    # {name} {goal} {task} {round} {max_rounds} are filled in
handoff = { to = "gpt", task = "Edit paragraph one." }
```
"""

from __future__ import annotations

import asyncio
import json
import os
import tomllib
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from actors.agent._profile import AgentProfile, ScriptedBrainConfig
from actors.agent._prompt import BrainCall, system_prompt, user_prompt
from actors.agent.brains._protocol import BrainAnswer, BrainError, estimate_tokens, usage_of
from bus import ConfigError, describe_invalid
from schemas import ErrorCode

__all__ = ("Script", "ScriptedBrain", "ScriptedTurn", "load_script")

CRASH_EXIT_CODE = 70
_FIELDS = ("name", "goal", "task", "round", "max_rounds")


class _Handoff(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    to: str
    task: str


class ScriptedTurn(BaseModel):
    """One scripted answer and the calls it answers."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    goal: str = ""
    round: int | None = Field(default=None, ge=1)
    from_round: int | None = Field(default=None, ge=1)
    kind: Literal["agent_call", "delegation_request", "sub_agent_call"] | None = None
    attempt: int | None = Field(default=None, ge=1)
    message: str = ""
    handoff: _Handoff | None = None
    final: bool = False
    raw: str | None = None
    delay_s: float = Field(default=0.0, ge=0)
    action: Literal["reply", "fail", "crash"] = "reply"
    error: ErrorCode = ErrorCode.AGENT_UNAVAILABLE
    retryable: bool = True

    @model_validator(mode="after")
    def _says_something(self) -> ScriptedTurn:
        if self.action == "reply" and not (self.message or self.raw):
            raise ValueError("a replying turn needs `message` or `raw`")
        templates = [self.message, self.raw or ""]
        if self.handoff is not None:
            templates.append(self.handoff.task)
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
        )

    def text_for(self, call: BrainCall, name: str) -> str:
        fields = {
            "name": name,
            "goal": call.goal,
            "task": call.task,
            "round": call.round,
            "max_rounds": call.max_rounds,
        }
        if self.raw is not None:
            return self.raw.format_map(fields)
        reply: dict[str, Any] = {"message": self.message.format_map(fields)}
        if self.handoff is not None:
            reply["handoff"] = {"to": self.handoff.to, "task": self.handoff.task.format_map(fields)}
        if self.final:
            reply["final"] = True
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
        text = turn.text_for(call, self._profile.name)
        prompt = estimate_tokens(self._system, user_prompt(call, self._profile))
        return BrainAnswer(text=text, usage=usage_of(prompt, estimate_tokens(text)))
