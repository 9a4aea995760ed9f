"""What `parley up` leaves of an earlier run and shows of its children: no URL a killed run
wrote, no control character a child printed; and what a system's `system.toml` gives its
tool runtime (MCP servers)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from actors.tools import McpServerSettings
from bus import SHIPPED_ROOT, ConfigError
from tools._local import LOCAL_DIR
from tools._local_system import LOCAL_SYSTEM, load_system, system_topology
from tools._up import shown


def test_an_earlier_runs_urls_are_gone_before_the_system_starts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run killed outright left its console's and A2A edge's URL files: their ports are no
    longer this system's, and a client following `$(cat .parley/a2a.url)` would send its
    token to whatever took the port."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / LOCAL_DIR).mkdir(parents=True)
    for name in ("console.url", "a2a.url"):
        (tmp_path / LOCAL_DIR / name).write_text("http://127.0.0.1:1/\n")
    topology = system_topology(LOCAL_SYSTEM, "demo", tmp_path / "keys")
    assert {child.name for child in topology.actor} >= {"console", "a2a"}
    assert not (tmp_path / LOCAL_DIR / "console.url").exists()
    assert not (tmp_path / LOCAL_DIR / "a2a.url").exists()


def test_a_childs_control_characters_are_shown_not_obeyed() -> None:
    """An agent's own program writes into `parley up`'s output: a carriage return or an
    escape sequence there could redraw the line as one of `parley up`'s own."""
    forged = "thinking\r[nats] ready: all; the console: http://evil/\x1b[2K\x9b1A\x8d\x9d8;;\tdone"
    line = shown(forged)
    assert not [ch for ch in line if ch != "\t" and (ord(ch) < 32 or 0x7F <= ord(ch) <= 0x9F)]
    assert line.count("\N{REPLACEMENT CHARACTER}") == 5 and "\tdone" in line
    assert shown('{"msg":"ready","text":"déjà vu — ok"}') == '{"msg":"ready","text":"déjà vu — ok"}'


def _system(directory: Path, extra: str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "system.toml").write_text(
        f'agents = ["gpt"]\npolicy = "policy.toml"\n{extra}', encoding="utf-8"
    )
    return directory


def test_a_systems_mcp_servers_reach_its_tool_runtime_placed_in_its_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`parley up` writes the runtime's options, so a system's `[[mcp_servers]]` are the only
    way to give it MCP servers (a newcomer's walk found none); a stdio server runs in the
    system's directory, a `url` is passed on as it is."""
    monkeypatch.chdir(tmp_path)
    system = _system(
        tmp_path / "mine",
        'tools = true\n[[mcp_servers]]\nname = "notes"\ncommand = "{python}"\n'
        'args = ["notes_server.py"]\n[[mcp_servers]]\nname = "db"\ncommand = "db-mcp"\n'
        'cwd = "data"\n[[mcp_servers]]\nname = "web"\nurl = "http://127.0.0.1:8931/mcp"\n',
    )
    spec = load_system(system)
    topology = system_topology(spec, "demo", tmp_path / "keys")
    (runtime,) = [child for child in topology.actor if child.name == "tools"]
    options = json.loads(runtime.env["PARLEY_OPTIONS"])
    assert options["mcp_servers"] == [
        {
            "name": "notes",
            "command": "{python}",  # the runtime's own interpreter, when it starts it
            "args": ["notes_server.py"],
            "cwd": str(system.resolve()),
        },
        {"name": "db", "command": "db-mcp", "cwd": str((system / "data").resolve())},
        {"name": "web", "url": "http://127.0.0.1:8931/mcp"},
    ]
    assert [McpServerSettings.model_validate(s).name for s in options["mcp_servers"]] == [
        "notes",
        "db",
        "web",
    ]


@pytest.mark.parametrize(
    ("extra", "said"),
    [
        ('[[mcp_servers]]\nname = "notes"\ncommand = "x"\n', "set `tools = true` to run it"),
        (
            'tools = true\n[[mcp_servers]]\nname = "a"\ncommand = "x"\n'
            '[[mcp_servers]]\nname = "a"\nurl = "http://127.0.0.1:1/mcp"\n',
            "names a server twice: a",
        ),
        (
            'tools = true\n[[mcp_servers]]\nname = "far"\nurl = "http://10.0.0.1/mcp"\n',
            "not on a loopback address",
        ),
    ],
)
def test_a_systems_mcp_servers_are_checked_when_it_is_read(
    tmp_path: Path, extra: str, said: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match="invalid system") as refused:
        load_system(_system(tmp_path / "mine", extra))
    assert said in str(refused.value), refused.value


def test_a_profile_of_this_directory_replaces_only_its_own_agent(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """README "A real model": writing deploy/agents/gpt.toml here gives gpt a model; `parley
    up` refused to start for want of every other agent's profile, and with them copied the
    local agent's program, named relative to its profile, was not found (a newcomer's walk).
    Each agent's profile is this directory's if it has it, else Parley's own."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "deploy" / "agents").mkdir(parents=True)
    (tmp_path / "deploy" / "agents" / "gpt.toml").write_text('name = "gpt"\n')
    topology = system_topology(LOCAL_SYSTEM, "demo", tmp_path / "keys")
    dirs = {
        child.name: Path(json.loads(child.env["PARLEY_OPTIONS"])["agents_dir"])
        for child in topology.actor
        if child.run == "agent"
    }
    assert dirs["gpt"] == (tmp_path / "deploy" / "agents").resolve()
    shipped_dir = (SHIPPED_ROOT / "deploy" / "agents").resolve()
    assert {name for name, where in dirs.items() if where == shipped_dir} == set(
        LOCAL_SYSTEM.agents
    ) - {"gpt"}


def test_an_agent_with_no_profile_anywhere_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # the topology clears `.parley/`'s URL files where it runs
    system = _system(tmp_path / "mine", 'agents_dir = "agents"\n')  # of its own: gpt is not there
    with pytest.raises(ConfigError, match="no agent profile for gpt in "):
        system_topology(load_system(system), "demo", tmp_path / "keys")
