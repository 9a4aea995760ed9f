"""`parley nats-config`: a least-privilege nats-server config with one nkey user per actor.

Writes, into `--out DIR`:

- `nats-server.conf`: listen, monitoring, JetStream with `sync_interval: always` (as the
  embedded server runs), and `include "authorization.conf"`;
- `authorization.conf`: the accounts (`_permissions.py`): the core account with JetStream
  (within its limits, `AccountLimits` of bus/_quotas.py, set by `--max-file` and the like) and
  the trusted actors, and one account per agent or person, each with one nkey user, its
  permissions and the services and streams it imports from the core account; as JSON (a
  subset of nats-server's config syntax) so tools and tests can read it back;
- `actors.json`: which public key is which actor and role (nkey users carry no name), and
  for the relay the names it was granted (`serves`, comma-separated), whose durables the
  provisioner creates (`relay_serves_of`);
- `seeds/<actor>.nk`: each actor's private seed, readable by its owner only;
- `actors/<actor>.toml`: the settings that actor runs with (`parley run ... --config`): its
  id, namespace, seed file, `provision = false`, and who moves exhausted messages.

Seeds already in `DIR/seeds` are kept, so re-running after adding an actor does not rotate
everyone's keys. `--example` writes only the three config files, with fresh public keys whose
seeds are thrown away: the committed `deploy/nats/` example is made that way.
"""

from __future__ import annotations

import argparse
import ipaddress
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import nkeys
from pydantic import ValidationError

from bus import AccountLimits, describe_invalid
from schemas import Namespace, SubjectTokenError, check_token
from tools.natsconf._follows import follow_publishers
from tools.natsconf._permissions import (
    CORE_ACCOUNT,
    PROVISIONER,
    RELAY,
    Permissions,
    permissions_for,
    role_of,
    settings_for,
)
from tools.natsconf._system import SYSTEM_ACCOUNT, SYSTEM_USER, system_account

__all__ = (
    "AUTHORIZATION",
    "DEFAULT_ACTORS",
    "add_natsconf_commands",
    "new_user_seed",
    "public_key",
    "read_accounts",
    "read_authorization",
    "relay_serves_of",
    "write_nats_config",
)

DEFAULT_ACTORS = (
    "gate",
    "router",
    "auditor",
    "tools",
    "llm",
    "cli",
    "gpt",
    "claude",
    "policy-signer",
    "audit-cli",
    "artifacts-cli",
    "operator",
)
AUTHORIZATION = "authorization.conf"
MANIFEST = "actors.json"
_EXAMPLE_NOTE = (
    "# EXAMPLE ONLY: these public keys were generated and their seeds thrown away, so nobody\n"
    "# can log in with them. Write your own with `parley nats-config --out DIR`.\n"
)


def new_user_seed() -> bytes:
    """A fresh nkey user seed (`SU...`): 32 random bytes, NATS's base32 + CRC16 encoding."""
    seed: bytes = nkeys.encode_seed(os.urandom(32), nkeys.PREFIX_BYTE_USER)
    return seed


def public_key(seed: bytes) -> str:
    """The public nkey (`U...`) of a user seed."""
    pair = nkeys.from_seed(bytearray(seed))
    try:
        return str(pair.public_key.decode())
    finally:
        pair.wipe()


def _seed_for(seeds_dir: Path | None, actor: str) -> bytes:
    """The actor's existing seed from `seeds_dir`, else a new one written there (mode 0600)."""
    if seeds_dir is None:
        return new_user_seed()
    path = seeds_dir / f"{actor}.nk"
    if path.is_file():
        return path.read_bytes().strip()
    seed = new_user_seed()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as handle:
        handle.write(seed + b"\n")
    return seed


def _toml_value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(item) for item in value) + "]"
    return json.dumps(str(value))  # a JSON string is a valid TOML basic string


DEFAULT_LISTEN = "127.0.0.1:4222"
"""Where the server listens unless `--listen` says otherwise: the address every actor and
command connects to by default, so its settings need not name it."""


