"""Who may sign in to the console: one long-lived token per person, stored hashed.

`parley console token --person alice` issues a token and prints it once; the store keeps only
its SHA-256 (a token is 256 random bits, so a fast hash cannot be brute-forced and needs no
salt or slow KDF). Issuing again replaces the person's token, which revokes the old one. The
store is a JSON file readable by its owner only (`.parley/console/tokens.json` beside a local
system), so a console and the command that issues tokens agree on it without a server.

Signing in exchanges that token for a short-lived sign-in token held only in the console's
memory (also hashed): the page keeps the sign-in token, never the person's long-lived one. A
person holds at most `max_sign_ins_per_person` of them (`[options]`, 20 by default): each
sign-in past it revokes that person's oldest, so signing in in a loop with one token costs
the console a bounded amount of memory instead of one live 12-hour token per request.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import re
import secrets
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from schemas import utc_now

__all__ = (
    "DEFAULT_TOKENS_FILE",
    "MAX_SIGN_INS_PER_PERSON",
    "PERSON_NAME",
    "SignIns",
    "TokenStore",
    "TokenStoreError",
    "principal_of",
)

DEFAULT_TOKENS_FILE: Final = Path(".parley/console/tokens.json")
PERSON_NAME: Final = re.compile(r"^[a-z0-9_-]{1,57}$")
"""A person's name: a subject token once prefixed with `person-` (64 characters at most)."""
_SIGN_IN_TTL_S: Final = 12 * 3600.0
MAX_SIGN_INS_PER_PERSON: Final = 20
"""Live sign-ins one person may hold (browsers, tabs, scripts): one more revokes the oldest."""


class TokenStoreError(Exception):
    """The token file is unreadable or malformed, or a person's name is invalid."""


def principal_of(person: str) -> str:
    """The principal (nkey user, gate profile, subject token) that acts for `person`."""
    if not PERSON_NAME.fullmatch(person):
        raise TokenStoreError(f"invalid person name {person!r}: use a-z, 0-9, '_' or '-'")
    return f"person-{person}"


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


@dataclass
class TokenStore:
    """The hashed sign-in tokens of the people who may use the console."""

    path: Path

    def _read(self) -> dict[str, dict[str, str]]:
        if not self.path.is_file():
            return {}
        try:
            data = json.loads(self.path.read_text())
            people = data["people"]
            if not isinstance(people, dict):
                raise TypeError("people is not an object")
            return {str(k): dict(v) for k, v in people.items()}
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise TokenStoreError(f"cannot read the console tokens in {self.path}: {exc}") from None

    def people(self) -> tuple[str, ...]:
        """Everyone with a token, sorted."""
        return tuple(sorted(self._read()))

    def issue(self, person: str) -> str:
        """A new token for `person` (replacing and so revoking the old one); only its hash is
        written."""
        principal_of(person)  # validates the name
        token = secrets.token_urlsafe(32)
        people = self._read()
        people[person] = {"sha256": _digest(token), "issued_at": utc_now().isoformat()}
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        temporary = self.path.with_suffix(".tmp")
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as out:
            json.dump({"people": people}, out, indent=2, sort_keys=True)
        temporary.replace(self.path)
        return token

    def person_of(self, token: str) -> str | None:
        """Whose token this is, or None; every stored hash is compared in constant time."""
        digest, found = _digest(token), None
        for person, entry in self._read().items():
            if hmac.compare_digest(digest, str(entry.get("sha256", ""))):
                found = person
        return found


@dataclass
class SignIns:
    """Sign-in tokens the console handed out, by hash: person and expiry (monotonic), oldest
    first (a dict keeps the order they were opened in)."""

    ttl_s: float = _SIGN_IN_TTL_S
    max_per_person: int = MAX_SIGN_INS_PER_PERSON
    _live: dict[str, tuple[str, float]] = field(default_factory=dict)

    def open(self, person: str) -> str:
        """A new sign-in for `person`; past `max_per_person` live ones, their oldest are
        revoked (a request bearing one is refused as not signed in)."""
        now = time.monotonic()
        for digest in [d for d, (_, expires) in self._live.items() if expires < now]:
            del self._live[digest]  # expired sign-ins nobody came back with
        token = secrets.token_urlsafe(32)
        self._live[_digest(token)] = (person, time.monotonic() + self.ttl_s)
        theirs = [digest for digest, (holder, _) in self._live.items() if holder == person]
        for digest in theirs[: max(0, len(theirs) - self.max_per_person)]:
            del self._live[digest]
        return token

    def live(self, person: str | None = None) -> int:
        """How many sign-ins are held (by `person`, or by everyone), expired ones included
        until the next sign-in sweeps them."""
        return sum(1 for holder, _ in self._live.values() if person in (None, holder))

    def person_of(self, token: str) -> str | None:
        entry = self._live.get(_digest(token))
        if entry is None:
            return None
        person, expires = entry
        if time.monotonic() > expires:
            del self._live[_digest(token)]
            return None
        return person

    def close(self, token: str) -> None:
        self._live.pop(_digest(token), None)
