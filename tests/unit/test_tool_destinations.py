"""Which URLs Network.Http and Git.Push may reach, checked without any network.

Each refused URL is matched to the rule that refuses it (by its message), so a case cannot
pass because some other rule happened to refuse it too.
"""

from __future__ import annotations

import ipaddress
from pathlib import Path

import pytest

from actors.tools import ScopeDenied, check_url, push_url_allowed
from actors.tools._destinations import address_allowed, host_allowed, special_address
from schemas import Capability


def _scope(*domains: str, paths: tuple[str, ...] = ()) -> Capability:
    return Capability(name="Network.Http", allowed_domains=domains, allowed_paths=paths)


@pytest.mark.parametrize(
    ("domains", "url"),
    [
        (("example.com",), "http://example.com/"),
        (("example.com",), "HTTPS://Example.COM./path?q=1"),
        (("*.example.com",), "https://api.example.com:8443/"),
        (("*.example.com",), "https://a.b.example.com/"),
        (("10.1.2.3",), "http://10.1.2.3/"),
        (("10.0.0.0/8",), "http://10.200.0.1/"),
        (("::1",), "http://[0:0::1]:8080/"),
    ],
)
def test_allowed_urls_pass(domains: tuple[str, ...], url: str) -> None:
    check_url(_scope(*domains), url)


@pytest.mark.parametrize(
    ("domains", "url", "reason"),
    [
        ((), "https://example.com/", "not in allowed_domains"),
        (("example.com",), "https://www.example.com/", "'www.example.com' is not in"),
        (("*.example.com",), "https://example.com/", "'example.com' is not in"),
        (("*.example.com",), "https://evilexample.com/", "'evilexample.com' is not in"),
        (("example.com",), "https://example.com.evil.org/", "is not in allowed_domains"),
        (("example.com",), "ftp://example.com/", "only http and https"),
        (("example.com",), "file:///etc/passwd", "only http and https"),
        (("example.com",), "//example.com/", "only http and https"),
        (("example.com",), "http://agent:secret@example.com/", "user information"),
        (("example.com",), "http://1.1.1.1\\@example.com/", "user information"),
        (("example.com",), "http://exa mple.com/", "whitespace"),
        (("example.com",), "http://example.com:99999/", "port"),
        (("2130706433",), "http://2130706433/", "neither a DNS name nor an IP"),
        (("0x7f.1",), "http://0x7f.1/", "neither a DNS name nor an IP"),
        (("example.com",), "http://93.184.215.14/", "the address '93.184.215.14'"),
        (("*.0.0.1",), "http://127.0.0.1/", "the address '127.0.0.1'"),
        (("::1",), "http://[::2]/", "the address '::2'"),
    ],
)
def test_refused_urls_name_their_rule(domains: tuple[str, ...], url: str, reason: str) -> None:
    with pytest.raises(ScopeDenied) as denied:
        check_url(_scope(*domains), url)
    assert denied.value.rule == "allowed_domains"
    assert reason in str(denied.value)


@pytest.mark.parametrize(
    "address",
    [
        "127.0.0.1",
        "10.0.0.1",
        "172.16.0.1",
        "192.168.1.1",
        "169.254.169.254",
        "100.64.0.1",
        "0.0.0.0",
        "224.0.0.1",
        "240.0.0.1",
        "255.255.255.255",
        "::1",
        "::",
        "fe80::1",
        "fc00::1",
        "ff02::1",
        "::ffff:127.0.0.1",
        "::ffff:169.254.169.254",
        "2002:7f00:1::",
    ],
)
def test_every_special_address_is_refused_unless_listed(address: str) -> None:
    parsed = ipaddress.ip_address(address)
    assert special_address(parsed)
    assert not address_allowed(_scope("example.com"), parsed)
    assert address_allowed(_scope(address), parsed)


def test_a_listed_ipv4_address_also_admits_its_ipv6_mapped_form() -> None:
    assert address_allowed(_scope("127.0.0.1"), ipaddress.ip_address("::ffff:127.0.0.1"))


@pytest.mark.parametrize("address", ["1.1.1.1", "93.184.215.14", "2606:4700:4700::1111"])
def test_public_addresses_are_allowed(address: str) -> None:
    assert address_allowed(_scope(), ipaddress.ip_address(address))


def test_a_wildcard_never_matches_an_address_or_the_bare_domain() -> None:
    scope = _scope("*.example.com")
    assert host_allowed(scope, "a.example.com")
    assert not host_allowed(scope, "example.com")
    assert not host_allowed(scope, "127.0.0.1")


@pytest.mark.parametrize(
    "url",
    [
        "https://git.example.com/team/repo.git",
        "https://token@git.example.com/repo.git",
        "remotes/allowed.git",
        "../remotes/allowed.git",
        "file://{workspace}/remotes/allowed.git",
        "{workspace}/remotes",
    ],
)
def test_push_urls_within_scope_pass(tmp_path: Path, url: str) -> None:
    workspace = tmp_path / "ws"
    (workspace / "repo" / "remotes" / "allowed.git").mkdir(parents=True)
    (workspace / "remotes" / "allowed.git").mkdir(parents=True)
    scope = _scope("git.example.com", paths=("remotes", "repo/remotes"))
    push_url_allowed(scope, workspace, workspace / "repo", url.format(workspace=workspace))


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("https://git.evil.org/repo.git", "host is not allowed"),
        ("http://git.example.com/repo.git", "only https remotes and local paths"),
        ("ssh://git.example.com/repo.git", "only https remotes and local paths"),
        ("git@git.example.com:team/repo.git", "only https remotes and local paths"),
        ("ext::sh -c touch% /tmp/x", "holds whitespace, control or non-ASCII characters"),
        ("ext::sh%-c%touch%/tmp/x", "only https remotes and local paths"),
        ("file://otherhost/remotes/allowed.git", "only https remotes and local paths"),
        ("{workspace}/remotes-evil", "not in allowed_paths"),
        ("{workspace}/remotes/../elsewhere", "not in allowed_paths"),
        ("../elsewhere", "not in allowed_paths"),
        ("{workspace}/link-out", "not in allowed_paths"),
    ],
)
def test_push_urls_outside_scope_are_refused(tmp_path: Path, url: str, reason: str) -> None:
    workspace = tmp_path / "ws"
    (workspace / "repo").mkdir(parents=True)
    (workspace / "remotes").mkdir()
    (tmp_path / "outside").mkdir()
    (workspace / "remotes" / "link-out").symlink_to(tmp_path / "outside")
    (workspace / "link-out").symlink_to(workspace / "remotes" / "link-out")
    scope = _scope("git.example.com", paths=("remotes",))
    with pytest.raises(ScopeDenied) as denied:
        push_url_allowed(scope, workspace, workspace / "repo", url.format(workspace=workspace))
    assert denied.value.rule == "allowed_domains"
    assert reason in str(denied.value)
