"""Subject and stream names, built only from validated tokens.

Every variable part of a subject is an actor id, profile, tenant or session id chosen at run
time, sometimes by a remote party. A token containing `.`, `*` or `>` would change which
subjects a publish or a subscription reaches, so every token is checked against one pattern
before a subject is built, and there is no other way to build one.

A `Namespace` is the root token plus the stream and bucket prefix. Production uses the
default `parley`; tests give each test its own, so many tests share one server without seeing
each other's traffic.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ("Namespace", "SubjectTokenError", "check_token", "valid_token")

_TOKEN = re.compile(r"[a-z0-9_-]{1,64}")


class SubjectTokenError(ValueError):
    """A subject token is empty, too long, or holds a character outside `[a-z0-9_-]`."""


def check_token(token: str, what: str = "token") -> str:
    """Return `token` unchanged if it is a safe subject token, else raise `SubjectTokenError`."""
    if not isinstance(token, str) or _TOKEN.fullmatch(token) is None:
        raise SubjectTokenError(
            f"invalid {what} {token!r}: subject tokens must match ^[a-z0-9_-]{{1,64}}$"
        )
    return token


def valid_token(token: str) -> bool:
    """Whether `token` is a safe subject token (for input that is skipped, not refused)."""
    return isinstance(token, str) and _TOKEN.fullmatch(token) is not None


@dataclass(frozen=True, slots=True)
class Namespace:
    """The subjects, stream names and KV bucket names of one Parley deployment."""

    root: str = "parley"

    def __post_init__(self) -> None:
        check_token(self.root, "namespace")

    # -- subjects ------------------------------------------------------------------------
    def submit(self, sender: str) -> str:
        """Where `sender` publishes everything it wants delivered (only the gate reads it)."""
        return f"{self.root}.submit.{check_token(sender, 'sender')}"

    def deliver(self, receiver: str) -> str:
        """Where the gate delivers envelopes for `receiver` (only the gate writes it)."""
        return f"{self.root}.deliver.{check_token(receiver, 'receiver')}"

    def decisions(self, profile: str) -> str:
        """Where the gate publishes each decision about `profile`'s traffic."""
        return f"{self.root}.decisions.{check_token(profile, 'profile')}"

    def events(self, owner: str, session_id: str) -> str:
        """A session's timeline of `session_event` envelopes, under the principal that owns
        it (the one that opened it), so the broker can let each person follow only theirs."""
        owner = check_token(owner, "owner")
        return f"{self.root}.events.{owner}.{check_token(session_id, 'session id')}"

    def timelines(self, owner: str) -> str:
        """Every session timeline of `owner`: what a person may follow."""
        return f"{self.root}.events.{check_token(owner, 'owner')}.*"

    def standing(self, owner: str, session_id: str) -> str:
        """How `owner`'s session `session_id` stands: a copy of the event that opened it and of
        the one that ended it, on a subject of their own. A person may read only the last
        message of a subject (`parley collab --follow` and `--stop`, tools/_stored_events.py),
        and what is told on the timeline after a session's end (a refusal, an approvals
        answer, a tool step) would otherwise hide the end."""
        owner = check_token(owner, "owner")
        return f"{self.root}.standing.{owner}.{check_token(session_id, 'session id')}"

    def standings(self, owner: str) -> str:
        """How every session of `owner` stands: what a person may read."""
        return f"{self.root}.standing.{check_token(owner, 'owner')}.*"

    def chunks(self, receiver: str) -> str:
        """Where the LLM gateway streams the text of `receiver`'s model calls as it is written
        (`llm_chunk`s, core NATS, never stored): only `receiver` may follow it."""
        return f"{self.root}.chunks.{check_token(receiver, 'receiver')}"

    def typing(self, owner: str, session_id: str) -> str:
        """Where the LLM gateway sends the visible text of the model calls made in `owner`'s
        session `session_id` as it is written (`llm_chunk`s with `agent`, core NATS, never
        stored, captured by no stream): the session's owner alone may follow it."""
        owner = check_token(owner, "owner")
        return f"{self.root}.typing.{owner}.{check_token(session_id, 'session id')}"

    def typings(self, owner: str) -> str:
        """The text being written in every session of `owner`: what a person may follow."""
        return f"{self.root}.typing.{check_token(owner, 'owner')}.*"

    def audit(self, tenant: str, profile: str) -> str:
        """The audit records of one profile of one tenant."""
        return (
            f"{self.root}.audit.{check_token(tenant, 'tenant')}.{check_token(profile, 'profile')}"
        )

    def dead(self, actor: str, sender: str | None = None) -> str:
        """Where `actor` moves a message of `sender` it cannot process, with the reason.

        `sender` (default: `actor` itself) is the principal whose submission it was, so each
        sender's dead letters are bounded on a subject of their own (docs/quotas.md)."""
        source = check_token(sender, "sender") if sender is not None else actor
        return f"{self.root}.dead.{source}.{check_token(actor, 'actor')}"

    def timers(self, actor: str) -> str:
        """Reminders `actor` set for itself (the router's watch over the calls it waits on)."""
        return f"{self.root}.timers.{check_token(actor, 'actor')}"

    def agent_timers(self, agent: str) -> str:
        """Reminders an agent sets for itself (the deadlines of the agents it called), in a
        stream of its own (`agent_stream("timers", agent)`): one token deeper than `timers`,
        so the shared `PARLEY_TIMERS` (`timers.*`) never captures them."""
        return f"{self.root}.timers.{check_token(agent, 'agent')}.own"

    def wildcard(self, family: str) -> str:
        """All subjects of one family (`submit`, `deliver`, …), for stream definitions."""
        depth = 2 if family in ("audit", "events", "standing", "dead", "typing") else 1
        return f"{self.root}.{check_token(family, 'family')}" + ".*" * depth

    def token_at(self, subject: str, index: int = 2) -> str:
        """Return the token at `index` of a subject of this namespace (the sender of a submit)."""
        return subject.split(".")[index]

    # -- JetStream names -----------------------------------------------------------------
    @property
    def stream_prefix(self) -> str:
        return self.root.upper().replace("-", "_")

    def stream(self, family: str) -> str:
        """Stream name for a family: `submit` -> `PARLEY_SUBMIT`."""
        return f"{self.stream_prefix}_{check_token(family, 'family').upper()}"

    def bucket(self, name: str) -> str:
        """KV bucket name: `sessions` -> `parley_sessions`."""
        return f"{self.root}_{check_token(name, 'bucket')}"

    def agent_stream(self, family: str, agent: str) -> str:
        """A stream of one agent's own: `timers` of `gpt` -> `PARLEY_TIMERS_gpt`.

        Bounded on its own, so an agent that never takes its reminders (its credentials in
        hostile hands) fills only its own, never the router's or the tool runtime's."""
        return f"{self.stream(family)}_{check_token(agent, 'agent')}"

    def agent_bucket(self, name: str, agent: str) -> str:
        """A KV bucket of one agent's own: `waits` of `gpt` -> `parley_waits_gpt`.

        Bounded on its own, so what one agent writes under its own name never fills another's
        (a broker cannot bound how many keys one principal writes under a prefix)."""
        return f"{self.bucket(name)}_{check_token(agent, 'agent')}"

    def inbox_prefix(self, actor: str) -> str:
        """A per-actor reply inbox, so an actor's permissions need not include `_INBOX.>`."""
        return f"_INBOX_{check_token(actor, 'actor')}"
