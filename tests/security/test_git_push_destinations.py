"""Git.Push reaches only the addresses its scope allows, as Network.Http does.

An https remote's host allowed by name is not enough: the addresses it resolves to must be
public or listed, and git is pinned to them. The listeners are real TCP servers counting
every connection, so "refused before anything was sent" is a listener that saw none.
"""

from __future__ import annotations

import asyncio
import dataclasses
import ipaddress
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from actors.tools import ScopeDenied, ToolOutcome, execute_git_push
from actors.tools._git import curl_resolve, https_pins
from actors.tools._git_run import open_repository, run_git
from schemas import Capability, ErrorCode
from tests.support.git_repos import Workspace, git, invocation, make_workspace


class _Listener:
    """A TCP server on loopback that closes each connection at once, counting them."""

    def __init__(self) -> None:
        self.connections = 0
        self.connected = asyncio.Event()
        self.port = 0

    async def _accept(self, _reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        self.connected.set()
        writer.close()


@asynccontextmanager
async def _listening(host: str) -> AsyncIterator[_Listener]:
    listener = _Listener()
    server = await asyncio.start_server(listener._accept, host, 0)
    listener.port = server.sockets[0].getsockname()[1]
    async with server:
        yield listener


@pytest.fixture
def workspace(tmp_path: Path) -> Workspace:
    return make_workspace(tmp_path)


async def _push_to(workspace: Workspace, url: str, *allowed_domains: str) -> ToolOutcome:
    """Git.Push of `main` to a remote `web` at `url`, under a scope allowing those domains."""
    git(workspace.project, "remote", "add", "web", url)
    arguments: dict[str, object] = {"remote": "web", "branch": "main"}
    push = invocation(workspace, "Git.Push", arguments, allowed_domains=allowed_domains)
    return await execute_git_push(push)


async def test_a_push_to_an_allowed_name_that_resolves_to_loopback_is_refused_unsent(
    workspace: Workspace,
) -> None:
    """`localhost` is allowed by name; its addresses are not listed. Without the resolved
    check git connected to the host's own service on that port."""
    async with _listening("127.0.0.1") as service:
        with pytest.raises(ScopeDenied) as denied:
            await _push_to(workspace, f"https://localhost:{service.port}/repo.git", "localhost")
        assert service.connections == 0
    assert denied.value.rule == "allowed_domains"
    assert "localhost resolves to" in str(denied.value)


async def test_a_push_to_listed_addresses_goes_there(workspace: Workspace) -> None:
    """Listing the addresses lets the push out; it fails at TLS (the listener is no https
    server), having connected to the address that was checked."""
    async with _listening("127.0.0.1") as service:
        url = f"https://localhost:{service.port}/r.git"
        outcome = await _push_to(workspace, url, "localhost", "127.0.0.1", "::1")
        assert outcome.status == "failed"
        assert service.connections >= 1


async def test_a_push_past_its_timeout_is_a_failed_run_not_a_chain_deadline(
    workspace: Workspace,
) -> None:
    """A remote that takes the connection and never answers: the step fails at its own
    `timeout_s` with TOOL_EXECUTION_FAILED, as Shell.Exec's does (it said DEADLINE_EXCEEDED,
    the code of a call chain's deadline passed)."""
    held: list[asyncio.StreamWriter] = []

    async def silent(_reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        held.append(writer)  # kept open, never written to

    server = await asyncio.start_server(silent, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    async with server:
        git(workspace.project, "remote", "add", "web", f"https://127.0.0.1:{port}/r.git")
        push = invocation(
            workspace,
            "Git.Push",
            {"remote": "web", "branch": "main"},
            allowed_domains=("127.0.0.1",),
        )
        outcome = await execute_git_push(dataclasses.replace(push, timeout_s=1.0))
        for writer in held:
            writer.close()
    assert held, "git never connected"
    assert outcome.status == "failed"
    assert outcome.error_code == ErrorCode.TOOL_EXECUTION_FAILED, outcome.error_message
    assert "ran past its limit timeout_s (1 s)" in (outcome.error_message or "")


async def test_git_connects_to_the_pinned_addresses_without_asking_dns(
    workspace: Workspace,
) -> None:
    """A name no resolver knows (`.invalid`) reaches the listener only through the pin: the
    setting is read as curl reads it, an IPv6 address (unreachable here) first."""
    async with _listening("127.0.0.1") as service:
        host = "parley-pinned.invalid."  # curl reads a pin of the name as it is spelled
        pin = curl_resolve(
            host,
            service.port,
            [ipaddress.ip_address("::1"), ipaddress.ip_address("127.0.0.1")],
        )
        repository = open_repository(workspace.root, "project")
        run = await run_git(
            repository,
            "-c",
            pin,
            "ls-remote",
            f"https://{host}:{service.port}/r.git",
            limit=4096,
            network=True,
            timeout_s=30.0,
        )
        assert run.exit_code != 0  # no https server there
        await asyncio.wait_for(service.connected.wait(), timeout=10)
        assert service.connections >= 1


@pytest.mark.parametrize("separator", ["\u2028", "\u2029", "\x85"])
async def test_a_push_url_cut_by_a_line_separator_is_refused(
    workspace: Workspace, separator: str
) -> None:
    """git keeps U+2028 and the like inside a URL, and curl reads what precedes `@` as a
    user: the URL goes to 127.0.0.1, while a split at the separator checked `8.8.8.8` and a
    "local path". Refused whole, before anything is resolved or sent."""
    with pytest.raises(ScopeDenied) as denied:
        await _push_to(workspace, f"https://8.8.8.8{separator}@127.0.0.1/r.git", "8.8.8.8")
    assert "whitespace, control or non-ASCII" in str(denied.value)


async def test_a_host_spelled_with_its_final_dot_is_pinned_as_spelled() -> None:
    """curl matches a pin by the name as the URL spells it: `localhost.` is pinned too, or
    curl would ask DNS for it (a second answer could then be anything)."""
    scope = Capability(name="Git.Push", allowed_domains=("localhost", "127.0.0.1", "::1"))
    pins = await https_pins(scope, ["https://localhost.:8443/r.git"])
    hosts = {pin.split("=", 1)[1].split(":", 1)[0] for pin in pins if "curloptResolve" in pin}
    assert hosts == {"localhost", "localhost."}
    assert "http.followRedirects=false" in pins
