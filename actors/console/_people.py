"""The people the console acts for: their tokens, their sign-ins and their connections."""

from __future__ import annotations

import asyncio
import logging

from nats.errors import Error as NatsError

from actors.console._agents import AgentDirectory
from actors.console._audit import AuditView
from actors.console._handshake import Handshake
from actors.console._options import ConsoleOptions
from actors.console._person import PersonLink, person_settings
from actors.console._tokens import SignIns, TokenStore, TokenStoreError
from bus import ConfigError

__all__ = ("People",)

log = logging.getLogger("parley.console.people")


class People:
    """One `PersonLink` per person, opened at start for everyone with a token (so their
    sessions are recorded from then on) or at their first sign-in."""

    def __init__(self, options: ConsoleOptions, nats_url: str) -> None:
        self.options = options
        self.nats_url = nats_url
        self.tokens = TokenStore(options.tokens_file)
        self.sign_ins = SignIns(max_per_person=options.max_sign_ins_per_person)
        self.links: dict[str, PersonLink] = {}
        self._lock = asyncio.Lock()
        self.audit: AuditView | None = None
        self.agents: AgentDirectory | None = None
        self.handshake: Handshake | None = None
        """CreateSession's handshake, when the console has the signers' keys."""
        self.workspaces = options.workspaces
        """Set once the console's own connection is up (its `start`)."""

    async def open_all(self) -> None:
        """Connect everyone who has a token; one without credentials is logged, not fatal.
        The audit reader too, when configured (without it, the audit views say so)."""
        reader = self.options.audit_reader
        if reader is not None:
            try:
                audit = AuditView(reader, self.nats_url, self.options.audit_tenant_in_force)
                await audit.open()
                self.audit = audit
            except (ConfigError, OSError, TimeoutError, NatsError) as exc:
                # Optional: the audit views say it is missing; the console serves the rest.
                log.warning("no audit reader", extra={"error": str(exc)})
        try:
            people = self.tokens.people()
        except TokenStoreError as exc:
            log.warning("cannot read the console tokens", extra={"error": str(exc)})
            return
        for person in people:
            try:
                await self.link(person)
            except ConfigError as exc:
                log.warning("person not connected", extra={"person": person, "error": str(exc)})

    async def link(self, person: str) -> PersonLink:
        """The person's open link, connecting it first if need be.

        Raises:
            ConfigError: the deployment has no credentials for the person.
        """
        async with self._lock:
            link = self.links.get(person)
            if link is None:
                settings = person_settings(self.options.people_dir, person, self.nats_url)
                link = PersonLink(person, settings)
                await link.open()
                self.links[person] = link
            return link

    def sign_in(self, token: str) -> tuple[str, str] | None:
        """(person, sign-in token) for a person's token, or None."""
        try:
            person = self.tokens.person_of(token)
        except TokenStoreError as exc:
            log.warning("cannot read the console tokens", extra={"error": str(exc)})
            return None
        if person is None:
            return None
        return person, self.sign_ins.open(person)

    async def close(self) -> None:
        if self.audit is not None:
            await self.audit.close()
        for link in self.links.values():
            await link.close()
        self.links.clear()
