"""The least-privilege broker of a chaos run: one nkey user per actor, as deployed.

A run on an open server proves nothing about the config Parley is deployed with: a grant too
narrow for what an actor does under a fault (binding again after a restart, moving an
exhausted delivery) or too wide for what it must not do would go unseen. So a run writes
`parley nats-config`'s authorization for the demo topology's actors into its work directory,
the server includes it (again at each restart, from the same file), the provisioner creates
the streams, buckets and receivers' durables with `parley provision` as an operator would,
and each actor runs with the settings file (and nkey seed) written for it.

The run's own connections are users of that config too: the load generator submits and
follows the timeline as `cli`, as `parley collab` does. The checker reads the decisions and
session events as `cli`, the role that reads PARLEY_EVENTS whole; walks the audit chain as
`auditor`, the only role that reads PARLEY_AUDIT; and lists consumers for a diagnosis as
`provisioner`, since only an operator may look at every consumer. No role reads everything
and none needs to, so no admin user is added to the config under test.

Refusals are counted from the server's log (`Publish Violation`, `Subscription Violation`,
each naming the user's nkey), not from the actors' logs: the server sees every connection,
the run's own and any other, and logs a refusal even when the client ignores the error.
"""

from __future__ import annotations

import asyncio
import re
import subprocess
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from bus import owned_argv, python_command
from schemas import Namespace
from tools.natsconf import AUTHORIZATION, write_nats_config
from tools.natsconf._permissions import PROVISIONER

__all__ = ("LockedBroker", "ProvisionFailed")

_VIOLATION = re.compile(r"\b(?:Publish|Subscription) Violation\b")
_NKEY = re.compile(r"nkey:(U[A-Z2-7]{55})\b")
UNKNOWN_USER = "unknown user"


class ProvisionFailed(RuntimeError):
    """`parley provision` refused or failed; the message carries its output."""


class LockedBroker:
    """The generated config of one run, and the refusals its server reported, by actor."""

    def __init__(self, config_dir: Path, actors: Sequence[str], ns: Namespace) -> None:
        """Write the config (seeds, authorization, settings) for `actors` into `config_dir`."""
        self.config_dir = config_dir
        self._ns = ns
        manifest = write_nats_config(config_dir, actors, ns)
        self._actor_of = {entry["nkey"]: actor for actor, entry in manifest.items()}
        self.refused: Counter[str] = Counter(dict.fromkeys(manifest, 0))

    @property
    def authorization(self) -> Path:
        """The file the server includes: every user and its permissions."""
        return self.config_dir / AUTHORIZATION

    def settings_file(self, actor: str) -> Path:
        """The settings `actor` runs with (`parley run ... --config`)."""
        return self.config_dir / "actors" / f"{actor}.toml"

    def on_server_log(self, line: str) -> None:
        """Count a refusal the server logged (called on the server's log reader thread)."""
        if _VIOLATION.search(line) is None:
            return
        user = _NKEY.search(line)
        actor = self._actor_of.get(user.group(1), UNKNOWN_USER) if user else UNKNOWN_USER
        self.refused[actor] += 1

    def credentials(self, actor: str) -> dict[str, Any]:
        """nats-py connect options that log in as `actor`, replies under its own inbox."""
        return {
            "nkeys_seed": str(self.config_dir / "seeds" / f"{actor}.nk"),
            "inbox_prefix": self._ns.inbox_prefix(actor).encode(),
        }

    async def provision(self, env: Mapping[str, str]) -> str:
        """Run `parley provision` as the provisioner for every actor's settings file.

        `env` is the actors' own (ack wait, max deliver...): the durables are configured from
        the same settings the actors bind with, or they would refuse to start.

        Raises:
            ProvisionFailed: it exited non-zero.
        """
        actors = sorted((self.config_dir / "actors").glob("*.toml"))
        argv = python_command("-m", "tools", "provision")
        argv += ["--config", str(self.settings_file(PROVISIONER)), *map(str, actors)]
        process = await asyncio.create_subprocess_exec(
            *owned_argv(argv),  # dies with the run, however it ends
            env=dict(env),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        output, _ = await process.communicate()
        text = output.decode("utf-8", "replace").strip()
        if process.returncode != 0:
            raise ProvisionFailed(f"parley provision exited {process.returncode}: {text}")
        return text
