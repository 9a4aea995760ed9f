"""The shape of the code base: public surfaces, import direction, generated files."""

from __future__ import annotations

import ast
import importlib
import json
from pathlib import Path

import pytest

from schemas import decode_envelope
from tools.schemagen import write_schemas

ROOT = Path(__file__).resolve().parents[1]
LAYERS = ("schemas", "bus", "actors", "tools")  # each may import only those before it


def _packages() -> list[str]:
    """Every package of the layers, subpackages included (`actors.gate`, `actors.agent.brains`)."""
    return [
        ".".join(init.parent.relative_to(ROOT).parts)
        for layer in LAYERS
        for init in sorted((ROOT / layer).rglob("__init__.py"))
    ]


@pytest.mark.parametrize("package", _packages())
def test_public_api_is_an_explicit_tuple(package: str) -> None:
    module = importlib.import_module(package)
    exported = module.__all__
    assert isinstance(exported, tuple)
    assert len(set(exported)) == len(exported)
    for name in exported:
        assert hasattr(module, name), f"{package}.__all__ names missing {name}"
    for path in (ROOT / package.replace(".", "/")).glob("*.py"):
        if path.stem in {"__init__", "__main__"}:
            continue
        sub = importlib.import_module(f"{package}.{path.stem}")
        assert isinstance(getattr(sub, "__all__", ()), tuple), f"{package}.{path.stem}"


def _imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
    return found


ACTOR_PACKAGES = sorted(p.name for p in (ROOT / "actors").iterdir() if (p / "__init__.py").exists())


@pytest.mark.parametrize("actor", ACTOR_PACKAGES)
def test_no_actor_reaches_into_another_actors_private_modules(actor: str) -> None:
    """One actor may use another's public face (`actors.gate`), never what is behind it."""
    for path in sorted((ROOT / "actors" / actor).rglob("*.py")):
        for module in _imported_modules(path):
            parts = module.split(".")
            if parts[0] != "actors" or len(parts) < 3 or parts[1] == actor:
                continue
            assert not any(part.startswith("_") for part in parts[2:]), (
                f"{path.relative_to(ROOT)} imports {module}: use actors.{parts[1]} instead"
            )


def test_tools_use_only_the_actors_public_faces() -> None:
    for path in sorted((ROOT / "tools").rglob("*.py")):
        for module in _imported_modules(path):
            parts = module.split(".")
            if parts[0] == "actors":
                assert not any(part.startswith("_") for part in parts[1:]), (
                    f"{path.relative_to(ROOT)} imports {module}"
                )


def _imported_top_levels(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module.split(".")[0])
    return found


@pytest.mark.parametrize("index", range(len(LAYERS)))
def test_imports_flow_one_way(index: int) -> None:
    package = LAYERS[index]
    forbidden = set(LAYERS[index + 1 :])
    for path in sorted((ROOT / package).rglob("*.py")):
        bad = _imported_top_levels(path) & forbidden
        assert not bad, (
            f"{path.relative_to(ROOT)} imports {sorted(bad)}: imports flow {' <- '.join(LAYERS)}"
        )


def test_json_schemas_are_fresh() -> None:
    stale = write_schemas(check_only=True)
    assert not stale, f"stale schema files {stale}: run `parley schemas`"


def test_json_schemas_describe_every_kind() -> None:
    files = {p.name for p in (ROOT / "schemas" / "json").glob("*.schema.json")}
    assert "agent_call.schema.json" in files and "reply.schema.json" in files
    reply = json.loads((ROOT / "schemas" / "json" / "reply.schema.json").read_text())
    assert reply["$defs"]["Reply"]["required"] == ["message"]
    assert reply["$defs"]["Reply"]["additionalProperties"] is False


@pytest.mark.parametrize(
    "fixture",
    sorted((ROOT / "tests" / "fixtures").glob("v*/*.json")),
    ids=lambda p: f"{p.parent.name}/{p.stem}",
)
def test_released_versions_still_decode(fixture: Path) -> None:
    envelope = decode_envelope(fixture.read_bytes())
    assert envelope.__struct_config__.tag == fixture.stem


_SPAWNS = ("create_subprocess_exec", "Popen")


def _unowned_spawns(path: Path) -> list[str]:
    """The process starts in `path` whose command is not `owned_argv(...)`: a child that
    outlives its parent killed outright (bus/_lifeline.py)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
            continue
        if node.func.attr not in _SPAWNS or not node.args:
            continue
        argv = node.args[0].value if isinstance(node.args[0], ast.Starred) else node.args[0]
        owned = isinstance(argv, ast.Call) and getattr(argv.func, "id", "") == "owned_argv"
        if not owned:
            found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    return found


def test_every_child_process_dies_with_its_parent() -> None:
    """Anything a person starts leaves no process behind, killed outright included: a
    chaos run's model provider and its provisioning, a benchmark's `audit verify`, the
    tools demo's git outlived a SIGKILLed command (an operator's walk). Every start of a
    child goes through `owned_argv`, which has the kernel kill it with its parent."""
    unowned = [
        where
        for layer in LAYERS
        for path in sorted((ROOT / layer).rglob("*.py"))
        for where in _unowned_spawns(path)
    ]
    assert not unowned, f"children that outlive a killed parent: {unowned}"


def test_every_scratch_directory_is_removed_after_a_killed_run() -> None:
    """A SIGKILLed demo, chaos run or benchmark left its temporary store behind for ever: every
    one is made by `scratch_directory`, which names it for its process and removes those of
    processes that ended (bus/_scratch.py)."""
    made_elsewhere = [
        f"{path.relative_to(ROOT)}:{node.lineno}"
        for layer in LAYERS
        for path in sorted((ROOT / layer).rglob("*.py"))
        if path.name != "_scratch.py"
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Call)
        and getattr(node.func, "attr", getattr(node.func, "id", ""))
        in {"TemporaryDirectory", "mkdtemp"}
    ]
    assert not made_elsewhere, f"temporary directories a killed run leaves: {made_elsewhere}"


MAX_LINES = 400
"""A module a newcomer reads in one sitting; past this, it holds more than one concept."""


def test_no_module_outside_the_tests_exceeds_the_line_limit() -> None:
    too_long = {
        str(path.relative_to(ROOT)): length
        for layer in (*LAYERS, "examples")
        for path in sorted((ROOT / layer).rglob("*.py"))
        if (length := len(path.read_text().splitlines())) > MAX_LINES
    }
    assert not too_long, f"modules over {MAX_LINES} lines: {too_long}"
