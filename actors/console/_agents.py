"""The agents a person may choose in the start form: those registered on this deployment.

Every agent host writes `profile.<name>` to the registry bucket when it starts, and the relay
writes one for each shared agent it hosts (schemas/_registry.py), so an agent that can answer
is listed. The console reads only the names, from the bucket's stream info (the subjects
stored under `profile.`): its own broker user already looks up that stream to write its
heartbeat, and it needs no read of anyone's record for this. An agent stays listed once it has
run here (its profile is kept); whether it is up now is the router's to judge when it calls it.
"""

from __future__ import annotations

from typing import Any, Final

from nats.errors import Error as NatsError
from nats.js import JetStreamContext
from nats.js.errors import Error as JetStreamError

from schemas import Namespace, valid_token

__all__ = ("AgentDirectory", "AgentsUnreadable")

_PROFILE: Final = "profile."


class AgentsUnreadable(Exception):
    """The registry could not be looked up; the message says why."""


class AgentDirectory:
    """Reads the names of the registered agents through the console's own connection."""

    def __init__(self, js: JetStreamContext, ns: Namespace) -> None:
        self._js = js
        self._bucket = ns.bucket("registry")

    async def names(self) -> list[str]:
        """The registered agents' names, sorted.

        Raises:
            AgentsUnreadable: the registry's stream could not be looked up (named, with why).
        """
        prefix = f"$KV.{self._bucket}.{_PROFILE}"
        try:
            info = await self._js.stream_info(f"KV_{self._bucket}", subjects_filter=prefix + ">")
        except (NatsError, JetStreamError, TimeoutError) as exc:
            why = str(exc).strip() or type(exc).__name__
            raise AgentsUnreadable(f"cannot look up the registry {self._bucket}: {why}") from None
        subjects: dict[str, Any] = info.state.subjects or {}
        names = (subject.removeprefix(prefix) for subject in subjects)
        return sorted(name for name in names if valid_token(name))
