"""The A2A clients the edge acts for: their hashed bearer tokens and their bus principals.

A client is a principal of the person kind, `person-<client>`: it has its own nkey user and
account (`parley nats-config` names it like any person) and its own profile in the signed
bundle, which says what it may do (`speaks_for_person`, `start_traces`, its targets, its
rate). Its token is kept as the console keeps a person's (actors/console/_tokens.py: only its
SHA-256, in a file readable by its owner), in a store of the edge's own, so a console token
never opens the A2A door and an A2A token never signs in to the console.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

from actors.console import PersonLink, TokenStore, TokenStoreError, person_settings

__all__ = ("Clients",)

log = logging.getLogger("parley.a2a.clients")


class Clients:
    """One `PersonLink` per client, opened at its first call and kept (so a task's session
    is followed from before its message is sent)."""

    def __init__(self, tokens_file: Path, people_dir: Path, nats_url: str) -> None:
        self.tokens = TokenStore(tokens_file)
        self.people_dir = people_dir
        self.nats_url = nats_url
        self.links: dict[str, PersonLink] = {}
        self._lock = asyncio.Lock()

    def client_of(self, token: str) -> str | None:
        """Whose bearer token this is, or None (an unreadable store refuses everyone)."""
        try:
            return self.tokens.person_of(token)
        except TokenStoreError as exc:
            log.warning("cannot read the A2A tokens", extra={"error": str(exc)})
            return None

    async def link(self, client: str) -> PersonLink:
        """The client's open link, connecting it first if need be.

        Raises:
            ConfigError: the deployment has no credentials for the client.
        """
        async with self._lock:
            link = self.links.get(client)
            if link is None:
                settings = person_settings(self.people_dir, client, self.nats_url)
                link = PersonLink(client, settings)
                await link.open()
                self.links[client] = link
            return link

    async def close(self) -> None:
        for link in self.links.values():
            await link.close()
        self.links.clear()
