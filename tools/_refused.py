"""What the broker refused a command, in words that name the role and what it lacks.

nats-py raises nothing when the server refuses a publish or a subscription: the server sends
`-ERR 'Permissions Violation for Publish to "…"'`, nats-py hands it to the connection's error
callback, and the command only sees what follows (a JetStream call that times out, a wait
that never ends). Rejected credentials end the same way, as "no servers available". The bus
logs both refusals with the user the server knows the connection as and the role the command
connected as (bus/_connection.py); `Refusals` keeps them for this process, so that a command
that fails says why in one line (tools/_errors.py) instead of "timed out".
"""

from __future__ import annotations

import asyncio
import logging
import re
from dataclasses import dataclass
from typing import Final

__all__ = ("Refusal", "Refusals", "refusal_line")

_CONNECTION_LOGGER: Final = "parley.bus.connection"
_KEEP: Final = 100
"""Refusals kept: the first is the one said; the others are counted, up to this many."""
_VIOLATION = re.compile(r'Permissions Violation for (Publish|Subscription) to "([^"]+)"', re.I)
_JS_API = re.compile(r"^\$JS\.(?:[A-Za-z0-9_-]+\.)?API\.([A-Za-z_]+(?:\.[A-Za-z_]+)?)", re.I)
"""A JetStream API subject (`$JS.API.…`, or an account's imported `$JS.<NAME>.API.…`): its
call's name (`STREAM.INFO`). nats-py lowercases the server's error text; the name is shown
in capitals as the API documents it."""


@dataclass(frozen=True)
class Refusal:
    """One refusal by the server: `user` is who it knows the connection as (the credentials'
    owner), `role` what the command connected as, `error` the server's own words."""

    user: str
    role: str
    error: str

    @property
    def credentials_rejected(self) -> bool:
        """The server did not accept the credentials at all (no grant was even looked up)."""
        return "authorization violation" in self.error.lower()

    def lacks(self) -> str:
        """What the user may not do: "publish to "SUBJECT"" (naming a JetStream API call as
        such), or the server's words when they name no subject."""
        match = _VIOLATION.search(self.error)
        if match is None:
            return self.error.removeprefix("nats: ").strip("'")
        verb = "publish to" if match.group(1).lower() == "publish" else "subscribe to"
        subject = match.group(2)
        api = _JS_API.match(subject)
        if verb == "subscribe to" and subject.startswith("_inbox"):
            return f'receive replies on "{subject}"'  # a request's inbox (bus/_connection.py)
        if api is not None:
            return f'call the JetStream API {api.group(1).upper()} ("{subject}")'
        return f'{verb} "{subject}"'


class Refusals(logging.Handler):
    """The refusals the bus logged in this process, from when `install` was called.

    Installing it also keeps Python's last-resort handler from printing a bare "permission
    violation" line on standard error: the command says it once, in full, itself.
    """

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.seen: list[Refusal] = []
        self.refused = asyncio.Event()
        """Set at the first permission refused: a request that goes unanswered since (a
        refused JetStream call is answered by nobody) is refused, not an election to wait
        out (bus/_elections.py `stop`)."""

    def emit(self, record: logging.LogRecord) -> None:
        if record.getMessage() not in ("permission violation", "authorization violation"):
            return
        if len(self.seen) >= _KEEP:  # `parley run`: an actor may be refused for days
            return
        details = record.__dict__
        if record.getMessage() == "permission violation":
            self.refused.set()
        self.seen.append(
            Refusal(
                str(details.get("user", "")),
                str(details.get("role", "")),
                str(details.get("error", "")),
            )
        )

    def install(self) -> Refusals:
        logging.getLogger(_CONNECTION_LOGGER).addHandler(self)
        return self

    def remove(self) -> None:
        logging.getLogger(_CONNECTION_LOGGER).removeHandler(self)

    def first(self) -> Refusal | None:
        """The first refusal: the one the others follow from, when a command carries on."""
        return self.seen[0] if self.seen else None


def refusal_line(refusal: Refusal, more: int = 0) -> str:
    """What went wrong and what to do next, naming the user refused and what it lacks."""
    user = refusal.user or refusal.role or "this command"
    if refusal.credentials_rejected:
        return (
            f"the server rejected the credentials of `{user}` (not a user of this server): "
            "use the settings file written for this server (`parley up` writes them under "
            ".parley/broker/actors/ in this directory; `parley nats-config` under its --out), "
            "or set NATS_URL to the server they were written for"
        )
    also = f" (and {more} more refusal(s))" if more else ""
    head = f"the broker refused `{user}` to {refusal.lacks()}{also}"
    if refusal.role and refusal.role != user:
        return (
            f"{head}: this command acts as `{refusal.role}`, not `{user}`: drop --config to "
            f"use its own credentials under `parley up`, or give the `{refusal.role}` settings "
            "file `parley nats-config` wrote"
        )
    return (
        f"{head}: the broker's config does not grant it to `{user}`: check that the names it "
        "uses are this system's (a `--stream`, the namespace: PARLEY_NAMESPACE, --namespace), "
        "then run the command with the credentials of a role that has it (--config), or "
        "regenerate the broker's config (restart `parley up`, or rerun `parley nats-config`)"
    )
