"""Issue 31, capability scopes: requests that try to leave their scope, on real files.

Each attack is checked as the tool runtime checks it before executing (`resolve=True`, the
real workspace in `tmp_path`), and where the gate's lexical check cannot see the attack (a
symlink, a hard link), the test shows that too: the runtime's second check is the defence.
Earlier steps' doings (a symlink, a hard link, a file grown by appends) are made with the same
system calls a `Shell.Exec` step would use.
"""

from __future__ import annotations

import os
from pathlib import Path, PurePosixPath
from typing import Any

import pytest

from actors.tools import ScopeDenied, check_path, check_request, narrow_scope
from schemas import Capability

SECRET = "the content outside the scope"


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    """A session's workspace, with a secret file beside it (outside every scope here)."""
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "secret").write_text(SECRET)
    (tmp_path / "ws" / "src").mkdir(parents=True)
    (tmp_path / "ws" / "src" / "main.py").write_text("print('hello')\n")
    return tmp_path / "ws"


SCOPE = Capability(name="File.Read", allowed_paths=("src",), blocked_paths=("src/secrets",))
WHOLE_WORKSPACE = Capability(name="File.Read", allowed_paths=(".",))


def runtime_refuses(
    rule: str, capability: str, arguments: dict[str, Any], workspace: Path, scope: Capability
) -> str:
    with pytest.raises(ScopeDenied) as caught:
        check_request(capability, arguments, scope, workspace, resolve=True)
    assert caught.value.rule == rule, str(caught.value)
    return str(caught.value)


def gate_allows(
    capability: str, arguments: dict[str, Any], workspace: Path, scope: Capability
) -> None:
    """The lexical check passes: only resolving on the real file system can refuse it."""
    check_request(capability, arguments, scope, PurePosixPath(workspace), resolve=False)


def test_a_path_inside_the_scope_is_allowed_as_its_real_path(workspace: Path) -> None:
    checked = check_path(SCOPE, "src/./main.py", workspace, resolve=True)
    assert checked == workspace / "src" / "main.py"
    assert checked.read_text() == "print('hello')\n"


def test_an_absolute_path_outside_is_refused(workspace: Path) -> None:
    outside = str(workspace.parent / "outside" / "secret")
    message = runtime_refuses("allowed_paths", "File.Read", {"path": outside}, workspace, SCOPE)
    assert outside in message


def test_dot_dot_out_of_the_workspace_is_refused(workspace: Path) -> None:
    arguments = {"path": "src/../../outside/secret"}
    runtime_refuses("allowed_paths", "File.Read", arguments, workspace, SCOPE)


def test_a_symlink_made_by_an_earlier_step_is_resolved_and_refused(workspace: Path) -> None:
    os.symlink(workspace.parent / "outside" / "secret", workspace / "src" / "link")
    arguments = {"path": "src/link"}
    gate_allows("File.Read", arguments, workspace, SCOPE)
    message = runtime_refuses("allowed_paths", "File.Read", arguments, workspace, SCOPE)
    assert "resolves to" in message
    assert str(workspace.parent / "outside" / "secret") in message


def test_dot_dot_after_a_symlink_follows_the_link_as_the_kernel_does(workspace: Path) -> None:
    """`src/link/../secret` is `src/secret` to a lexical check, `outside/secret` to open()."""
    (workspace.parent / "outside" / "sub").mkdir()
    os.symlink(workspace.parent / "outside" / "sub", workspace / "src" / "link")
    arguments = {"path": "src/link/../secret"}
    gate_allows("File.Read", arguments, workspace, SCOPE)
    runtime_refuses("allowed_paths", "File.Read", arguments, workspace, SCOPE)


def test_a_hard_link_made_by_an_earlier_step_is_refused_for_reading_and_writing(
    workspace: Path,
) -> None:
    os.link(workspace.parent / "outside" / "secret", workspace / "src" / "hard")
    read, write = {"path": "src/hard"}, {"path": "src/hard", "content": "overwritten"}
    gate_allows("File.Read", read, workspace, SCOPE)
    message = runtime_refuses("allowed_paths", "File.Read", read, workspace, SCOPE)
    assert "2 hard links" in message
    runtime_refuses("allowed_paths", "File.Write", write, workspace, SCOPE)
    assert (workspace.parent / "outside" / "secret").read_text() == SECRET


def test_a_symlinked_parent_directory_cannot_hold_a_new_file(workspace: Path) -> None:
    os.symlink(workspace.parent / "outside", workspace / "src" / "dir")
    arguments = {"path": "src/dir/planted.txt", "content": "x"}
    gate_allows("File.Write", arguments, workspace, SCOPE)
    runtime_refuses("allowed_paths", "File.Write", arguments, workspace, SCOPE)


