"""`parley up` with no topology, or with an example's directory: a whole system, ready to use.

A newcomer's first `parley up` used to start two echo actors and the console: no gate, router,
agents or auditor, so nothing they then typed could work, and nothing shipped ran the auditor
that `parley audit`, `trace`, `calls` and the console's audit views read. Now it starts the
system the README describes: the gate, the router, the auditor, an agent host per agent (the
shipped profiles in `deploy/agents/`: scripted brains unless a profile names a provider), the
tool runtime, the LLM gateway, the web console and the A2A edge, locked down like any
`parley up`.

A system is a `SystemSpec`: which agents run and which policy bundle source the gate trusts.
With no argument `parley up` runs `LOCAL_SYSTEM`, every shipped agent under the demo bundle,
so each seed's flow (collaborate, orchestrate, delegate, sub-agent calls) can be tried at once;
`parley up examples/<flow>` runs the `system.toml` of that directory instead, one flow with a
bundle that grants only it.

What a system needs beyond its processes is made once and kept under `.parley/keys/`
(owner-only): the policy key pair the gate trusts and the auditor's checkpoint key. The
bundle is signed with that key and published as the policy signer (tools/_system_policy.py).
"""

from __future__ import annotations

import json
import os
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Final, Self

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import (
    Encoding,
    NoEncryption,
    PrivateFormat,
    PublicFormat,
)
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    ValidationError,
    field_validator,
    model_validator,
)

from actors.tools import McpServerSettings
from bus import ChildSpec, ConfigError, Topology, describe_invalid, load_private_key, shipped
from tools._llm_settings import write_gateway_settings
from tools._local import LOCAL_BROKER, LOCAL_DIR, LOCAL_KEYS

__all__ = (
    "GATEWAY_SETTINGS",
    "LOCAL_SYSTEM",
    "SYSTEM_FILE",
    "SystemSpec",
    "key_pair",
    "load_system",
    "system_topology",
)

AGENT_NAME: Final = r"^[a-z][a-z0-9_-]*$"
"""An agent's name: a subject token and a file name (deploy/agents/<name>.toml)."""
SYSTEM_FILE: Final = "system.toml"
"""The file in a directory given to `parley up` that makes it a system, not a topology."""


class SystemSpec(BaseModel):
    """The agents a system runs and the bundle its gate trusts; the rest is always the same
    (gate, router, auditor, console)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    agents: tuple[Annotated[str, StringConstraints(pattern=AGENT_NAME)], ...] = Field(min_length=1)
    """Agent hosts to run, each with the profile of its name in `agents_dir`."""
    policy: Path
    """The bundle source (TOML) signed with the system's key and published to the gate."""
    agents_dir: Path = Path("deploy/agents")
    """Where the agents' profiles are: each agent's in this directory (the working
    directory's, for a relative one) if it is there, else Parley's own."""
    console: bool = True
    """Run the web console too."""
    tools: bool = False
    """Run the tool runtime (`parley run tools`), whose workspaces are `.parley/workspaces/`:
    agents whose profiles offer tools use them through it, as the bundle grants. The local
    system runs it; an example's system only when its flow uses tools."""
    llm: bool = False
    """Run the LLM gateway (`parley run llm`), with the provider keys of `parley up`'s
    environment in its own settings alone (tools/_llm_settings.py). The local system runs it."""
    a2a: bool = False
    """Run the A2A edge (`parley run a2a`) on a free port, its URL in `.parley/a2a.url`: the
    agents the bundle exposes (`a2a_exposed`) answer A2A clients, each a person of the
    bundle signed in with `parley a2a token --client NAME` and acting with that person's
    own credentials. The local system runs it."""
    mcp_servers: tuple[McpServerSettings, ...] = ()
    """MCP servers the tool runtime starts or reaches, each tool `T` of server `S` the
    capability `Mcp.S.T` (docs/tools.md, "MCP servers as tools"): the runtime's own
    `mcp_servers` setting, given here because `parley up` writes the runtime's options.
    `command = "{python}"` is Parley's interpreter; a server's `cwd` is relative to the
    system's directory, and is that directory when unset. Needs `tools`."""

    @model_validator(mode="after")
    def _servers_of_a_runtime(self) -> Self:
        if self.mcp_servers and not self.tools:
            raise ValueError("mcp_servers are the tool runtime's: set `tools = true` to run it")
        names = [server.name for server in self.mcp_servers]
        twice = sorted({name for name in names if names.count(name) > 1})
        if twice:
            raise ValueError(f"mcp_servers names a server twice: {', '.join(twice)}")
        return self

    @field_validator("agents")
    @classmethod
    def _each_once(cls, agents: tuple[str, ...]) -> tuple[str, ...]:
        twice = sorted({name for name in agents if agents.count(name) > 1})
        if twice:
            raise ValueError(f"names an agent twice: {', '.join(twice)}")
        return agents


GATEWAY_SETTINGS: Final = LOCAL_DIR / "llm.toml"
"""The LLM gateway's settings, with the provider keys: written at each start of a system that
runs the gateway, removed when `parley up` stops."""

LOCAL_SYSTEM: Final = SystemSpec(
    agents=("gpt", "claude", "local", "planner", "researcher", "coder", "reviewer"),
    policy=Path("deploy/policy/demo.toml"),
    tools=True,
    llm=True,
    a2a=True,
)
"""`parley up` with no argument: every shipped agent, under the demo bundle (tenant `demo`)."""


