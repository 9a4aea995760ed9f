"""A whole deployment for the console's tests: a locked-down server, the gate, the router,
two scripted agents, the auditor and `parley run console` (with the audit reader's
credentials, for the audit views), all real processes.

Two people, alice and bob, have console tokens and broker credentials of their own
(`person-alice`, `person-bob`), and the demo bundle's profiles that let them speak for a
person and talk to the router. The agents' scripts add goals to the demo's: `xss` (an answer
full of markup), `slow` (round 2 takes long, so Stop lands mid-session), `ask the other` (the
agent delegates to the other one first, which the policy here allows gpt), and the fairy tale
and one-sentence goals the demo already plays. For seed 000's orchestrated sessions, gpt is
a shared agent the router may call: claude, as a person's local agent, drafts for any
objective that says `negotiate` (or a draft full of markup for `markup draft`), and gpt
answers each draft. alice may also delegate to
either agent (seed 003), as `parley delegate` does.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

from actors.console import TokenStore
from bus import EmbeddedServer
from schemas import Namespace
from tests.support.audit import AuditorKeys
from tests.support.lockdown import LOCKED_ACTORS, LockedDown
from tests.support.processes import REPO, parley_env
from tests.support.system import System, running_locked_system
from tools.natsconf import write_nats_config

__all__ = (
    "ORCHESTRATE_OBJECTIVE",
    "PEOPLE",
    "XSS_MESSAGE",
    "ConsoleDeployment",
    "console_deployment",
)

PEOPLE = ("alice", "bob")
XSS_MESSAGE = (
    '<script>window.__pwned = 1</script><img src=x onerror="window.__pwned = 2">'
    '<a href="javascript:window.__pwned = 3">click me</a> <b>bold?</b>'
)
ORCHESTRATE_OBJECTIVE = "negotiate a meeting time with the other team"
"""An objective claude drafts for as a local agent: `Draft <turn>: ...` each turn."""
_EXTRA_TURNS = """
[[turn]]
goal = "markup draft"
message = '''{xss}'''

[[turn]]
goal = "negotiate"
message = "Draft {{round}}: could we meet on Tuesday at ten?"

[[turn]]
goal = "xss"
message = '''{xss}'''
final = true

[[turn]]
goal = "slow"
from_round = 2
delay_s = 25.0
message = "{{name}} took its time."
final = true

[[turn]]
goal = "ask the other"
step = 0
calls = [{{ to = "{other}", objective = "facts please" }}]

[[turn]]
goal = "ask the other"
step = 1
message = "{{name}} gathered: {{results}}"
final = true

[[turn]]
goal = "slow"
message = "{{name}} starts the slow task."
handoff = {{ to = "{other}", task = "Take your time with round two." }}
"""


@dataclass(frozen=True)
class ConsoleDeployment:
    """The console's URL, each person's token, and the processes behind them."""

    url: str
    tokens: dict[str, str]
    system: System
    ns: Namespace
    locked: LockedDown


def _agent_profiles(root: Path) -> dict[str, str]:
    """gpt and claude: the demo's profiles and scripts, with the extra turns first."""
    root.mkdir(parents=True, exist_ok=True)
    profiles = {}
    for name, other in (("gpt", "claude"), ("claude", "gpt")):
        demo_script = (REPO / "deploy/agents/scripts" / f"{name}.toml").read_text()
        extra = _EXTRA_TURNS.format(xss=XSS_MESSAGE, other=other)
        (root / f"{name}-script.toml").write_text(extra + demo_script)
        profile = (REPO / "deploy/agents" / f"{name}.toml").read_text()
        profile = re.sub(r'script = ".*"', f'script = "{name}-script.toml"', profile)
        profile = profile.replace("\n[brain]", f'delegates_to = ["{other}"]\n\n[brain]', 1)
        (root / f"{name}.toml").write_text(profile)
        profiles[name] = str(root / f"{name}.toml")
    return profiles


@asynccontextmanager
async def console_deployment(root: Path, ns: Namespace) -> AsyncIterator[ConsoleDeployment]:
    """Everything started under `root`; stopped on the way out."""
    people = [f"person-{name}" for name in PEOPLE]
    config_dir = root / "nats-config"
    write_nats_config(config_dir, [*LOCKED_ACTORS, "console", *people], ns)
    server = EmbeddedServer(root / "nats", authorization=config_dir / "authorization.conf")
    server.start()
    try:
        locked = LockedDown(server, config_dir, ns)
        # The demo bundle (it has alice's and bob's profiles), letting gpt call claude, and
        # gpt a shared agent the router may call (orchestrated sessions).
        policy = root / "policy.toml"
        demo = (REPO / "deploy/policy/demo.toml").read_text()
        edits = {
            '[profiles.gpt]\nallowed_targets = ["router", "llm"]': (
                '[profiles.gpt]\nallowed_targets = ["router", "llm", "claude"]'
            ),
            'label = "demo-1"': 'label = "demo-1"\nshared_agents = ["gpt"]',
            '[profiles.person-alice]\nallowed_targets = ["router", "tools"]': (
                '[profiles.person-alice]\nallowed_targets = ["router", "tools", "gpt", "claude"]\n'
                "allow_shared_agent_calls = true\n"
                'allowed_shared_device_ids = ["gpt"]'
            ),
            'allowed_targets = ["gpt", "claude", "local", "planner"]': (
                'allowed_targets = ["gpt", "claude", "local", "planner"]\n'
                "allow_shared_agent_calls = true\n"
                'allowed_shared_device_ids = ["gpt"]\n'
                "max_concurrent_shared_calls = 1000"
            ),
        }
        for old, new in edits.items():
            assert old in demo, f"the demo bundle changed: {old!r} is gone"
            demo = demo.replace(old, new, 1)
        policy.write_text(demo)
        agents = _agent_profiles(root / "agents")
        async with running_locked_system(locked, root / "keys", agents, policy=policy) as system:
            store = TokenStore(root / "console" / "tokens.json")
            tokens = {name: store.issue(name) for name in PEOPLE}
            auditor = {
                "signing_key": str(AuditorKeys(root).private_path),
                "tenant": "demo",  # the gate's
            }
            auditor_env = {
                **parley_env(server.url, ns.root, allow_lazy_fsync="true"),
                "PARLEY_OPTIONS": json.dumps(auditor),
            }
            auditor_config = ("--config", str(locked.settings_file("auditor")))
            await system.start("auditor", "auditor", auditor_env, *auditor_config)
            options = {
                "port": 0,
                "tokens_file": str(store.path),
                "people_dir": str(config_dir / "actors"),
                "audit_reader": str(locked.settings_file("audit-cli")),
                "audit_tenant": "demo",
                "policy_keys": [str(root / "keys" / "policy.pub")],  # as sign_policy wrote it
                "tenant": "demo",
            }
            env = {**parley_env(server.url, ns.root), "PARLEY_OPTIONS": json.dumps(options)}
            config = ("--config", str(locked.settings_file("console")))
            await system.start("console", "console", env, *config)
            _, line = await system.processes["console"].wait_line(r'"msg":"console listening"')
            url = json.loads(line)["url"]
            yield ConsoleDeployment(url, tokens, system, ns, locked)
    finally:
        server.close()
