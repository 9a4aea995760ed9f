"""Which hosts and addresses a capability's `allowed_domains` lets a tool reach.

Shared by Network.Http (every URL and every redirect) and Git.Push (a remote's URL), so the
two read the list the same way:

- a name matches an entry exactly, or an entry `*.example.com` matches names strictly below
  `example.com` (`api.example.com`, not `example.com` itself); an empty list allows nothing;
- an IP-literal host matches only an entry that is that address, or a network (`10.0.0.0/8`)
  holding it: a wildcard never matches an address;
- a host is a DNS name (letters, digits, hyphens, dots) or an IP literal and nothing else, so
  `2130706433` or `0x7f.1` (forms a resolver would turn into 127.0.0.1) never pass as names.

A name that matches is not enough to connect: the addresses it resolves to must be public,
unless the list names the address (or its network) itself. That is what keeps an allowed
name that resolves to loopback, the cloud metadata address or the office network from
reaching them (`address_allowed`), and `allowed_addresses` resolves a name once, checks
every address, and gives them to the caller to connect to, never the name again: a second DNS
answer (rebinding) can then send nothing elsewhere.
"""

from __future__ import annotations

import asyncio
import ipaddress
import re
import socket
from typing import Final

from actors.tools._contract import ScopeDenied
from schemas import Capability

__all__ = (
    "Address",
    "Unresolvable",
    "address_allowed",
    "allowed_addresses",
    "host_allowed",
    "ip_literal",
    "normalize_host",
    "special_address",
)

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
_Network = ipaddress.IPv4Network | ipaddress.IPv6Network

_LABEL: Final = re.compile(r"^(?!-)[a-z0-9-]{1,63}(?<!-)$")
_NUMERIC_LABEL: Final = re.compile(r"^(?:0x[0-9a-f]*|[0-9]+)$")


def normalize_host(host: str) -> str | None:
    """The host as matched and connected to (lower case, no final dot), or None if malformed.

    An IP literal comes back in its canonical form (`::1` for `0:0::1`); a name must be made
    of DNS labels and its last label must not be numeric, since a resolver reads such a
    "name" as an address.
    """
    host = host.lower()
    literal = ip_literal(host)
    if literal is not None:
        return str(literal)
    host = host.removesuffix(".")
    if not host or len(host) > 253:
        return None
    labels = host.split(".")
    if not all(_LABEL.match(label) for label in labels) or _NUMERIC_LABEL.match(labels[-1]):
        return None
    return host


def ip_literal(host: str) -> Address | None:
    """The address a host names literally (`[::1]` brackets allowed), else None."""
    try:
        return ipaddress.ip_address(host.removeprefix("[").removesuffix("]"))
    except ValueError:
        return None


def _listed_networks(scope: Capability) -> list[_Network]:
    networks = []
    for entry in scope.allowed_domains:
        try:
            networks.append(ipaddress.ip_network(entry.strip().strip("[]"), strict=False))
        except ValueError:
            continue
    return networks


def _unwrapped(address: Address) -> Address:
    """The IPv4 address an IPv6 one carries (mapped, 6to4, Teredo), so it is judged as that."""
    if isinstance(address, ipaddress.IPv6Address):
        embedded = address.ipv4_mapped or address.sixtofour
        if embedded is not None:
            return embedded
        if address.teredo is not None:
            return address.teredo[1]
    return address


def _listed(scope: Capability, address: Address) -> bool:
    candidates = {address, _unwrapped(address)}
    return any(
        candidate in network for network in _listed_networks(scope) for candidate in candidates
    )


def host_allowed(scope: Capability, host: str) -> bool:
    """Whether `host` (normalized, see `normalize_host`) is one `allowed_domains` names."""
    literal = ip_literal(host)
    if literal is not None:
        return _listed(scope, literal)
    for entry in scope.allowed_domains:
        wanted = entry.strip().lower().removesuffix(".")
        if wanted.startswith("*."):
            if host.endswith(wanted[1:]) and len(host) > len(wanted) - 1:
                return True
        elif wanted and host == wanted:
            return True
    return False


def special_address(address: Address) -> bool:
    """Whether an address is anything but a public unicast one.

    Loopback, private, link-local, multicast, reserved, unspecified, shared (100.64.0.0/10)
    and documentation ranges; an IPv4 address carried in IPv6 (`::ffff:127.0.0.1`, 6to4,
    Teredo) is judged as the IPv4 one, since that is where the packets end up.
    """
    for candidate in {address, _unwrapped(address)}:
        if (
            candidate.is_loopback
            or candidate.is_private
            or candidate.is_link_local
            or candidate.is_multicast
            or candidate.is_reserved
            or candidate.is_unspecified
            or not candidate.is_global
        ):
            return True
    return False


def address_allowed(scope: Capability, address: Address) -> bool:
    """Whether a resolved address may be connected to: public, or listed itself."""
    return not special_address(address) or _listed(scope, address)


class Unresolvable(Exception):
    """The host resolves to no address: the work failed, nothing was refused or sent."""


async def allowed_addresses(scope: Capability, host: str, port: int) -> list[Address]:
    """The addresses `host` (normalized, allowed by name) resolves to, every one allowed.

    An IP literal is its own address. The caller connects to these addresses, never to the
    name again, so what was checked is where the connection goes.

    Raises:
        ScopeDenied: rule `allowed_domains`, naming the first address that is not allowed.
        Unresolvable: the name does not resolve, or to no address.
    """
    literal = ip_literal(host)
    if literal is not None:
        addresses = [literal]
    else:
        try:
            infos = await asyncio.get_running_loop().getaddrinfo(
                host, port, type=socket.SOCK_STREAM
            )
        except socket.gaierror as exc:
            raise Unresolvable(f"{host} does not resolve: {exc.strerror}") from None
        addresses = []
        for info in infos:
            address = ip_literal(str(info[4][0]).partition("%")[0])
            if address is not None and address not in addresses:
                addresses.append(address)
    for address in addresses:
        if not address_allowed(scope, address):
            raise ScopeDenied(
                "allowed_domains",
                f"{host} resolves to {address}, which is not a public address and "
                "is not in allowed_domains",
            )
    if not addresses:
        raise Unresolvable(f"{host} resolves to no address")
    return addresses
