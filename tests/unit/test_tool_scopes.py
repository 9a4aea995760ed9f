"""The scope checks' pure side: paths matched lexically on a virtual workspace (as the gate
does, never touching the disk), commands as argvs, sizes, and narrowing along a call chain."""

from __future__ import annotations

import posixpath
from pathlib import PurePosixPath, PureWindowsPath
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from actors.tools import (
    FileWrite,
    InvalidArguments,
    ScopeDenied,
    check_command,
    check_path,
    check_request,
    check_size,
    narrow_scope,
)
from schemas import Capability

WORKSPACE = PurePosixPath("/workspace")


def scope(**fields: object) -> Capability:
    return Capability(name="File.Read", **fields)  # type: ignore[arg-type]


def denied(rule: str, call: object, *args: object, **kwargs: object) -> ScopeDenied:
    assert callable(call)
    with pytest.raises(ScopeDenied) as caught:
        call(*args, **kwargs)
    assert caught.value.rule == rule, str(caught.value)
    return caught.value


# Paths, lexically


def test_a_relative_path_is_under_the_workspace_and_an_absolute_one_is_itself() -> None:
    allowed = scope(allowed_paths=("src", "/data"))
    assert check_path(allowed, "src/a.py", WORKSPACE, resolve=False) == WORKSPACE / "src/a.py"
    assert check_path(allowed, "/data/x", WORKSPACE, resolve=False) == PurePosixPath("/data/x")
    assert check_path(allowed, "./src/./b/../c", WORKSPACE, resolve=False) == WORKSPACE / "src/c"


def test_the_lexical_check_never_touches_the_disk() -> None:
    """The gate's virtual workspace exists nowhere; a PurePosixPath has no disk methods."""
    result = check_path(scope(allowed_paths=(".",)), "a", PurePosixPath("/nowhere"), resolve=False)
    assert type(result) is PurePosixPath


def test_empty_allowed_paths_allow_nothing() -> None:
    error = denied("allowed_paths", check_path, scope(), "a", WORKSPACE, resolve=False)
    assert "'a'" in str(error)
    assert "empty" in str(error)


def test_prefixes_match_whole_components() -> None:
    allowed = scope(allowed_paths=("/a/b",))
    assert check_path(allowed, "/a/b", WORKSPACE, resolve=False) == PurePosixPath("/a/b")
    denied("allowed_paths", check_path, allowed, "/a/bc", WORKSPACE, resolve=False)
    denied("allowed_paths", check_path, allowed, "/a", WORKSPACE, resolve=False)


def test_dot_dot_out_of_an_allowed_prefix_is_refused_and_named() -> None:
    rules = scope(allowed_paths=("src",))
    request = "src/../../etc/passwd"
    error = denied("allowed_paths", check_path, rules, request, WORKSPACE, resolve=False)
    assert "src/../../etc/passwd" in str(error)
    assert "/etc/passwd" in str(error)


def test_blocked_wins_over_allowed_and_a_write_may_not_hold_a_blocked_path() -> None:
    rules = scope(allowed_paths=(".",), blocked_paths=("secrets", "/workspace/.git"))
    denied("blocked_paths", check_path, rules, "secrets/key", WORKSPACE, resolve=False)
    denied("blocked_paths", check_path, rules, ".git/config", WORKSPACE, resolve=False)
    assert check_path(rules, "secretsx", WORKSPACE, resolve=False) == WORKSPACE / "secretsx"
    assert check_path(rules, ".", WORKSPACE, resolve=False) == WORKSPACE
    denied("blocked_paths", check_path, rules, ".", WORKSPACE, resolve=False, write=True)


def test_windows_entries_allow_nothing_on_posix() -> None:
    rules = scope(allowed_paths=("C:\\Users\\demo",))
    denied("allowed_paths", check_path, rules, "C:\\Users\\demo", WORKSPACE, resolve=False)
    unc = scope(allowed_paths=("\\\\server\\share",))
    denied("allowed_paths", check_path, unc, "\\\\server\\share", WORKSPACE, resolve=False)


def test_a_double_slash_entry_is_a_posix_path_not_a_share() -> None:
    rules = scope(allowed_paths=("//data",), blocked_paths=("//data/private",))
    assert check_path(rules, "/data/x", WORKSPACE, resolve=False) == PurePosixPath("/data/x")
    denied("blocked_paths", check_path, rules, "/data/private/y", WORKSPACE, resolve=False)


