"""Artifact URIs: the name of a stored artifact that says what its bytes must be.

    parley-artifact://<tenant>/<session>/<sha256>?size=<bytes>&name=<file name>

`tenant` is the tenant whose store holds it, `session` the session it was stored for (its
workspace name: the session id when that is a safe name, else a digest of it), `sha256` the
hex SHA-256 of its bytes and `size` their count. A reader checks the bytes it got against both,
so a URI names one content: a store that served anything else is caught. `name` (the file's
name, or what the output was) is a label for people and is not part of the object's identity:
the same content stored twice in one session is one object.

The object store key is `<tenant>/<session>/<sha256>`.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import Final
from urllib.parse import parse_qs, quote, urlsplit

__all__ = ("SCHEME", "ArtifactUri", "BadArtifactUri", "label", "session_key")

SCHEME: Final = "parley-artifact"

_SAFE = re.compile(r"[A-Za-z0-9_-]{1,64}")
_DIGEST = re.compile(r"[0-9a-f]{64}")
_MAX_NAME = 255


class BadArtifactUri(ValueError):
    """Text that is no artifact URI (scheme, parts, digest or size wrong)."""


def session_key(session_id: str) -> str:
    """A session's name in the store: its id when that is a safe name, else a digest of it
    (the rule of its workspace directory's name, so both name a session alike)."""
    if _SAFE.fullmatch(session_id):
        return session_id
    return "s" + hashlib.sha256(session_id.encode()).hexdigest()[:40]


def label(text: str) -> str:
    """`text` as an artifact's name may be: printable, at most 255 characters (a file's name
    may hold anything but `/` and NUL)."""
    return "".join(c if c.isprintable() else "?" for c in text)[:_MAX_NAME]


@dataclass(frozen=True, slots=True)
class ArtifactUri:
    """One artifact, as its URI names it."""

    tenant: str
    session: str
    sha256: str
    size: int
    name: str = ""

    def __post_init__(self) -> None:
        for part, what in ((self.tenant, "tenant"), (self.session, "session")):
            if not _SAFE.fullmatch(part):
                raise BadArtifactUri(f"invalid {what} {part!r} in an artifact URI")
        if not _DIGEST.fullmatch(self.sha256):
            raise BadArtifactUri(f"invalid sha256 {self.sha256!r}: 64 lowercase hex digits")
        if self.size < 0:
            raise BadArtifactUri(f"invalid size {self.size}")
        if len(self.name) > _MAX_NAME or any(ord(c) < 32 for c in self.name):
            raise BadArtifactUri("an artifact's name is at most 255 printable characters")

    @property
    def key(self) -> str:
        """Its key in the tenant's object store."""
        return f"{self.tenant}/{self.session}/{self.sha256}"

    def __str__(self) -> str:
        query = f"size={self.size}"
        if self.name:
            query += f"&name={quote(self.name, safe='')}"
        return f"{SCHEME}://{self.tenant}/{self.session}/{self.sha256}?{query}"

    @classmethod
    def parse(cls, text: str) -> ArtifactUri:
        """The artifact a URI names.

        Raises:
            BadArtifactUri: not `parley-artifact://<tenant>/<session>/<sha256>?size=N[&name=]`.
        """
        parts = urlsplit(text)
        if parts.scheme != SCHEME or parts.fragment:
            raise BadArtifactUri(f"not a {SCHEME}:// URI: {text!r}")
        path = parts.path.split("/")
        if len(path) != 3 or path[0] != "":
            raise BadArtifactUri(f"an artifact URI is {SCHEME}://<tenant>/<session>/<sha256>")
        try:
            query = parse_qs(parts.query, keep_blank_values=True, strict_parsing=True)
        except ValueError:
            raise BadArtifactUri(f"an artifact URI's query is size=N: {text!r}") from None
        sizes, names = query.pop("size", []), query.pop("name", [""])
        if query or len(sizes) != 1 or len(names) != 1 or not sizes[0].isdigit():
            raise BadArtifactUri(
                f"an artifact URI's query is size=N and an optional name: {text!r}"
            )
        return cls(parts.netloc, path[1], path[2], int(sizes[0]), names[0])
