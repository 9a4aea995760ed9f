"""Who follows a subject live sees it whoever publishes it, not only the core account.

A follower (the operator, the audit reader, a person) imports what it follows as a stream
from the core account. An agent or a person publishes its own subjects (`submit.<itself>`,
`dead.<itself>`, `timers.<itself>`) in its own account, and they reach the core account
through a service import; nats-server never passes a message that came in through a service
import on to a stream export (server/client.go, `processMsgResults`: "If this message was a
service import do not re-export to an exported stream"), so the core account's export showed
followers only what trusted actors publish, and nobody saw an agent's submissions live.

So each principal's account also exports, read-only, each such subject it publishes to every
follower whose follows cover it, and the follower imports it from there: a message published
in the principal's account goes to the core account (the service import) and to these
followers (the local stream export), once each.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tools.natsconf._permissions import CORE_ACCOUNT, Permissions

__all__ = ("follow_publishers", "subject_matches")


def subject_matches(pattern: str, subject: str) -> bool:
    """NATS matching of a literal `subject` against `pattern`: `*` one token, `>` the rest."""
    want, have = pattern.split("."), subject.split(".")
    for index, part in enumerate(want):
        if part == ">":
            return len(have) > index
        if index >= len(have) or part not in ("*", have[index]):
            return False
    return len(have) == len(want)


def follow_publishers(accounts: dict[str, dict[str, Any]], grants: Sequence[Permissions]) -> None:
    """Add to `accounts` the stream exports and imports that let each follower see what the
    other principals publish in their own accounts on subjects it follows."""
    followers = [(p.account, p.stream_imports) for p in grants if p.stream_imports]
    for publisher in grants:
        if publisher.account == CORE_ACCOUNT:
            continue  # published in the core account: its own exports reach the followers
        for subject in publisher.imports_services:
            if subject.startswith("$") or "*" in subject or ">" in subject:
                continue  # the JetStream API and keys, which nobody follows
            to = [
                account
                for account, follows in followers
                if account != publisher.account
                and any(subject_matches(pattern, subject) for pattern in follows)
            ]
            if not to:
                continue
            exports = accounts[publisher.account].setdefault("exports", [])
            exports.append({"stream": subject, "accounts": to})
            for account in to:
                accounts[account]["imports"].append(
                    {"stream": {"account": publisher.account, "subject": subject}}
                )