def test_a_relative_or_non_posix_workspace_and_resolving_a_virtual_one_are_errors() -> None:
    rules = scope(allowed_paths=(".",))
    with pytest.raises(TypeError):
        check_path(rules, "a", PurePosixPath("workspace"), resolve=False)
    with pytest.raises(TypeError):
        check_path(rules, "a", PureWindowsPath("C:\\ws"), resolve=False)
    with pytest.raises(TypeError):
        check_path(rules, "a", WORKSPACE, resolve=True)


def test_a_nul_byte_is_refused() -> None:
    denied(
        "allowed_paths", check_path, scope(allowed_paths=(".",)), "a\0b", WORKSPACE, resolve=False
    )


COMPONENT = st.sampled_from(["a", "b", "ab", "..", ".", "c"])


@given(st.lists(COMPONENT, max_size=8), st.lists(st.sampled_from(["a", "b", "ab"]), max_size=3))
def test_a_lexical_path_is_allowed_exactly_when_its_normal_form_is_under_the_prefix(
    components: list[str], prefix: list[str]
) -> None:
    request = "/".join(components) or "."
    allowed = "/".join(["", "workspace", *prefix])
    normal = posixpath.normpath(posixpath.join(str(WORKSPACE), request))
    inside = normal == allowed or normal.startswith(allowed + "/")
    try:
        result = check_path(scope(allowed_paths=(allowed,)), request, WORKSPACE, resolve=False)
    except ScopeDenied:
        assert not inside
    else:
        assert inside
        assert str(result) == normal


# Commands

ALLOWED = scope(
    allowed_commands=(
        *("git", "python", "/usr/bin/env", "env", "timeout", "find", "bash", "test.sh"),
        *("xargs", "nohup", "nice", "busybox", "ls", "sudo"),
    ),
    blocked_commands=("rm",),
)


@pytest.mark.parametrize(
    "argv",
    [
        ["git", "status", "--short"],
        ["python", "-m", "pytest", "-q; rm -rf /", "$(whoami)"],
        ["env", "LANG=C", "git", "log"],
        ["/usr/bin/env", "-i", "python"],
        ["timeout", "-k", "1", "5", "python", "x.py"],
        ["nohup", "nice", "-n", "5", "git", "gc"],
        ["find", ".", "-name", "*.py"],
        ["find", ".", "-exec", "ls", "{}", "+"],
        ["bash", "-e", "test.sh"],
        ["xargs", "-0", "-n1", "ls"],
        ["busybox", "ls"],
        ["git", "-C", "sub", "--no-pager", "diff", "--stat"],
    ],
)
def test_allowed_programs_run(argv: list[str]) -> None:
    check_command(ALLOWED, argv)


@pytest.mark.parametrize(
    ("argv", "rule"),
    [
        (["cat", "/etc/passwd"], "allowed_commands"),
        (["rm", "-rf", "/"], "blocked_commands"),
        (["/bin/rm", "x"], "blocked_commands"),
        (["/usr/bin/git", "status"], "allowed_commands"),  # a bare entry allows the bare name
        (["./git"], "allowed_commands"),
        (["bin/git"], "allowed_commands"),
        (["git;id"], "allowed_commands"),
        (["git status"], "allowed_commands"),
        (["$(id)"], "allowed_commands"),
        (["-rf"], "allowed_commands"),
        (["/usr/bin/../bin/env"], "allowed_commands"),
        (["env", "rm", "x"], "blocked_commands"),
        (["env", "X=1", "cat"], "allowed_commands"),
        (["env", "PATH=.", "git"], "allowed_commands"),
        (["env", "LD_PRELOAD=./x.so", "ls"], "allowed_commands"),
        (["env", "-S", "rm x"], "allowed_commands"),
        (["bash", "-c", "ls"], "allowed_commands"),
        (["bash", "-ec", "ls"], "allowed_commands"),
        (["bash", "-s"], "allowed_commands"),
        (["bash"], "allowed_commands"),
        (["bash", "-o", "posix"], "allowed_commands"),
        (["bash", "other.sh"], "allowed_commands"),
        (["bash", "--rcfile", "x", "test.sh"], "allowed_commands"),
        (["find", ".", "-exec", "rm", "{}", ";"], "blocked_commands"),
        (["find", ".", "-execdir", "cat", "{}", "+"], "allowed_commands"),
        (["find", ".", "-ok", "ls"], "allowed_commands"),  # no terminator
        (["xargs", "rm"], "blocked_commands"),
        (["xargs"], "allowed_commands"),  # runs echo, which is not allowed
        (["xargs", "--max-a", "1", "ls"], "allowed_commands"),  # abbreviations are refused
        (["timeout", "5", "cat"], "allowed_commands"),
        (["nohup", "timeout", "5", "env", "rm"], "blocked_commands"),
        (["busybox", "rm", "x"], "blocked_commands"),
        (["busybox", "--install", "-s", "."], "allowed_commands"),
        (["sudo", "ls"], "allowed_commands"),  # refused even though allowed
        (["git", "-c", "core.sshCommand=id", "fetch"], "allowed_commands"),
        (["git", "--exec-path=.", "status"], "allowed_commands"),
        (["git", "config", "core.fsmonitor", "id"], "allowed_commands"),
        (["git", "submodule", "foreach", "id"], "allowed_commands"),
        (["git", "rebase", "-x", "id", "main"], "allowed_commands"),
        (["git", "fetch", "--upload-pack=id", "origin"], "allowed_commands"),
        (["git", "clone", "ext::sh -c id", "x"], "allowed_commands"),
        (["git", "push", "--receive-pack", "id", "origin"], "allowed_commands"),
        (["git", "clone", "--template=t", "url"], "allowed_commands"),
        (["git", "myalias"], "allowed_commands"),
        (["git", "status", "\0"], "allowed_commands"),
    ],
)
def test_refused_commands_name_their_rule(argv: list[str], rule: str) -> None:
    denied(rule, check_command, ALLOWED, argv)


