"""`parley a2a token --client acme`: issue an A2A client's bearer token.

The token is printed once; only its SHA-256 is stored, in `.parley/a2a/tokens.json`
(owner-only; `--tokens FILE` for another place, which the edge's `tokens_file` option must then
name). Issuing again replaces the client's token, revoking the old one. The edge
(`parley run a2a`) acts for the client as `person-<client>`, with that principal's own broker
credentials (`parley nats-config` names it like any person), and the gate decides its calls
with the bundle's `person-<client>` profile: it needs `speaks_for_person = true` and
`start_traces = true`, and `router` among its targets.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from actors.a2a import DEFAULT_A2A_TOKENS_FILE
from actors.console import TokenStore, TokenStoreError, principal_of
from tools._local import missing_credentials

__all__ = ("add_a2a_command",)


def _cmd_token(args: argparse.Namespace) -> int:
    store = TokenStore(args.tokens)
    try:
        token = store.issue(args.client)
    except (TokenStoreError, OSError) as exc:
        print(f"parley a2a token: {exc}", file=sys.stderr)
        return 2
    print(token)
    print(
        f"authenticates the A2A client {args.client} (principal {principal_of(args.client)}); "
        f"stored hashed in {store.path}",
        file=sys.stderr,
    )
    missing = missing_credentials(principal_of(args.client))
    if missing is not None:  # said now, not at the client's first call: a newcomer's walk
        print(missing, file=sys.stderr)
    return 0


def add_a2a_command(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add `a2a token` to the `parley` command (the edge itself is `parley run a2a`)."""
    a2a = commands.add_parser("a2a", help="the A2A edge's client tokens")
    verbs = a2a.add_subparsers(dest="verb", required=True)
    token = verbs.add_parser("token", help="issue (or replace) an A2A client's bearer token")
    token.add_argument("--client", required=True, help="the client's name (a-z, 0-9, _ or -)")
    token.add_argument(
        "--tokens", type=Path, default=DEFAULT_A2A_TOKENS_FILE, help="the token store (JSON)"
    )
    token.set_defaults(func=_cmd_token)