def test_a_dangling_symlink_cannot_create_its_target(workspace: Path) -> None:
    os.symlink(workspace.parent / "outside" / "created", workspace / "src" / "new")
    arguments = {"path": "src/new", "content": "x"}
    runtime_refuses("allowed_paths", "File.Write", arguments, workspace, SCOPE)


def test_an_allowed_directory_replaced_by_a_symlink_does_not_widen_the_scope(
    workspace: Path,
) -> None:
    """An allowed entry is never resolved: `src -> outside` must not make `outside` allowed."""
    (workspace / "src" / "main.py").unlink()
    (workspace / "src").rmdir()
    os.symlink(workspace.parent / "outside", workspace / "src")
    runtime_refuses("allowed_paths", "File.Read", {"path": "src/secret"}, workspace, SCOPE)


def test_a_symlink_loop_is_refused(workspace: Path) -> None:
    os.symlink(workspace / "src" / "b", workspace / "src" / "a")
    os.symlink(workspace / "src" / "a", workspace / "src" / "b")
    message = runtime_refuses("allowed_paths", "File.Read", {"path": "src/a"}, workspace, SCOPE)
    assert "loop" in message


def test_a_blocked_path_inside_an_allowed_one_is_refused_directly_and_by_a_symlink(
    workspace: Path,
) -> None:
    (workspace / "src" / "secrets").mkdir()
    (workspace / "src" / "secrets" / "key").write_text("k")
    os.symlink(workspace / "src" / "secrets", workspace / "src" / "alias")
    runtime_refuses("blocked_paths", "File.Read", {"path": "src/secrets/key"}, workspace, SCOPE)
    gate_allows("File.Read", {"path": "src/alias/key"}, workspace, SCOPE)
    runtime_refuses("blocked_paths", "File.Read", {"path": "src/alias/key"}, workspace, SCOPE)
    runtime_refuses("blocked_paths", "File.Delete", {"path": "src"}, workspace, SCOPE)


def test_a_blocked_entry_that_is_a_symlink_blocks_its_target_too(workspace: Path) -> None:
    (workspace / "src" / "vault").mkdir()
    (workspace / "src" / "vault" / "key").write_text("k")
    os.symlink(workspace / "src" / "vault", workspace / "src" / "secrets")
    runtime_refuses("blocked_paths", "File.Read", {"path": "src/vault/key"}, workspace, SCOPE)


SHELL = Capability(
    name="Shell.Exec",
    allowed_paths=(".",),
    allowed_commands=("git", "python", "env", "find", "ls", "sh", "bash", "build.sh", "xargs"),
    blocked_commands=("rm",),
)


@pytest.mark.parametrize(
    ("argv", "rule"),
    [
        (["curl", "http://example.com"], "allowed_commands"),
        (["rm", "-rf", "."], "blocked_commands"),
        (["sh", "-c", "cat ../outside/secret"], "allowed_commands"),
        (["bash", "-c", "cat ../outside/secret"], "allowed_commands"),
        (["bash", "-xc", "cat ../outside/secret"], "allowed_commands"),
        # a string that is also an allowed name: only the rule against -c refuses it
        (["sh", "-c", "ls"], "allowed_commands"),
        (["env", "PATH=.", "ls"], "allowed_commands"),  # runs a `ls` the agent wrote
        (["env", "LD_PRELOAD=./evil.so", "ls"], "allowed_commands"),
        (["env", "cat", "../outside/secret"], "allowed_commands"),
        (["env", "rm", "-rf", "."], "blocked_commands"),
        (["env", "sh", "-c", "id"], "allowed_commands"),
        (["find", ".", "-exec", "cat", "../outside/secret", ";"], "allowed_commands"),
        (["find", ".", "-delete", "-exec", "rm", "{}", "+"], "blocked_commands"),
        (["ls;cat", "../outside/secret"], "allowed_commands"),
        (["$(cat ../outside/secret)"], "allowed_commands"),
        (["ls|sh"], "allowed_commands"),
        # the program xargs or find runs gets arguments the check cannot see
        (["xargs", "env"], "allowed_commands"),
        (["xargs", "git"], "allowed_commands"),
        (["find", ".", "-exec", "env", "ls", "{}", ";"], "allowed_commands"),
        (["../outside/tool"], "allowed_commands"),
        (["/bin/sh"], "allowed_commands"),
    ],
)
def test_commands_outside_the_scope_are_refused(
    workspace: Path, argv: list[str], rule: str
) -> None:
    runtime_refuses(rule, "Shell.Exec", {"argv": argv}, workspace, SHELL)


