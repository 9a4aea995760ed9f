"""Issue 31: Shell.Exec runs real programs contained, with bubblewrap and without it.

What a command gets (its stdin, one output stream, its exit code, only its workspace to
write, the network only when granted, CPU and memory limits) and what the executor makes of
a run (`succeeded` with the exit code, `failed` naming the limit, the output cap of the scope
or its default, the provenance of the output). The attacks are in
tests/security/test_shell_attacks.py.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from actors.tools import (
    DEFAULT_MAX_OUTPUT_BYTES,
    Provenance,
    ShellLimits,
    ToolInvocation,
    execute_shell,
)
from actors.tools._confinement import network_isolation_unusable
from actors.tools._sandbox import _probe
from schemas import Capability, ErrorCode
from tests.support.contained import MODES, OWN_USER, needs_sandbox_user, run


@pytest.fixture
def workspace(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "ws"
    path.mkdir()
    yield path.resolve()


@pytest.mark.parametrize("bubblewrap", MODES)
async def test_stdin_one_output_stream_and_the_exit_code(workspace: Path, bubblewrap: bool) -> None:
    result = await run(
        ["sh", "-c", "cat; echo to-stderr >&2; echo to-stdout; exit 3"],
        workspace,
        bubblewrap=bubblewrap,
        stdin=b"given on stdin\n",
    )
    assert result.output == b"given on stdin\nto-stderr\nto-stdout\n"
    assert (result.exit_code, result.signal, result.timed_out) == (3, None, False)
    assert not result.truncated
    fallback = "sandbox-user" if OWN_USER else "limits-only"
    assert result.containment == ("bubblewrap" if bubblewrap else fallback)


@needs_sandbox_user
@pytest.mark.parametrize("bubblewrap", MODES)
async def test_the_workspace_is_the_commands_to_write_and_the_runtimes_after(
    workspace: Path, bubblewrap: bool
) -> None:
    (workspace / "given.txt").write_text("from the runtime\n")
    result = await run(
        ["sh", "-c", "echo more >> given.txt && mkdir made && echo new > made/new && id -u"],
        workspace,
        bubblewrap=bubblewrap,
    )
    assert result.exit_code == 0, result.output
    assert int(result.output) != 0, "the command ran as root"
    assert (workspace / "given.txt").read_text() == "from the runtime\nmore\n"
    assert _owners(workspace) == {os.getuid()}


@needs_sandbox_user
@pytest.mark.parametrize("bubblewrap", MODES)
async def test_runs_at_once_in_one_workspace_share_its_user(
    workspace: Path, bubblewrap: bool
) -> None:
    # Each writes its uid into a FIFO the other reads, so both run at the same time (or
    # neither ends before its timeout); the first then waits until the second has ended.
    for fifo in ("one", "two", "release"):
        os.mkfifo(workspace / fifo)
    release = os.open(workspace / "release", os.O_RDWR | os.O_NONBLOCK)  # never blocks
    try:
        first = asyncio.create_task(
            run(
                ["sh", "-c", "id -u > one; cat two; head -n 1 release; touch first"],
                workspace,
                bubblewrap=bubblewrap,
            )
        )
        second = await run(
            ["sh", "-c", "cat one; id -u > two; touch second"], workspace, bubblewrap=bubblewrap
        )
        os.write(release, b"go\n")
        ended = await first
    finally:
        os.close(release)
    assert second.exit_code == 0, second.output
    assert ended.exit_code == 0, "the second run's end killed the first's processes"
    assert ended.output == second.output + b"go\n", "the second run took the workspace"
    assert _owners(workspace) == {os.getuid()}


@pytest.mark.parametrize("bubblewrap", MODES)
async def test_secrets_of_the_machine_stay_unreadable(workspace: Path, bubblewrap: bool) -> None:
    result = await run(["cat", "/etc/shadow"], workspace, bubblewrap=bubblewrap)
    assert result.exit_code != 0
    assert b"root:" not in result.output


@pytest.fixture
def world_writable() -> Iterator[Path]:
    """A directory outside the workspace anyone may write to and reach (in the system's
    temporary directory, not under the tests' own, which only root may enter)."""
    path = Path(tempfile.mkdtemp(prefix="parley-outside-"))
    path.chmod(0o777)
    yield path
    shutil.rmtree(path)


@pytest.mark.parametrize("bubblewrap", MODES[:1])
async def test_under_bubblewrap_only_the_workspace_is_writable(
    workspace: Path, world_writable: Path, bubblewrap: bool
) -> None:
    script = f"touch {world_writable}/f; touch /usr/f; touch /etc/f; touch /tmp/f && touch in-ws"
    result = await run(["sh", "-c", script], workspace, bubblewrap=bubblewrap)
    assert result.exit_code == 0, result.output
    planted = [world_writable / "f", Path("/usr/f"), Path("/etc/f"), workspace / "in-ws"]
    assert _existing(*planted) == [workspace / "in-ws"]


@pytest.mark.parametrize("bubblewrap", MODES[:1])
async def test_under_bubblewrap_home_reaches_the_workspace(
    workspace: Path, bubblewrap: bool
) -> None:
    # The tests' workspaces lie under a directory only root may enter.
    result = await run(["sh", "-c", 'touch "$HOME/by-home"'], workspace, bubblewrap=bubblewrap)
    assert result.exit_code == 0, result.output
    assert _existing(workspace / "by-home") == [workspace / "by-home"]


def _owners(root: Path) -> set[int]:
    return {path.lstat().st_uid for path in [root, *root.rglob("*")]}


def _existing(*paths: Path) -> list[Path]:
    return [path for path in paths if path.exists()]


@pytest.mark.parametrize("network", [False, True], ids=["no-network", "network-granted"])
@pytest.mark.parametrize("bubblewrap", MODES)
async def test_the_network_only_when_granted(
    workspace: Path, bubblewrap: bool, network: bool
) -> None:
    if not bubblewrap and not network and network_isolation_unusable() is not None:
        pytest.skip(f"without bubblewrap the network stays: {network_isolation_unusable()}")
    heard = asyncio.Event()

    async def listen(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if await reader.read() == b"hello\n":
            heard.set()
        writer.close()

    server = await asyncio.start_server(listen, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    async with server:
        result = await run(
            ["bash", "-c", f"echo hello > /dev/tcp/127.0.0.1/{port}"],
            workspace,
            bubblewrap=bubblewrap,
            network=network,
        )
        if network:
            assert result.exit_code == 0, result.output
            async with asyncio.timeout(10):
                await heard.wait()
        else:
            assert result.exit_code != 0
            assert b"Connection refused" in result.output or b"unreachable" in result.output
            assert not heard.is_set()


@pytest.mark.parametrize("bubblewrap", MODES)
async def test_cpu_time_past_its_limit_kills_the_command(workspace: Path, bubblewrap: bool) -> None:
    result = await run(
        ["sh", "-c", "while :; do :; done"],
        workspace,
        bubblewrap=bubblewrap,
        limits=ShellLimits(cpu_seconds=1),
    )
    assert result.signal == signal.SIGXCPU
    assert result.limit_hit is not None and result.limit_hit.startswith("cpu_seconds")


@pytest.mark.parametrize("bubblewrap", MODES)
async def test_memory_past_its_limit_is_refused(workspace: Path, bubblewrap: bool) -> None:
    # 50 MB held by the shell: the data limit refuses it (without it the length is printed).
    script = 'x=$(head -c 50000000 /dev/zero | tr "\\0" a); echo "${#x}"'
    result = await run(
        ["sh", "-c", script],
        workspace,
        bubblewrap=bubblewrap,
        limits=ShellLimits(memory_bytes=16 << 20),
    )
    assert b"50000000" not in result.output
    assert result.exit_code != 0


def _invocation(
    workspace: Path,
    arguments: dict[str, object],
    *,
    scope: Capability | None = None,
    timeout_s: float = 30.0,
) -> ToolInvocation:
    return ToolInvocation(
        capability="Shell.Exec",
        arguments=arguments,
        scope=scope or Capability(name="Shell.Exec"),
        workspace=workspace,
        session_id="session-1",
        step_id="step-1",
        timeout_s=timeout_s,
    )


async def test_a_non_zero_exit_succeeds_with_its_exit_code_and_provenance(
    workspace: Path,
) -> None:
    outcome = await execute_shell(
        _invocation(workspace, {"argv": ["sh", "-c", "echo said; exit 7"]})
    )
    assert outcome.status == "succeeded"
    assert outcome.output_text == "said\n"
    assert outcome.details["exit_code"] == 7
    assert outcome.provenance == Provenance(
        source="Shell.Exec", locator="sh -c 'echo said; exit 7'", trust="untrusted"
    )


async def test_the_shorter_timeout_applies_and_fails_the_run(workspace: Path) -> None:
    outcome = await execute_shell(
        _invocation(workspace, {"argv": ["sleep", "30"], "timeout_s": 60}, timeout_s=0.5)
    )
    assert (outcome.status, outcome.error_code) == ("failed", ErrorCode.TOOL_EXECUTION_FAILED)
    assert outcome.error_message is not None
    assert "timeout_s (wall-clock timeout of 0.5 s)" in outcome.error_message
    sooner = await execute_shell(
        _invocation(workspace, {"argv": ["sleep", "30"], "timeout_s": 0.5}, timeout_s=60)
    )
    assert sooner.status == "failed"
    assert sooner.details["duration_ms"] < 10_000


async def test_the_output_cap_is_the_scopes_or_the_default(workspace: Path) -> None:
    argv: dict[str, object] = {"argv": ["head", "-c", "100000", "/dev/zero"]}
    default = await execute_shell(_invocation(workspace, argv))
    assert len(default.output_text) == DEFAULT_MAX_OUTPUT_BYTES and default.truncated
    assert default.details["dropped_bytes"] == 100_000 - DEFAULT_MAX_OUTPUT_BYTES
    scoped = Capability(name="Shell.Exec", max_output_bytes=10)
    capped = await execute_shell(_invocation(workspace, argv, scope=scoped))
    assert (len(capped.output_text), capped.truncated) == (10, True)


async def test_a_program_that_is_not_there_fails_to_start(workspace: Path) -> None:
    outcome = await execute_shell(_invocation(workspace, {"argv": ["no-such-program-here"]}))
    assert (outcome.status, outcome.error_code) == ("failed", ErrorCode.TOOL_EXECUTION_FAILED)
    assert outcome.error_message is not None and "could not be started" in outcome.error_message


def test_a_machine_without_bubblewrap_is_told_why(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    assert _probe() == "bwrap is not installed"
