"""Network.Http against a real HTTP server on loopback: what an allowed request gives back.

The server is a stdlib ThreadingHTTPServer on 127.0.0.1 and a port the OS picks
(tests/support/http_origin.py); the scope lists `127.0.0.1` itself, since a loopback
address is refused unless listed. The attacks (redirects, DNS to loopback, IP literals) are in
tests/security/test_tool_network_git_attacks.py.
"""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from actors.tools import ScopeDenied, ToolInvocation, execute_http
from schemas import Capability, ErrorCode
from tests.support.http_origin import origin, tls_origin


def _invocation(
    url: str, *domains: str, max_output_bytes: int | None = None, timeout_s: float = 10.0
) -> ToolInvocation:
    return ToolInvocation(
        capability="Network.Http",
        arguments={"url": url},
        scope=Capability(
            name="Network.Http", allowed_domains=domains, max_output_bytes=max_output_bytes
        ),
        workspace=Path("."),
        session_id="session-http",
        step_id="step-1",
        timeout_s=timeout_s,
    )


async def test_an_allowed_get_returns_the_body_status_final_url_and_provenance() -> None:
    with origin() as server:
        url = server.url("/hello")
        outcome = await execute_http(_invocation(url, "127.0.0.1"))
        assert [hit.path for hit in server.seen()] == ["/hello"]
    assert outcome.status == "succeeded"
    assert outcome.output_text == "hello from the origin"
    assert not outcome.truncated
    assert outcome.details["status_code"] == 200
    assert outcome.details["final_url"] == url
    assert outcome.provenance is not None
    assert outcome.provenance.source == "Network.Http"
    assert outcome.provenance.locator == url
    assert outcome.provenance.trust == "untrusted"


async def test_a_status_the_server_answers_is_a_succeeded_run_with_its_code() -> None:
    with origin() as server:
        outcome = await execute_http(_invocation(server.url("/missing"), "127.0.0.1"))
    assert outcome.status == "succeeded"
    assert outcome.details["status_code"] == 404


async def test_the_request_goes_to_the_checked_address_with_the_name_as_host() -> None:
    """The URL's name is kept in the Host header though the connection is to the address."""
    with origin() as server:
        outcome = await execute_http(
            _invocation(server.url("/host", host="localhost"), "localhost", "127.0.0.1", "::1")
        )
    assert outcome.status == "succeeded", outcome.error_message
    assert outcome.output_text == f"localhost:{server.port}"


async def test_a_domain_not_allowed_is_refused_and_never_reached() -> None:
    """`localhost` resolves to a listed address, yet the name itself is not in the list."""
    with origin() as server:
        with pytest.raises(ScopeDenied) as denied:
            await execute_http(_invocation(server.url("/hello", host="localhost"), "127.0.0.1"))
        assert server.seen() == []
    assert denied.value.rule == "allowed_domains"
    assert denied.value.code == ErrorCode.CAPABILITY_DENIED
    assert "'localhost' is not in allowed_domains" in str(denied.value)


async def test_an_allowed_redirect_is_followed_and_the_final_url_reported() -> None:
    with origin() as first, origin() as second:
        target = second.url("/hello")
        outcome = await execute_http(_invocation(first.url(f"/redirect?to={target}"), "127.0.0.1"))
        assert [hit.path for hit in first.seen()] == ["/redirect"]
        assert [hit.path for hit in second.seen()] == ["/hello"]
    assert outcome.status == "succeeded"
    assert outcome.output_text == "hello from the origin"
    assert outcome.details["final_url"] == target
    assert outcome.details["redirects"] == 1


async def test_a_redirect_loop_stops_after_five_redirects() -> None:
    with origin() as server:
        url = server.url("/loop")
        outcome = await execute_http(_invocation(url, "127.0.0.1"))
        hits = server.seen()
    assert outcome.status == "failed"
    assert outcome.error_code == ErrorCode.TOOL_EXECUTION_FAILED
    assert "more than 5 redirects" in (outcome.error_message or "")
    assert len(hits) == 6