def test_an_empty_allowlist_allows_no_command() -> None:
    error = denied("allowed_commands", check_command, scope(), ["ls"])
    assert "empty" in str(error)


def test_an_absolute_entry_allows_only_that_path() -> None:
    rules = scope(allowed_commands=("/usr/bin/git",))
    check_command(rules, ["/usr/bin/git", "status"])
    denied("allowed_commands", check_command, rules, ["git", "status"])
    denied("allowed_commands", check_command, rules, ["/workspace/git", "status"])


def test_wrappers_nested_past_the_bound_are_refused() -> None:
    rules = scope(allowed_commands=("nohup", "ls"))
    check_command(rules, ["nohup"] * 8 + ["ls"])
    denied("allowed_commands", check_command, rules, ["nohup"] * 20 + ["ls"])


# Sizes


def test_size_over_the_limit_is_refused_and_at_the_limit_allowed() -> None:
    check_size(scope(max_file_size_bytes=10), 10)
    check_size(scope(), 10**12)
    error = denied("max_file_size_bytes", check_size, scope(max_file_size_bytes=10), 11)
    assert "11" in str(error)
    with pytest.raises(ValueError, match="negative"):
        check_size(scope(), -1)


# Requests


REQUEST_SCOPE = Capability(
    name="any",
    allowed_paths=("src",),
    blocked_paths=("src/.git",),
    allowed_commands=("ls",),
    max_file_size_bytes=4,
)


def test_a_request_within_its_scope_gives_its_decoded_arguments() -> None:
    arguments = {"path": "src/a", "content": "abcd"}
    decoded = check_request("File.Write", arguments, REQUEST_SCOPE, WORKSPACE, resolve=False)
    assert decoded == FileWrite(path="src/a", content="abcd")
    http = {"url": "http://anything.example/"}  # left to the HTTP executor
    check_request("Network.Http", http, REQUEST_SCOPE, WORKSPACE, resolve=False)


@pytest.mark.parametrize(
    ("capability", "arguments", "rule"),
    [
        ("File.Write", {"path": "src/a", "content": "abcdé"}, "max_file_size_bytes"),
        ("File.Write", {"path": "x", "content": ""}, "allowed_paths"),
        ("File.Read", {"path": "x"}, "allowed_paths"),
        ("File.Delete", {"path": "src"}, "blocked_paths"),
        ("Shell.Exec", {"argv": ["ls"], "cwd": "/"}, "allowed_paths"),
        ("Shell.Exec", {"argv": ["cat"], "cwd": "src"}, "allowed_commands"),
        ("Git.Status", {"repo": "src"}, "blocked_paths"),
        ("Git.Diff", {"repo": "/elsewhere"}, "allowed_paths"),
        ("Git.Commit", {"repo": "src/lib", "message": "m", "paths": ["../../x"]}, "allowed_paths"),
        ("Git.Push", {"repo": "src/.git/..", "branch": "main"}, "blocked_paths"),
        ("Workspace.Upload", {"path": "/etc/passwd"}, "allowed_paths"),
    ],
)
def test_each_capability_checks_its_paths_and_command(
    capability: str, arguments: dict[str, Any], rule: str
) -> None:
    denied(rule, check_request, capability, arguments, REQUEST_SCOPE, WORKSPACE, resolve=False)


def test_bad_arguments_raise_invalid_arguments_as_is() -> None:
    with pytest.raises(InvalidArguments):
        check_request("File.Read", {"path": "a", "mode": "x"}, scope(), WORKSPACE, resolve=False)
    with pytest.raises(InvalidArguments):
        check_request("Nope.Nothing", {}, scope(), WORKSPACE, resolve=False)


