"""The params of the console's JSON-RPC methods (seed 002 §11's names, camelCase), validated
before a method runs: a wrong or missing field is JSON-RPC's -32602, named by field.

Unknown fields are refused (`extra="forbid"`), so a typo is an error and not a silent default.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

__all__ = (
    "ApproveParams",
    "CreateSessionParams",
    "NoParams",
    "Params",
    "ResumeParams",
    "SessionParams",
    "StartTaskParams",
    "TakeOverParams",
)

_Id = Field(min_length=1, max_length=128)


class Params(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class _SeedContext(Params):
    """Fields seed 002's CreateSession example carries that a console session does not use:
    accepted, so a desktop app's request is valid, and otherwise ignored."""

    userId: str = Field(default="", max_length=256)
    tenantId: str | None = None
    workspaceHint: dict[str, Any] | None = None
    clientInfo: dict[str, Any] | None = None
    supportedCapabilities: list[str] | None = None
    supportedTools: list[str] | None = None


class CreateSessionParams(_SeedContext):
    """`agents`: one for `single`, the participants for `collaborate`, for `orchestrate`
    exactly two: the person's local agent (it drafts) and the shared agent it talks to, and
    for `delegate` the agents each sent the objective (seed 003; several at once is its
    parallel mode), one for `task` (seed 002 §7: the agent works on the prompt with its
    tools). The orchestration fields are seed 000's limits under its own names;
    `maxTokens` and `deadlineMs` are seed 003's constraints of each delegation."""

    mode: Literal["collaborate", "single", "orchestrate", "delegate", "task"] = "collaborate"
    agents: list[str] = Field(min_length=1, max_length=8)
    firstSpeaker: str | None = None
    maxRounds: int = Field(default=6, ge=1, le=100)
    orchestrationMode: Literal["manual", "semi_auto", "full_auto"] = "manual"
    maxTurns: int = Field(default=8, ge=1, le=100)
    maxDurationMs: int = Field(default=600_000, ge=1000, le=86_400_000)
    maxFailures: int = Field(default=3, ge=1, le=100)
    maxTokensBudget: int | None = Field(default=None, ge=1)
    maxTokens: int = Field(default=1200, ge=1, le=1_000_000)
    deadlineMs: int = Field(default=15_000, ge=1000, le=3_600_000)

    @model_validator(mode="after")
    def _agents_fit_the_mode(self) -> CreateSessionParams:
        if self.mode in ("single", "task") and len(self.agents) != 1:
            raise ValueError(f"a {self.mode} names one agent")
        if self.mode == "delegate" and len(set(self.agents)) != len(self.agents):
            raise ValueError("a delegation names each agent once")
        if self.mode == "orchestrate":
            if len(self.agents) != 2:
                raise ValueError(
                    "an orchestrated session names two agents: yours, then the shared one"
                )
            if self.agents[0] == self.agents[1]:
                raise ValueError("the shared agent is not your local agent itself")
        return self


class TaskOptions(Params):
    """Seed 002 §11's task options, each honored or refused, never ignored: a person who asks
    for no network, or for approvals of every step, must not be let believe they hold.

    `maxSteps` caps a collaboration's rounds (StartTask refuses it elsewhere: a task's steps
    are capped by its agent's profile, `max_tool_rounds`). What an agent may reach and which
    steps wait for a person are the policy bundle's (scopes, `approval_rules`), so only the
    values that say so are taken: `allowNetwork: true` (the bundle still decides) and
    `approvalMode: "on_risky_actions"` (what its approval rules do)."""

    maxSteps: int | None = Field(default=None, ge=1, le=100)
    allowNetwork: bool | None = None
    approvalMode: str | None = None

    @model_validator(mode="after")
    def _only_what_the_policy_does(self) -> TaskOptions:
        if self.allowNetwork is False:
            raise ValueError(
                "allowNetwork false is not supported: whether an agent may reach the network "
                "is its Network.Http scope in the policy bundle"
            )
        if self.approvalMode not in (None, "on_risky_actions"):
            raise ValueError(
                f"approvalMode {self.approvalMode!r} is not supported: only "
                "'on_risky_actions', what the policy bundle's approval_rules do"
            )
        return self


class StartTaskParams(Params):
    sessionId: str = _Id
    prompt: str = Field(min_length=1, max_length=20_000)
    taskId: str | None = Field(default=None, min_length=1, max_length=128)
    taskOptions: TaskOptions = TaskOptions()


class SessionParams(Params):
    sessionId: str = _Id
    taskId: str | None = None
    reason: str = Field(default="Stop pressed in the console", max_length=500)


class TakeOverParams(Params):
    """TakeOverTask: the person's own message, sent now instead of the agent's next one."""

    sessionId: str = _Id
    taskId: str | None = None
    text: str = Field(min_length=1, max_length=20_000)


class ApproveParams(Params):
    """ApproveAction, in the words of seed 002's approval decision (§12.3): `approved` sends
    the draft, `edited` sends `text` instead (edit-and-approve), `rejected` discards it and
    tells the local agent `reason`."""

    sessionId: str = _Id
    approvalId: str = _Id
    decision: Literal["approved", "edited", "rejected"]
    taskId: str | None = None
    text: str = Field(default="", max_length=20_000)
    reason: str = Field(default="", max_length=2000)
    userId: str | None = None
    clientTimestamp: str | None = None

    @model_validator(mode="after")
    def _text_for_an_edit(self) -> ApproveParams:
        if self.decision == "edited" and not self.text.strip():
            raise ValueError("an edited draft needs its text")
        if self.decision != "edited" and self.text:
            raise ValueError("text goes only with decision 'edited'")
        return self


class ResumeParams(Params):
    sessionId: str = _Id
    afterEventId: str | None = None


class NoParams(Params):
    pass