async def test_a_body_over_max_output_bytes_is_cut_and_marked() -> None:
    """The server's body never ends: only reading incrementally and stopping returns."""
    with origin() as server:
        outcome = await execute_http(
            _invocation(server.url("/flood"), "127.0.0.1", max_output_bytes=1000)
        )
    assert outcome.status == "succeeded", outcome.error_message
    assert outcome.truncated
    assert outcome.output_text == "x" * 1000
    assert outcome.details["bytes"] == 1000


async def test_a_refused_connection_is_a_failed_run() -> None:
    with origin() as server:
        port = server.port
    outcome = await execute_http(_invocation(f"http://127.0.0.1:{port}/hello", "127.0.0.1"))
    assert outcome.status == "failed"
    assert outcome.error_code == ErrorCode.TOOL_EXECUTION_FAILED


async def test_a_server_that_never_answers_fails_the_run_at_its_timeout() -> None:
    """Past its own `timeout_s` the step failed to run, as a Shell.Exec command killed at its
    limit does: TOOL_EXECUTION_FAILED (it said DEADLINE_EXCEEDED, the code of a call chain's
    deadline passed, which an agent reads as no time left at all)."""
    with socket.create_server(("127.0.0.1", 0)) as silent:  # connections queue, unanswered
        port = silent.getsockname()[1]
        outcome = await execute_http(
            _invocation(f"http://127.0.0.1:{port}/hello", "127.0.0.1", timeout_s=0.5)
        )
    assert outcome.status == "failed"
    assert outcome.error_code == ErrorCode.TOOL_EXECUTION_FAILED, outcome.error_message
    assert outcome.error_message == "no answer within its limit timeout_s (0.5 s)"


async def test_arguments_that_do_not_fit_are_a_failed_run() -> None:
    invocation = _invocation("http://127.0.0.1/", "127.0.0.1")
    bad = ToolInvocation(
        capability=invocation.capability,
        arguments={"url": "http://127.0.0.1/", "verb": "GET"},
        scope=invocation.scope,
        workspace=invocation.workspace,
        session_id=invocation.session_id,
        step_id=invocation.step_id,
    )
    outcome = await execute_http(bad)
    assert outcome.status == "failed"
    assert outcome.error_code == ErrorCode.INVALID_REQUEST


async def test_https_to_the_checked_address_asks_for_the_name_and_verifies_it(
    tmp_path: Path,
) -> None:
    """Pinned to 127.0.0.1, the TLS handshake still names `localhost` (SNI), and the
    self-signed certificate is refused: verification is on, against the name."""
    with tls_origin(tmp_path) as server:
        outcome = await execute_http(
            _invocation(f"https://localhost:{server.port}/", "localhost", "127.0.0.1", "::1")
        )
        assert server.handshakes.wait(timeout=10)
    assert outcome.status == "failed"
    assert "CERTIFICATE_VERIFY_FAILED" in (outcome.error_message or "")
    assert server.server_names == ["localhost"]


@pytest.mark.parametrize(
    "headers",
    [{"X-Bad": "one\r\nInjected: two"}, {"Bad Name": "1"}, {"X-Euro": "€"}],
)
async def test_headers_that_could_split_a_request_are_a_failed_run(
    headers: dict[str, str],
) -> None:
    invocation = _invocation("http://127.0.0.1/", "127.0.0.1")
    bad = ToolInvocation(
        capability=invocation.capability,
        arguments={"url": "http://127.0.0.1/", "headers": headers},
        scope=invocation.scope,
        workspace=invocation.workspace,
        session_id=invocation.session_id,
        step_id=invocation.step_id,
    )
    outcome = await execute_http(bad)
    assert outcome.status == "failed"
    assert outcome.error_code == ErrorCode.INVALID_REQUEST


async def test_a_host_header_of_the_caller_is_replaced_by_the_urls() -> None:
    with origin() as server:
        invocation = _invocation(server.url("/host"), "127.0.0.1")
        outcome = await execute_http(
            ToolInvocation(
                capability=invocation.capability,
                arguments={"url": server.url("/host"), "headers": {"HOST": "other.example"}},
                scope=invocation.scope,
                workspace=invocation.workspace,
                session_id=invocation.session_id,
                step_id=invocation.step_id,
            )
        )
    assert outcome.output_text == f"127.0.0.1:{server.port}"
