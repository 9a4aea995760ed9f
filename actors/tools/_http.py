"""Network.Http: one HTTP request to a host the capability's `allowed_domains` names.

The gate calls `check_url` before delivery and the executor checks again, then goes further
than any string check can: it resolves the host itself and refuses the request if any
address is not public (loopback, private, link-local, ...) unless the list names that
address. It then connects to the address it checked, never to the name: the request goes to
the IP literal with the name in the Host header and as TLS SNI (the certificate is verified
against the name), so a second DNS answer can never send it elsewhere (DNS rebinding).

Redirects are followed by hand, at most `MAX_REDIRECTS`, each Location checked and resolved
by the same rules before anything is sent to it. The body is read as it arrives and cut at
the scope's `max_output_bytes` (`DEFAULT_MAX_OUTPUT_BYTES` when the scope sets none); the
rest is never read. Proxy variables and `.netrc` are ignored: what the scope allows is
where the request goes, with no credentials but the ones the request carries.
"""

from __future__ import annotations

import asyncio
import re
import ssl
from dataclasses import dataclass
from functools import cache
from typing import Final
from urllib.parse import SplitResult, urljoin, urlsplit

import httpx
import msgspec

from actors.tools._arguments import HttpRequest
from actors.tools._contract import Provenance, ScopeDenied, ToolInvocation, ToolOutcome
from actors.tools._destinations import (
    Address,
    Unresolvable,
    allowed_addresses,
    host_allowed,
    ip_literal,
    normalize_host,
)
from schemas import Capability, ErrorCode

__all__ = ("DEFAULT_MAX_OUTPUT_BYTES", "MAX_REDIRECTS", "check_url", "execute_http")

DEFAULT_MAX_OUTPUT_BYTES: Final = 256 * 1024
"""The body kept when the scope sets no `max_output_bytes`."""
MAX_REDIRECTS: Final = 5
_REDIRECTS: Final = frozenset({301, 302, 303, 307, 308})
_DEFAULT_PORTS: Final = {"http": 80, "https": 443}
_SET_BY_US: Final = frozenset(
    {"host", "content-length", "transfer-encoding", "connection", "accept-encoding"}
)
"""Request headers the executor sets itself: a caller's Host could name another site on the
same address, and the framing headers could smuggle a second request."""
_CREDENTIAL_HEADERS: Final = frozenset({"authorization", "cookie", "proxy-authorization"})
"""Headers never carried to another origin by a redirect."""
_HEADER_NAME: Final = re.compile(r"^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$")
_HEADER_VALUE: Final = re.compile(r"^[\t\x20-\x7e]*$")


@dataclass(frozen=True, slots=True)
class _Target:
    """A URL that passed `check_url`, in the parts the request is built from."""

    url: str
    scheme: str
    host: str
    port: int
    path: str

    @property
    def host_header(self) -> str:
        shown = f"[{self.host}]" if ":" in self.host else self.host
        return shown if _DEFAULT_PORTS[self.scheme] == self.port else f"{shown}:{self.port}"

    def url_to(self, address: Address) -> str:
        shown = f"[{address}]" if address.version == 6 else str(address)
        return f"{self.scheme}://{shown}:{self.port}{self.path}"

    @property
    def origin(self) -> tuple[str, str, int]:
        return (self.scheme, self.host, self.port)


@cache
def _tls_context() -> ssl.SSLContext:
    """httpx's default verifying context, built once: loading the CA roots costs tens of ms
    a request. The roots are certifi's (SSL_CERT_FILE is ignored like the proxy variables);
    verification is against the name (SNI), not the address connected to."""
    return httpx.create_ssl_context(trust_env=False)


def _deny(message: str) -> ScopeDenied:
    return ScopeDenied("allowed_domains", message)


def _target(scope: Capability, url: str) -> _Target:
    if not url.isascii() or any(ch.isspace() or ord(ch) < 32 or ord(ch) == 127 for ch in url):
        raise _deny("the URL holds whitespace, control or non-ASCII characters")
    try:
        parts: SplitResult = urlsplit(url)
        hostname = parts.hostname
    except ValueError as exc:  # "http://[::1": a malformed bracketed host
        raise _deny(f"the URL cannot be parsed: {exc}") from None
    scheme = parts.scheme.lower()
    if scheme not in _DEFAULT_PORTS:
        raise _deny(f"only http and https URLs are allowed, not {scheme or 'no scheme'!r}")
    if "@" in parts.netloc:
        raise _deny("a URL with user information (user@host) is refused")
    try:
        port = parts.port or _DEFAULT_PORTS[scheme]
    except ValueError:
        raise _deny("the URL's port is not a number from 0 to 65535") from None
    host = normalize_host(hostname or "")
    if host is None:
        raise _deny(f"{hostname or ''!r} is neither a DNS name nor an IP address")
    if not host_allowed(scope, host):
        kind = "the address" if ip_literal(host) is not None else "the host"
        raise _deny(f"{kind} {host!r} is not in allowed_domains")
    path = parts.path or "/"
    if parts.query:
        path = f"{path}?{parts.query}"
    return _Target(url=url, scheme=scheme, host=host, port=port, path=path)


def check_url(scope: Capability, url: str) -> None:
    """Refuse a URL the scope does not allow, before anything is resolved or sent.

    Only http and https; no `user@` in the authority; the host a DNS name or IP literal that
    `allowed_domains` names (see `actors.tools._destinations`). Pure: no DNS, no I/O.

    Raises:
        ScopeDenied: rule `allowed_domains`, with the reason in the message.
    """
    _target(scope, url)