def client_url(listen: str) -> str:
    """The URL this machine's actors connect to for a server listening on `listen`
    (`HOST:PORT`): an unspecified host (`0.0.0.0`, `::`, none) is reached on loopback. Actors
    on other machines name the server's own address instead (their settings' `nats_url`).

    Raises:
        ValueError: `listen` is no `HOST:PORT` with a port from 1 to 65535.
    """
    host, colon, port = listen.rpartition(":")
    if not colon or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"--listen {listen!r} is no HOST:PORT (a port from 1 to 65535)")
    host = host.removeprefix("[").removesuffix("]")
    try:
        unspecified = not host or ipaddress.ip_address(host).is_unspecified
    except ValueError:  # a name
        unspecified = False
    if unspecified:
        host = "::1" if ":" in host else "127.0.0.1"
    return f"nats://[{host}]:{port}" if ":" in host else f"nats://{host}:{port}"


def _server_conf(store_dir: str, example: bool, listen: str) -> str:
    return (
        "# Parley's nats-server config, written by `parley nats-config`.\n"
        + (_EXAMPLE_NOTE if example else "")
        + "# Every write is fsynced before it is acknowledged (Jepsen lost acknowledged writes\n"
        "# with the lazy default). Users and their permissions are in authorization.conf.\n"
        f"listen: {json.dumps(listen)}\n"
        'http: "127.0.0.1:8222"\n'
        "max_payload: 1MB\n"
        "jetstream {\n"
        f"  store_dir: {json.dumps(store_dir)}\n"
        "  sync_interval: always\n"
        "}\n"
        f'include "{AUTHORIZATION}"\n'
    )