# Narrowing


def test_narrowing_intersects_allows_unites_blocks_and_keeps_the_smaller_limits() -> None:
    outer = Capability(
        name="Shell.Exec",
        allowed_paths=("/a", "src", "/x/y"),
        blocked_paths=("/a/s",),
        allowed_commands=("git", "ls", "/usr/bin/env"),
        blocked_commands=("rm",),
        allowed_domains=("Example.com", "api.test"),
        max_file_size_bytes=100,
        requires_approval=True,
        approval_rule_id="outer-rule",
    )
    inner = Capability(
        name="Shell.Exec",
        allowed_paths=("/a/b", "src/lib/..", "/x", "/z", "/a/b/c", "lib"),
        blocked_paths=("/q",),
        allowed_commands=("env", "ls", "git", "cat"),
        allowed_domains=("example.com", "other.test"),
        max_output_bytes=5,
        approval_rule_id="inner-rule",
    )
    narrowed = narrow_scope(outer, inner)
    assert narrowed.allowed_paths == ("/a/b", "/a/b/c", "src", "/x/y")
    assert narrowed.blocked_paths == ("/a/s", "/q")
    assert narrowed.allowed_commands == ("ls", "git")
    assert narrowed.blocked_commands == ("rm",)
    assert narrowed.allowed_domains == ("example.com",)
    assert (narrowed.max_file_size_bytes, narrowed.max_output_bytes) == (100, 5)
    assert narrowed.requires_approval
    assert narrowed.approval_rule_id == "outer-rule"


def test_narrowing_edge_cases_refuse() -> None:
    assert narrow_scope(
        scope(allowed_paths=("..",)), scope(allowed_paths=("../x", "y"))
    ).allowed_paths == ("../x",)
    assert (
        narrow_scope(scope(allowed_paths=(".",)), scope(allowed_paths=("../x",))).allowed_paths
        == ()
    )
    assert (
        narrow_scope(scope(allowed_paths=("/w",)), scope(allowed_paths=("w",))).allowed_paths == ()
    )
    assert narrow_scope(scope(), scope(allowed_paths=("/",))).allowed_paths == ()
    mcp = narrow_scope(Capability(name="Mcp.s.*"), Capability(name="Mcp.s.tool"))
    assert mcp.name == "Mcp.s.tool"
    with pytest.raises(ValueError, match="cannot narrow"):
        narrow_scope(Capability(name="File.Read"), Capability(name="File.Write"))


PATH_ENTRY = st.builds(
    lambda absolute, parts: ("/" if absolute else "") + ("/".join(parts) or "."),
    st.booleans(),
    st.lists(st.sampled_from(["a", "b", "..", "."]), max_size=3),
)
ENTRIES = st.lists(PATH_ENTRY, max_size=3).map(tuple)


@given(ENTRIES, ENTRIES, ENTRIES, ENTRIES, PATH_ENTRY, st.booleans())
def test_narrowing_never_widens_a_path(
    outer_allowed: tuple[str, ...],
    outer_blocked: tuple[str, ...],
    inner_allowed: tuple[str, ...],
    inner_blocked: tuple[str, ...],
    request: str,
    write: bool,
) -> None:
    outer = scope(allowed_paths=outer_allowed, blocked_paths=outer_blocked)
    inner = scope(allowed_paths=inner_allowed, blocked_paths=inner_blocked)
    workspace = PurePosixPath("/a/w")
    try:
        check_path(narrow_scope(outer, inner), request, workspace, resolve=False, write=write)
    except ScopeDenied:
        return
    for side in (outer, inner):
        check_path(side, request, workspace, resolve=False, write=write)  # must not raise


COMMAND = st.sampled_from(["git", "ls", "/usr/bin/git", "rm", "env"])
COMMANDS = st.lists(COMMAND, max_size=4).map(tuple)


@given(COMMANDS, COMMANDS, COMMANDS, COMMANDS, st.lists(COMMAND, min_size=1, max_size=3))
def test_narrowing_never_widens_a_command(
    outer_allowed: tuple[str, ...],
    outer_blocked: tuple[str, ...],
    inner_allowed: tuple[str, ...],
    inner_blocked: tuple[str, ...],
    argv: list[str],
) -> None:
    outer = scope(allowed_commands=outer_allowed, blocked_commands=outer_blocked)
    inner = scope(allowed_commands=inner_allowed, blocked_commands=inner_blocked)
    try:
        check_command(narrow_scope(outer, inner), argv)
    except ScopeDenied:
        return
    check_command(outer, argv)
    check_command(inner, argv)