def load_system(directory: Path) -> SystemSpec:
    """The system of `directory`'s `system.toml`; its relative paths are relative to it.

    Raises:
        ConfigError: the file is missing, not TOML, or not a valid system.
    """
    path = directory / SYSTEM_FILE
    try:
        data = tomllib.loads(path.read_text())
    except FileNotFoundError:
        systems = sorted(p.parent.name for p in directory.glob(f"*/{SYSTEM_FILE}"))
        within = f"; these in it are: {', '.join(systems)}" if systems else ""
        raise ConfigError(f"{directory} is not a system: it has no {SYSTEM_FILE}{within}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"system {path} is not valid TOML: {exc}") from None
    try:
        spec = SystemSpec.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(describe_invalid(f"invalid system {path}", exc, "(system)")) from None
    agents_dir = directory / spec.agents_dir if "agents_dir" in data else spec.agents_dir
    servers = tuple(_placed_in(directory, server) for server in spec.mcp_servers)
    return spec.model_copy(
        update={"policy": directory / spec.policy, "agents_dir": agents_dir, "mcp_servers": servers}
    )


def _placed_in(directory: Path, server: McpServerSettings) -> McpServerSettings:
    """A stdio server's working directory as an absolute path, relative to `directory` (the
    runtime runs in `parley up`'s directory, not the system's)."""
    if server.command is None:
        return server
    return server.model_copy(update={"cwd": str((directory / (server.cwd or ".")).resolve())})


def key_pair(private: Path, public: Path | None = None) -> Ed25519PrivateKey:
    """The Ed25519 key at `private`, made (owner-only) the first time; its public half is
    written to `public` when asked."""
    if private.exists():
        key = load_private_key(private)
    else:
        private.parent.mkdir(parents=True, exist_ok=True)
        private.parent.chmod(0o700)
        key = Ed25519PrivateKey.generate()
        pem = key.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, NoEncryption())
        descriptor = os.open(private, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(descriptor, "wb") as out:
            out.write(pem)
    if public is not None and not public.exists():
        public.write_bytes(
            key.public_key().public_bytes(Encoding.PEM, PublicFormat.SubjectPublicKeyInfo)
        )
    return key


def system_topology(
    spec: SystemSpec,
    tenant: str,
    keys: Path = LOCAL_KEYS,
    provider_keys: Mapping[str, str] | None = None,
) -> Topology:
    """The processes of `spec` for the bundle's `tenant`, with the keys they need made under
    `keys`; `provider_keys` (taken out of the children's environment) go to the LLM gateway's
    settings alone."""
    key_pair(keys / "policy.key", keys / "policy.pub")
    key_pair(keys / "audit.key", keys / "audit.pub")
    for url_file in ("console.url", "a2a.url"):  # an earlier run's, killed: its port is no
        (LOCAL_DIR / url_file).unlink(missing_ok=True)  # longer ours; the new one writes anew
    # Each profile where this directory has it, else Parley's own: a person who writes
    # deploy/agents/gpt.toml to give gpt a model keeps the shipped profiles of the others.
    profiles = {name: shipped(spec.agents_dir / f"{name}.toml") for name in spec.agents}
    missing = [name for name, profile in profiles.items() if not profile.exists()]
    if missing:
        raise ConfigError(
            f"no agent profile for {', '.join(missing)} in {spec.agents_dir} (nor among "
            "Parley's own)"
        )
    gate = {"policy_keys": [str((keys / "policy.pub").resolve())], "tenant": tenant}
    auditor = {"signing_key": str((keys / "audit.key").resolve()), "tenant": tenant}
    console = {
        "port": 0,
        "url_file": str(LOCAL_DIR / "console.url"),
        "audit_reader": str(LOCAL_BROKER / "actors" / "audit-cli.toml"),
        **gate,  # seed 002 §6: it checks the bundle in force before a session starts
    }
    runtime: dict[str, object] = {**gate, "workspaces": str((LOCAL_DIR / "workspaces").resolve())}
    if spec.mcp_servers:
        runtime["mcp_servers"] = [
            server.model_dump(mode="json", exclude_defaults=True) for server in spec.mcp_servers
        ]
    if spec.tools:  # GetPatchPreview reads a task's checkpoints where the runtime keeps them
        console["workspaces"] = runtime["workspaces"]

    def options(values: Mapping[str, object]) -> dict[str, str]:
        return {"PARLEY_OPTIONS": json.dumps(values)}

    children = [
        ChildSpec(name="gate", run="gate", env=options(gate)),
        ChildSpec(name="router", run="router"),
        ChildSpec(name="auditor", run="auditor", env=options(auditor)),
        *(
            ChildSpec(
                name=name,
                run="agent",
                env=options({"agents_dir": str(profiles[name].parent.resolve())}),
            )
            for name in spec.agents
        ),
    ]
    if spec.tools:
        children.append(ChildSpec(name="tools", run="tools", env=options(runtime)))
    if spec.llm:
        settings = write_gateway_settings(
            GATEWAY_SETTINGS,
            keys / "policy.pub",
            tenant,
            provider_keys or {},
            os.environ,
        )
        children.append(ChildSpec(name="llm", run="llm", config=settings.resolve()))
    if spec.console:
        children.append(ChildSpec(name="console", run="console", env=options(console)))
    if spec.a2a:
        a2a = {**gate, "port": 0, "url_file": str(LOCAL_DIR / "a2a.url")}
        children.append(ChildSpec(name="a2a", run="a2a", env=options(a2a)))
    return Topology(settings={"log_level": "info"}, actor=tuple(children))
