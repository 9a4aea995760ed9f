"""nats CLI contexts for the people who use the local system: one file per role.

A locked-down broker refuses the nats CLI its defaults: every principal has its own nkey, its
own inbox prefix (`_INBOX_<role>`, never `_INBOX`), and one outside the core account reaches
JetStream only through the API its account imports (`$JS.PARLEY.API`). `parley up` therefore
writes, under `.parley/nats-contexts/` (owner-only), a context in the nats CLI's own JSON
format (natscontext's `url`, `nkey`, `inbox_prefix`, `jetstream_api_prefix`) and a copy of the
seed it names, for each role a person uses: `operator` (read everything, write nothing),
`audit-cli`, `cli`, `policy-signer` and `system` when the broker has a system user. The CLI
takes a context by path: `nats --context .parley/nats-contexts/operator.json stream ls`, or
`NATS_CONTEXT` set to that path (docs/nats-cli.md).
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path

from schemas import Namespace
from tools._local import LOCAL_DIR
from tools.natsconf import (
    AUDIT_READER,
    OPERATOR,
    POLICY_SIGNER,
    SYSTEM_USER,
    settings_for,
)

__all__ = ("CONTEXT_ROLES", "LOCAL_CONTEXTS", "context_hint", "write_nats_contexts")

LOCAL_CONTEXTS = LOCAL_DIR / "nats-contexts"

CONTEXT_ROLES = (OPERATOR, AUDIT_READER, "cli", POLICY_SIGNER, SYSTEM_USER)
"""The roles a person uses, in the order `parley up` names them."""


def _context(role: str, url: str, seed: Path, ns: Namespace) -> dict[str, str]:
    """One role's context: where, as whom, and the prefixes its grants name."""
    context = {
        "description": f"Parley's {role} ({ns.root}), written by `parley up`",
        "url": url,
        "nkey": str(seed),
        "inbox_prefix": ns.inbox_prefix(role),
    }
    if role != SYSTEM_USER:
        prefix = settings_for(role, ns).get("js_api_prefix")
        if prefix is not None:  # outside the core account: its imported API
            context["jetstream_api_prefix"] = str(prefix)
    return context


def _write_private(path: Path, data: bytes) -> None:
    """Write `data` to `path`, readable and writable by its owner only, from its first byte."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)
    path.chmod(0o600)  # a file that was there before keeps its mode through O_CREAT


def write_nats_contexts(
    broker: Path, out: Path, url: str, ns: Namespace, roles: Sequence[str] = CONTEXT_ROLES
) -> list[Path]:
    """Write a context and its seed into `out` (mode 0700) for each of `roles` that has a seed
    in `broker/seeds`; return the context files written. `url`: the server's URLs,
    comma-separated (the nats CLI takes a list, as NATS_URL does)."""
    out.mkdir(mode=0o700, parents=True, exist_ok=True)
    out.chmod(0o700)
    written: list[Path] = []
    for role in roles:
        source = broker / "seeds" / f"{role}.nk"
        if not source.is_file():
            continue
        seed = out / f"{role}.nk"
        _write_private(seed, source.read_bytes())
        context = _context(role, url, seed.resolve(), ns)
        path = out / f"{role}.json"
        _write_private(path, (json.dumps(context, indent=2) + "\n").encode())
        written.append(path)
    return written


def context_hint(out: Path) -> str:
    """The line `parley up` says once the contexts are written."""
    return (
        f"nats CLI contexts in {out}/ (operator reads everything): "
        f"nats --context {out}/operator.json stream ls, or NATS_CONTEXT={out}/operator.json"
    )