def write_nats_config(
    out: Path,
    actors: Sequence[str],
    ns: Namespace,
    *,
    example: bool = False,
    store_dir: str = "jetstream",
    listen: str = DEFAULT_LISTEN,
    relay_serves: Sequence[str] = (),
    limits: AccountLimits | None = None,
    system_user: bool = False,
) -> dict[str, dict[str, str]]:
    """Write the config files (and, unless `example`, seeds and settings) into `out`.

    `relay_serves`: the shared agents and device principals the relay reads and submits as.
    `limits`: the core account's JetStream limits (docs/quotas.md; the defaults when None).
    `system_user`: also a `system` user in nats-server's system account (`_system.py`).

    Returns:
        The manifest: actor id -> {"role", "nkey"}.

    Raises:
        SubjectTokenError: an actor id is not a valid subject token.
        ValueError: an actor is named `system`, the system user's name; `listen` is no
            `HOST:PORT`.
    """
    names = list(dict.fromkeys([*(check_token(a, "actor id") for a in actors), PROVISIONER]))
    url = client_url(listen) if listen != DEFAULT_LISTEN else None  # before anything is written
    if SYSTEM_USER in names:
        raise ValueError(f"{SYSTEM_USER!r} is the system user's name (--system-user), no actor's")
    out.mkdir(parents=True, exist_ok=True)
    seeds_dir = None if example else out / "seeds"
    if seeds_dir is not None:
        seeds_dir.mkdir(mode=0o700, exist_ok=True)
        (out / "actors").mkdir(exist_ok=True)
    agents = [name for name in names if role_of(name) == "agent"]  # the provisioner's to make
    manifest: dict[str, dict[str, str]] = {}
    users: dict[str, dict[str, Any]] = {}
    grants: list[Permissions] = []
    for actor in names:
        seed = _seed_for(seeds_dir, actor)
        nkey = public_key(seed)
        perms = permissions_for(actor, ns, relay_serves, agents)
        grants.append(perms)
        manifest[actor] = {"role": role_of(actor), "nkey": nkey, "account": perms.account}
        if role_of(actor) == RELAY:
            manifest[actor]["serves"] = ",".join(relay_serves)
        users[actor] = {"nkey": nkey, "permissions": perms.to_config()}
        if seeds_dir is not None:
            values = {
                **settings_for(actor, ns),
                "nkey_seed_file": str((seeds_dir / f"{actor}.nk").resolve()),
            }
            if url is not None:  # else the default URL: a settings file would pin it
                values["nats_url"] = url
            lines = [f"{key} = {_toml_value(value)}" for key, value in values.items()]
            header = (
                f"# Settings for {actor} under this config's permissions (parley nats-config).\n"
            )
            (out / "actors" / f"{actor}.toml").write_text(header + "\n".join(lines) + "\n")
    header = (
        f"# One nkey user per actor of namespace {ns.root!r}, written by `parley nats-config`;\n"
        f"# {MANIFEST} says which key is which actor. Least privilege: see tools/natsconf/.\n"
    )
    limits = AccountLimits() if limits is None else limits
    config: dict[str, Any] = {"accounts": _accounts(names, users, grants, limits)}
    if system_user:
        nkey = public_key(_seed_for(seeds_dir, SYSTEM_USER))
        manifest[SYSTEM_USER] = {"role": SYSTEM_USER, "nkey": nkey, "account": SYSTEM_ACCOUNT}
        config["accounts"][SYSTEM_ACCOUNT] = system_account(nkey, ns)
        config["system_account"] = SYSTEM_ACCOUNT
    body = json.dumps(config, indent=2)
    (out / AUTHORIZATION).write_text(header + (_EXAMPLE_NOTE if example else "") + body + "\n")
    (out / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
    (out / "nats-server.conf").write_text(_server_conf(store_dir, example, listen))
    return manifest


def _accounts(
    names: Sequence[str],
    users: dict[str, dict[str, Any]],
    grants: Sequence[Permissions],
    limits: AccountLimits,
) -> dict[str, dict[str, Any]]:
    """The core account (JetStream within `limits`, the trusted actors, its exports) and one
    account per other principal, which imports exactly its grants, each exported to it
    alone. Only the core account has JetStream, so its limits bound everything stored. What
    a principal publishes in its own account reaches who follows it (`_follows.py`)."""
    core: dict[str, Any] = {"jetstream": limits.to_config(), "users": [], "exports": []}
    accounts: dict[str, dict[str, Any]] = {CORE_ACCOUNT: core}
    services: dict[str, list[str]] = {}
    streams: dict[str, list[str]] = {}
    for actor, perms in zip(names, grants, strict=True):
        if perms.account == CORE_ACCOUNT:
            core["users"].append(users[actor])
            continue
        imports: list[dict[str, Any]] = []
        for subject in perms.imports_services:
            services.setdefault(subject, []).append(perms.account)
            imports.append(
                {
                    "service": {"account": CORE_ACCOUNT, "subject": subject},
                    "to": perms.local(subject),
                }
            )
        for subject in perms.stream_imports:
            streams.setdefault(subject, []).append(perms.account)
            imports.append({"stream": {"account": CORE_ACCOUNT, "subject": subject}})
        accounts[perms.account] = {"users": [users[actor]], "imports": imports}
    for subject, to in services.items():
        export: dict[str, Any] = {"service": subject, "accounts": to}
        if ".MSG.NEXT." in subject or ".DIRECT.GET." in subject:  # many answers to one request
            export["response_type"] = "stream"
        core["exports"].append(export)
    core["exports"] += [{"stream": subject, "accounts": to} for subject, to in streams.items()]
    follow_publishers(accounts, grants)  # what agents and people publish, to who follows it
    return accounts


def relay_serves_of(config_dir: Path) -> tuple[str, ...]:
    """The names the relay was granted in the config written to `config_dir` (none when it
    has no relay, or no manifest)."""
    try:
        manifest = json.loads((config_dir / MANIFEST).read_text())
    except (OSError, ValueError):
        return ()
    serves = str(manifest.get(RELAY, {}).get("serves", ""))
    return tuple(name for name in serves.split(",") if name)


def read_authorization(path: Path) -> list[dict[str, Any]]:
    """The users of every account of an `authorization.conf` written by `write_nats_config`."""
    return [user for account in read_accounts(path).values() for user in account["users"]]


def read_accounts(path: Path) -> dict[str, dict[str, Any]]:
    """The accounts of an `authorization.conf` written by `write_nats_config`."""
    text = "\n".join(
        line for line in path.read_text().splitlines() if not line.lstrip().startswith("#")
    )
    accounts: dict[str, dict[str, Any]] = json.loads(text)["accounts"]
    return accounts


def _cmd_nats_config(args: argparse.Namespace) -> int:
    actors = [a.strip() for a in args.actors.split(",") if a.strip()]
    serves = [a.strip() for a in args.relay_serves.split(",") if a.strip()]
    if not actors:  # a config of the provisioner alone runs no system
        print("parley nats-config: --actors names no actor", file=sys.stderr)
        return 2
    try:
        manifest = write_nats_config(
            args.out,
            actors,
            Namespace(args.namespace),
            example=args.example,
            listen=args.listen,
            relay_serves=serves,
            limits=AccountLimits(
                max_file=args.max_file,
                max_memory=args.max_memory,
                max_streams=args.max_streams,
                max_consumers=args.max_consumers,
            ),
            system_user=args.system_user,
        )
    except ValidationError as exc:
        print(describe_invalid("parley nats-config: invalid limits", exc), file=sys.stderr)
        return 2
    except (SubjectTokenError, OSError, ValueError) as exc:
        print(f"parley nats-config: {exc}", file=sys.stderr)
        return 2
    for actor, entry in manifest.items():
        print(f"{actor:<12} {entry['role']:<12} {entry['nkey']}")
    written = "config only (example keys)" if args.example else "config, seeds and settings"
    print(f"wrote {written} to {args.out}")
    return 0


def add_natsconf_commands(commands: Any) -> None:
    """Register `parley nats-config` on the CLI's subcommands."""
    cmd = commands.add_parser(
        "nats-config", help="write a least-privilege nats-server config, one nkey per actor"
    )
    cmd.add_argument("--out", type=Path, required=True, help="directory to write into")
    cmd.add_argument(
        "--actors",
        default=",".join(DEFAULT_ACTORS),
        help="comma-separated actor ids (gate, router, auditor, cli are roles; others are "
        "agents); the provisioner is always added. Naming them replaces the default list: "
        "name the operator roles too (policy-signer, audit-cli, artifacts-cli, operator) for "
        "`parley policy publish`, `parley audit`, `parley artifacts` and the nats contexts",
    )
    cmd.add_argument("--namespace", default="parley", help="subject root (default parley)")
    cmd.add_argument(
        "--listen",
        default=DEFAULT_LISTEN,
        help=(
            "the server's client address (default 127.0.0.1:4222: this machine only); the "
            "actors' settings name the URL to reach it"
        ),
    )
    cmd.add_argument(
        "--example", action="store_true", help="config files only, keys' seeds thrown away"
    )
    cmd.add_argument(
        "--system-user",
        action="store_true",
        help="also a read-only `system` user in nats-server's system account, for "
        "`nats server report` and `nats events` (docs/nats-cli.md)",
    )
    cmd.add_argument(
        "--relay-serves",
        default="",
        help="comma-separated names the relay reads and submits as: its shared agents "
        "(`parley shared list`) and device principals (`parley share --list`)",
    )
    defaults = AccountLimits()
    for name, what in (
        ("max_file", "file store bytes"),
        ("max_memory", "memory store bytes"),
        ("max_streams", "streams and buckets"),
        ("max_consumers", "consumers"),
    ):
        cmd.add_argument(
            f"--{name.replace('_', '-')}",
            type=int,
            default=getattr(defaults, name),
            help=f"the core account's JetStream limit on {what} (default %(default)s; "
            "docs/quotas.md)",
        )
    cmd.set_defaults(func=_cmd_nats_config)