def test_program_names_a_shell_or_a_search_could_misread_are_refused_even_when_listed(
    workspace: Path,
) -> None:
    """A relative path runs a file the agent may have written; a metacharacter or `..` in a
    program's name means the entry is not what it seems, whatever the allowlist says."""
    (workspace / "run.sh").write_text("cat ../outside/secret\n")
    misread = ("./run.sh", "ls;cat", "$(id)", "/usr/bin/../../tmp/x", "-rf", "a b")
    scope = Capability(name="Shell.Exec", allowed_paths=(".",), allowed_commands=misread)
    for program in misread:
        runtime_refuses("allowed_commands", "Shell.Exec", {"argv": [program]}, workspace, scope)


def test_a_shell_runs_only_a_script_that_is_itself_allowed(workspace: Path) -> None:
    (workspace / "build.sh").write_text("echo built\n")
    (workspace / "other.sh").write_text("cat ../outside/secret\n")
    check_request("Shell.Exec", {"argv": ["bash", "build.sh"]}, SHELL, workspace, resolve=True)
    for argv in (["bash", "other.sh"], ["bash"], ["sh", "-s"], ["bash", "-o", "posix"]):
        runtime_refuses("allowed_commands", "Shell.Exec", {"argv": argv}, workspace, SHELL)


def test_metacharacters_inside_arguments_are_harmless_data(workspace: Path) -> None:
    arguments = {"argv": ["ls", "; cat ../outside/secret", "$(id)", "`id`", "|", "&&"]}
    check_request("Shell.Exec", arguments, SHELL, workspace, resolve=True)


def test_a_command_cannot_run_in_a_directory_outside_the_scope(workspace: Path) -> None:
    arguments = {"argv": ["ls"], "cwd": str(workspace.parent / "outside")}
    runtime_refuses("allowed_paths", "Shell.Exec", arguments, workspace, SHELL)
    os.symlink(workspace.parent / "outside", workspace / "up")
    runtime_refuses("allowed_paths", "Shell.Exec", {"argv": ["ls"], "cwd": "up"}, workspace, SHELL)


LIMITED = Capability(name="File.Write", allowed_paths=(".",), max_file_size_bytes=16)


def test_a_file_over_max_file_size_bytes_is_refused(workspace: Path) -> None:
    big = {"path": "big.txt", "content": "x" * 17}
    message = runtime_refuses("max_file_size_bytes", "File.Write", big, workspace, LIMITED)
    assert "17 bytes" in message
    assert not (workspace / "big.txt").exists()
    check_request(
        "File.Write", {"path": "big.txt", "content": "x" * 16}, LIMITED, workspace, resolve=True
    )


def test_appends_cannot_grow_a_file_past_the_limit(workspace: Path) -> None:
    (workspace / "log.txt").write_text("x" * 10)
    arguments = {"path": "log.txt", "content": "y" * 7, "append": True}
    gate_allows("File.Write", arguments, workspace, LIMITED)
    runtime_refuses("max_file_size_bytes", "File.Write", arguments, workspace, LIMITED)


def test_an_upload_over_the_limit_is_refused(workspace: Path) -> None:
    (workspace / "artifact.bin").write_bytes(b"\0" * 17)
    arguments = {"path": "artifact.bin"}
    runtime_refuses("max_file_size_bytes", "Workspace.Upload", arguments, workspace, LIMITED)


def test_a_delegated_agent_cannot_use_more_than_its_caller_has(workspace: Path) -> None:
    """The callee's own scope is wide; narrowed by its caller's it allows only the overlap."""
    caller = Capability(
        name="Shell.Exec",
        allowed_paths=("src",),
        allowed_commands=("ls",),
        max_file_size_bytes=8,
    )
    callee = Capability(
        name="Shell.Exec",
        allowed_paths=(".", "/"),
        allowed_commands=("ls", "rm", "cat"),
        blocked_commands=("curl",),
    )
    narrowed = narrow_scope(caller, callee)
    outside = str(workspace.parent / "outside" / "secret")
    check_request("File.Read", {"path": outside}, callee, workspace, resolve=True)
    runtime_refuses("allowed_paths", "File.Read", {"path": outside}, workspace, narrowed)
    runtime_refuses(
        "allowed_commands", "Shell.Exec", {"argv": ["rm", "x"], "cwd": "src"}, workspace, narrowed
    )
    write = {"path": "src/a", "content": "x" * 9}
    runtime_refuses("max_file_size_bytes", "File.Write", write, workspace, narrowed)
    assert narrow_scope(callee, caller) == Capability(
        name="Shell.Exec",
        allowed_paths=("src",),  # '/' and 'src' cannot be compared without a workspace
        allowed_commands=("ls",),
        blocked_commands=("curl",),
        max_file_size_bytes=8,
    )
