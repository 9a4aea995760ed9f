"""Agent profiles: who an agent host speaks for, and which brain answers for it.

A profile is a TOML file (`deploy/agents/<name>.toml`, or any path), validated by pydantic so a
typo fails at start with the field and the value instead of at the first call. The `[brain]`
table picks the backend by its `backend` key; each backend has its own settings model, so a
scripted profile cannot carry an API key by mistake and an HTTP profile cannot forget its URL.
Relative paths inside a profile (a script, a program) are relative to the profile file, so a
profile directory can be moved as a whole.
"""

from __future__ import annotations

import sys
import tomllib
from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from actors.agent._delegating import MAX_TOOL_ROUNDS
from bus import PYTHON_PLACEHOLDER, ConfigError, describe_invalid, shipped
from schemas import DEFAULT_WINDOW_ITEMS, SubjectTokenError, check_token

__all__ = (
    "DEFAULT_AGENTS_DIR",
    "PYTHON_PLACEHOLDER",
    "A2aBrainConfig",
    "AgentProfile",
    "AnthropicBrainConfig",
    "BrainConfig",
    "GatewayBrainConfig",
    "OpenAIBrainConfig",
    "ScriptedBrainConfig",
    "SubprocessBrainConfig",
    "load_profile",
)

DEFAULT_AGENTS_DIR = shipped("deploy/agents")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ScriptedBrainConfig(_Strict):
    """Deterministic replies from a script file (the demo's and the tests' brain)."""

    backend: Literal["scripted"]
    script: Path


class SubprocessBrainConfig(_Strict):
    """A local agent program speaking seed 000's NDJSON frames on its stdin and stdout."""

    backend: Literal["subprocess"]
    command: tuple[str, ...] = Field(min_length=1)
    allow_tool_use: bool = False
    turn_timeout_s: float | None = Field(
        default=None,
        gt=0,
        description="Per-request timeout; default 60 s, or 120 s with allow_tool_use (seed 000).",
    )
    max_history_turns: int = Field(default=6, ge=0)
    max_history_chars: int = Field(default=24000, ge=0)
    max_output_chars: int = Field(default=12000, ge=1)

    @property
    def timeout_s(self) -> float:
        if self.turn_timeout_s is not None:
            return self.turn_timeout_s
        return 120.0 if self.allow_tool_use else 60.0


class _HttpBrainConfig(_Strict):
    base_url: str
    api_key: str | None = Field(
        default=None, description="Prefer api_key_env: keep keys out of files."
    )
    api_key_env: str | None = None
    timeout_s: float = Field(default=60.0, gt=0)


class OpenAIBrainConfig(_HttpBrainConfig):
    """Any OpenAI-compatible chat-completions endpoint (OpenAI, vLLM, Ollama, llama.cpp)."""

    backend: Literal["openai"]
    base_url: str = "https://api.openai.com/v1"
    api_key_env: str | None = "OPENAI_API_KEY"


class AnthropicBrainConfig(_HttpBrainConfig):
    """Anthropic's Messages API."""

    backend: Literal["anthropic"]
    base_url: str = "https://api.anthropic.com"
    api_key_env: str | None = "ANTHROPIC_API_KEY"
    anthropic_version: str = "2023-06-01"


class GatewayBrainConfig(_Strict):
    """The model calls go as envelopes through the gate to the LLM gateway (`parley run llm`),
    which holds the provider keys: the profile names a model, never a key."""

    backend: Literal["gateway"]
    api: Literal["openai", "anthropic"] = "openai"
    """The wire format the brain speaks; the gateway's provider for the model must speak it."""
    target: str = "llm"
    """The gateway's actor id: the target of every model call."""
    timeout_s: float = Field(default=120.0, gt=0)
    stream: bool = True
    """Ask for the answer streamed: the gateway reads the provider's events as they come,
    sends the text on to this agent's chunks subject and shows the person whose session it is
    the agent's message as it is written (docs/llm-gateway.md); the answer itself is the same."""

    @field_validator("target")
    @classmethod
    def _target_token(cls, value: str) -> str:
        return check_token(value, "gateway target")


class A2aBrainConfig(_Strict):
    """A remote A2A agent (protocol 1.0, `a2a-sdk`'s client) answers for this profile: each
    call this agent gets through the gate is one A2A task there (actors/agent/brains/_a2a.py)."""

    backend: Literal["a2a"]
    url: str
    """The remote agent's base URL; its Agent Card is at `<url>/.well-known/agent-card.json`."""
    token_env: str | None = None
    """The environment variable holding a bearer token for the remote agent, if it wants one."""
    timeout_s: float = Field(default=120.0, gt=0)


BrainConfig = Annotated[
    ScriptedBrainConfig
    | SubprocessBrainConfig
    | OpenAIBrainConfig
    | AnthropicBrainConfig
    | GatewayBrainConfig
    | A2aBrainConfig,
    Field(discriminator="backend"),
]


