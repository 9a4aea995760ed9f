"""`parley console token --person alice`: issue a person's console sign-in token.

The token is printed once; only its SHA-256 is stored, in `.parley/console/tokens.json` beside
the local system (owner-only; `--tokens FILE` for another place, the console's `tokens_file`
option must then name the same file). Issuing again replaces the person's token, revoking the
old one. The console acts for the person as `person-<name>`, with that principal's own broker
credentials: `parley up` writes them for everyone with a token when it starts, so restart it
after a person's first token. The gate's policy bundle needs a profile `person-<name>` with
`speaks_for_person = true` and `start_traces = true` (as the `cli` profile has).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from actors.console import DEFAULT_TOKENS_FILE, TokenStore, TokenStoreError, principal_of
from tools._local import local_system_alive, missing_credentials

__all__ = ("add_console_command",)


def _cmd_token(args: argparse.Namespace) -> int:
    store = TokenStore(args.tokens)
    try:
        token = store.issue(args.person)
    except (TokenStoreError, OSError) as exc:
        print(f"parley console token: {exc}", file=sys.stderr)
        return 2
    print(token)
    principal = principal_of(args.person)
    print(
        f"signs in {args.person} (principal {principal}); stored hashed in {store.path}",
        file=sys.stderr,
    )
    missing = missing_credentials(principal)
    if missing is not None:  # said now, not at the first sign-in: a newcomer's walk
        print(missing, file=sys.stderr)
    elif args.tokens == DEFAULT_TOKENS_FILE and not local_system_alive():
        # Issued in a directory where no system runs, the token signs in nowhere yet: a
        # `parley up` elsewhere reads its own directory's store (a newcomer's walk).
        print(
            "no `parley up` runs in this directory yet: the token signs in to the console of "
            f"a `parley up` started here; one running elsewhere reads {DEFAULT_TOKENS_FILE} "
            "in its own directory (issue the token there, or pass --tokens that file)",
            file=sys.stderr,
        )
    return 0


def add_console_command(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add `console token` to the `parley` command (the console itself is `parley run
    console`)."""
    console = commands.add_parser("console", help="the web console's sign-in tokens")
    verbs = console.add_subparsers(dest="verb", required=True)
    token = verbs.add_parser("token", help="issue (or replace) a person's sign-in token")
    token.add_argument("--person", required=True, help="the person's name (a-z, 0-9, _ or -)")
    token.add_argument(
        "--tokens", type=Path, default=DEFAULT_TOKENS_FILE, help="the token store (JSON)"
    )
    token.set_defaults(func=_cmd_token)