async def _resolve(scope: Capability, target: _Target) -> list[Address]:
    """The host's addresses, every one allowed, or ScopeDenied naming the first that is not."""
    try:
        return await allowed_addresses(scope, target.host, target.port)
    except Unresolvable as exc:
        raise _Failed(str(exc)) from None


class _Failed(Exception):
    """The work failed (DNS, connection, too many redirects): a `failed` outcome."""


def _request_headers(request: HttpRequest, target: _Target, first: _Target) -> dict[str, str]:
    headers = {}
    for name, value in request.headers.items():
        lowered = name.lower()
        if lowered in _SET_BY_US:
            continue
        if lowered in _CREDENTIAL_HEADERS and target.origin != first.origin:
            continue
        headers[name] = value
    headers["Host"] = target.host_header
    headers["Accept-Encoding"] = "identity"  # the cut counts the bytes a model would read
    return headers


async def _read_capped(response: httpx.Response, limit: int) -> tuple[bytes, bool]:
    kept = bytearray()
    async for chunk in response.aiter_raw():
        room = limit - len(kept)
        if len(chunk) > room:
            kept += chunk[:room]
            return bytes(kept), True
        kept += chunk
    return bytes(kept), False


async def _send(
    client: httpx.AsyncClient,
    target: _Target,
    addresses: list[Address],
    method: str,
    headers: dict[str, str],
    body: str,
) -> httpx.Response:
    """Open the response from the first address that accepts a connection."""
    failure: Exception | None = None
    for address in addresses:
        request = client.build_request(
            method,
            target.url_to(address),
            headers=headers,
            content=body.encode() if body else None,
            extensions={"sni_hostname": target.host},
        )
        try:
            return await client.send(request, stream=True)
        except httpx.ConnectError as exc:  # nothing was sent: the next address may answer
            failure = exc
    raise _Failed(f"no address of {target.host} accepts a connection: {failure}")


async def _run(invocation: ToolInvocation, request: HttpRequest) -> ToolOutcome:
    scope = invocation.scope
    limit = DEFAULT_MAX_OUTPUT_BYTES if scope.max_output_bytes is None else scope.max_output_bytes
    url, method, body = request.url, request.method, request.body
    first = _target(scope, url)
    async with httpx.AsyncClient(
        verify=_tls_context(),
        trust_env=False,
        follow_redirects=False,
        timeout=invocation.timeout_s,
    ) as client:
        for redirects in range(MAX_REDIRECTS + 1):
            target = _target(scope, url)  # a redirect's Location is checked before it is used
            addresses = await _resolve(scope, target)
            headers = _request_headers(request, target, first)
            response = await _send(client, target, addresses, method, headers, body)
            try:
                location = response.headers.get("location")
                if response.status_code in _REDIRECTS and location:
                    url = urljoin(target.url, location)
                    if response.status_code == 303 or (
                        response.status_code in (301, 302) and method == "POST"
                    ):
                        method, body = ("HEAD" if method == "HEAD" else "GET"), ""
                    continue
                data, truncated = await _read_capped(response, limit)
            finally:
                await response.aclose()
            return ToolOutcome(
                status="succeeded",
                output_text=_text(data, response.charset_encoding),
                truncated=truncated,
                details={
                    "status_code": response.status_code,
                    "final_url": target.url,
                    "redirects": redirects,
                    "content_type": response.headers.get("content-type", ""),
                    "bytes": len(data),
                },
                provenance=Provenance(source="Network.Http", locator=target.url),
            )
    raise _Failed(f"more than {MAX_REDIRECTS} redirects")


async def execute_http(invocation: ToolInvocation) -> ToolOutcome:
    """Run one Network.Http invocation within its scope (see the module's docstring).

    Any status code the server answers is a succeeded run (`details["status_code"]`); DNS
    and connection failures, too many redirects, a timeout and bad arguments are failed.

    Raises:
        ScopeDenied: rule `allowed_domains`: the URL, a redirect's Location or an address the
            host resolves to is not allowed. Nothing is sent to a refused destination.
    """
    try:
        request = msgspec.convert(invocation.arguments, HttpRequest)
    except msgspec.ValidationError as exc:
        return _failed(ErrorCode.INVALID_REQUEST, f"Network.Http arguments: {exc}")
    for name, value in request.headers.items():
        if not _HEADER_NAME.match(name) or not _HEADER_VALUE.match(value):
            return _failed(
                ErrorCode.INVALID_REQUEST,
                f"Network.Http header {name!r}: a name must be a token and a value printable "
                "ASCII on one line",
            )
    try:
        async with asyncio.timeout(invocation.timeout_s):
            return await _run(invocation, request)
    except TimeoutError:
        # A step past its own limit failed to run, as Shell.Exec's does; DEADLINE_EXCEEDED
        # says the call chain's deadline passed (actors/tools/_steps.py `past_deadline`).
        return _failed(
            ErrorCode.TOOL_EXECUTION_FAILED,
            f"no answer within its limit timeout_s ({invocation.timeout_s:g} s)",
        )
    except _Failed as exc:
        return _failed(ErrorCode.TOOL_EXECUTION_FAILED, str(exc))
    except httpx.HTTPError as exc:
        return _failed(ErrorCode.TOOL_EXECUTION_FAILED, f"{type(exc).__name__}: {exc}")


def _text(data: bytes, charset: str | None) -> str:
    """The body as text in its declared charset (UTF-8 when none, or one Python lacks)."""
    try:
        return data.decode(charset or "utf-8", "replace")
    except LookupError:
        return data.decode("utf-8", "replace")


def _failed(code: ErrorCode, message: str) -> ToolOutcome:
    return ToolOutcome(status="failed", error_code=code, error_message=message)