class AgentProfile(_Strict):
    """One agent: its name, what it may do, and the brain behind it."""

    name: str = Field(description="The agent's name: its actor id and subject token.")
    description: str = ""
    version: str = "1"
    brain: BrainConfig
    model: str = ""
    system_prompt: str = Field(default="", description="Added after seed 001's shared rules.")
    peers: tuple[str, ...] = Field(
        default=(), description="Agents a handoff may name; empty means any valid name."
    )
    capabilities: tuple[str, ...] = ()
    tools: tuple[str, ...] = Field(
        default=(),
        description="Tools the brain is offered, by capability (File.Read, Shell.Exec, "
        "Mcp.<server>.<tool>); the tool runtime runs them and the gate's policy decides.",
    )
    tools_allowed: tuple[str, ...] = ()
    allow_sub_agent_calls: bool = False
    delegates_to: tuple[str, ...] = Field(
        default=(),
        description="Agents the brain may delegate to (seed 003); the gate's policy decides.",
    )
    sub_agents: tuple[str, ...] = Field(
        default=(),
        description="Agents the brain may call as sub-agents (seed 004), with "
        "allow_sub_agent_calls; the gate's policy decides.",
    )
    workspace_root: Path | None = Field(
        default=None,
        description="Files a sub-agent call's context may name, relative to this folder.",
    )
    max_tool_rounds: int = Field(
        default=MAX_TOOL_ROUNDS,
        ge=0,
        description="Seed 000's max_tool_rounds: rounds of tool calls one answer may take; "
        "past them the brain is offered no tools and must answer.",
    )

    @property
    def calls_agents(self) -> bool:
        """Whether the brain is offered any tool to call other agents."""
        return bool(self.delegates_to) or (self.allow_sub_agent_calls and bool(self.sub_agents))

    @property
    def makes_requests(self) -> bool:
        """Whether the brain may ask for anything mid-answer: other agents, or tools run by
        the tool runtime (the capabilities it names; the gate's policy decides)."""
        return self.calls_agents or bool(self.tools)

    max_output_tokens: int = Field(default=1024, ge=1)
    max_context_tokens: int = Field(default=4000, ge=1)
    transcript_window: int = Field(
        default=DEFAULT_WINDOW_ITEMS,
        ge=0,
        description="Seed 001 §5: last 8 items; 0 shows the model no transcript.",
    )

    @field_validator("name")
    @classmethod
    def _name_token(cls, value: str) -> str:
        return check_token(value, "agent name")

    @field_validator("peers", "delegates_to", "sub_agents")
    @classmethod
    def _peer_tokens(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        return tuple(check_token(peer, "peer name") for peer in value)


def _resolve(path: Path, base: Path) -> Path:
    return path if path.is_absolute() else (base / path).resolve()


def _with_paths_resolved(profile: AgentProfile, base: Path) -> AgentProfile:
    brain = profile.brain
    if isinstance(brain, ScriptedBrainConfig):
        brain = brain.model_copy(update={"script": _resolve(brain.script, base)})
    elif isinstance(brain, SubprocessBrainConfig):
        program, *rest = brain.command
        # `{python}` is the interpreter running the host, so an example program written in
        # Python finds Parley's packages, and a relative script path it runs is the profile's
        # own; a bare name is looked up on PATH; a relative path is the profile's own.
        if program == PYTHON_PLACEHOLDER:
            program = sys.executable
            if rest and rest[0].endswith(".py"):
                rest[0] = str(_resolve(Path(rest[0]), base))
        elif "/" in program:
            program = str(_resolve(Path(program), base))
        brain = brain.model_copy(update={"command": (program, *rest)})
    workspace = profile.workspace_root
    if workspace is not None:
        workspace = _resolve(workspace, base)
    return profile.model_copy(update={"brain": brain, "workspace_root": workspace})


def load_profile(name_or_path: str, agents_dir: Path = DEFAULT_AGENTS_DIR) -> AgentProfile:
    """Load a profile by name (`gpt` reads `<agents_dir>/gpt.toml`) or by a path to a file.

    Raises:
        ConfigError: no such profile, not TOML, or not a valid profile.
    """
    candidate = Path(name_or_path)
    if candidate.suffix == ".toml" or "/" in name_or_path:
        path = candidate
    else:
        try:
            path = agents_dir / f"{check_token(name_or_path, 'profile name')}.toml"
        except SubjectTokenError as exc:
            raise ConfigError(str(exc)) from None
    if not path.is_file():
        raise ConfigError(f"agent profile not found: {path}")
    try:
        data = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"agent profile {path} is not valid TOML: {exc}") from None
    try:
        profile = AgentProfile.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(
            describe_invalid(f"invalid agent profile {path}", exc, "(profile)")
        ) from None
    return _with_paths_resolved(profile, path.resolve().parent)
