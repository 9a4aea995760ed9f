"""The actors: one package per actor, each a thin shell around a pure core.

`ACTORS` maps the names `parley run` accepts to their classes; every actor registers here.
"""

from actors.a2a import A2aActor
from actors.agent import AgentHost
from actors.auditor import AuditorActor
from actors.console import ConsoleActor
from actors.echo import EchoActor
from actors.gate import GateActor
from actors.llm import LlmActor
from actors.relay import RelayActor
from actors.router import RouterActor
from actors.tools import ToolsActor
from bus import Actor

ACTORS: dict[str, type[Actor]] = {
    EchoActor.kind: EchoActor,
    GateActor.kind: GateActor,
    RouterActor.kind: RouterActor,
    AgentHost.kind: AgentHost,
    AuditorActor.kind: AuditorActor,
    ConsoleActor.kind: ConsoleActor,
    RelayActor.kind: RelayActor,
    ToolsActor.kind: ToolsActor,
    LlmActor.kind: LlmActor,
    A2aActor.kind: A2aActor,
}

__all__ = (
    "ACTORS",
    "A2aActor",
    "AgentHost",
    "AuditorActor",
    "ConsoleActor",
    "EchoActor",
    "GateActor",
    "LlmActor",
    "RelayActor",
    "RouterActor",
    "ToolsActor",
)
