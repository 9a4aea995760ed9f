"""How a `parley` command finds the system it acts on, and as whom.

`parley up` starts the local system in `.parley/`: it writes the embedded server's URL to
`.parley/nats.url` and, locked down (the default), a least-privilege broker config under
`.parley/broker/` with one nkey user per actor and per operator role. Every command that talks
to the bus resolves its settings the same way:

1. `--config FILE` when given (a deployment's settings file, as `parley nats-config` writes);
2. else, when no URL is given and `parley up` runs here, the settings file it wrote for the
   command's role
   (`.parley/broker/actors/<role>.toml`: `cli` for `collab` and `say`, `policy-signer` for
   `policy publish`, `audit-cli` for `audit`, `trace` and `tail`; `operator` is the nats CLI's,
   tools/_nats_contexts.py);
3. else defaults and `PARLEY_*` variables.

The URL is `NATS_URL` when set, else `.parley/nats.url`, else the default; a server that
cannot be reached is a `ConfigError` that says what to set, never a traceback. The URL file is
followed only while the `parley up` that wrote it lives, and one `parley up` owns a directory
(tools/_local_owner.py).

`parley up --cluster N` runs N embedded nodes on loopback instead (`local_cluster`), writes all
their URLs, comma-separated, to `.parley/nats.url`, and provisions at three replicas.

`lock_down` is what `parley up` does before it starts its embedded server (unless told
`--open-broker`): `parley nats-config`'s least-privilege config for the topology's actors, the
operator roles and every person with a console token (`person-<name>`, whom the console acts
as), seeds kept across runs, and each child's credentials and settings passed to it as
`PARLEY_*` variables. A topology with a relay (the actor `relay`) gets it granted the names it
serves, read from its options' `relay_dir` and `device_dir` as the relay reads them, and the
provisioner creates their durables.
"""

from __future__ import annotations

import json
import tomllib
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final

from actors.a2a import DEFAULT_A2A_TOKENS_FILE
from actors.console import DEFAULT_TOKENS_FILE, TokenStore, principal_of
from actors.relay import DeviceKeyError, served_names_of
from bus import (
    RECONNECT_WINDOW_S,
    ChildSpec,
    ConfigError,
    EmbeddedCluster,
    EmbeddedServer,
    Settings,
    Topology,
    load_settings,
)
from schemas import Namespace
from tools._local_owner import (
    LOCAL_DIR,
    LOCAL_OWNER_FILE,
    LOCAL_URL_FILE,
    claim_local_directory,
    forget_local_system,
    local_system_alive,
    record_local_system,
)
from tools.natsconf import (
    ARTIFACT_READER,
    AUDIT_READER,
    OPERATOR,
    POLICY_SIGNER,
    PROVISIONER,
    RELAY,
    role_of,
    settings_for,
    write_nats_config,
)
from tools.provision import provision_once

PERSON = "cli"  # `parley collab` and `parley say` act for the person at this terminal

__all__ = (
    "LOCAL_AUDIT_KEY",
    "LOCAL_BROKER",
    "LOCAL_DIR",
    "LOCAL_KEYS",
    "LOCAL_OWNER_FILE",
    "LOCAL_URL_FILE",
    "NO_LOCAL_SYSTEM",
    "SERVER_RESTART_WINDOW_S",
    "claim_local_directory",
    "console_people",
    "forget_local_system",
    "local_cluster",
    "local_server_text",
    "local_settings",
    "local_system_alive",
    "local_url",
    "lock_down",
    "missing_credentials",
    "provision_locked",
    "reconnect_window_s",
    "record_local_system",
    "relay_serves",
)

LOCAL_BROKER: Final = LOCAL_DIR / "broker"
LOCAL_KEYS: Final = LOCAL_DIR / "keys"
"""The local system's keys (tools/_local_system.py): the policy key pair, the auditor's."""
LOCAL_AUDIT_KEY: Final = LOCAL_KEYS / "audit.pub"
NO_LOCAL_SYSTEM: Final = "no local system running: start it with `parley up`"


SERVER_RESTART_WINDOW_S: Final = 10.0
"""How long a command talking to the server `parley up` keeps here waits for it to come back:
`parley up` restarts a dead server after half a second, and a store holding a long history
can take seconds to recover, past a command's usual `RECONNECT_WINDOW_S`."""


def reconnect_window_s(settings: Settings) -> float:
    """How long a command's connection to `settings.nats_url` tries to reconnect: longer when
    the server is the one `parley up` keeps here (it restarts it; with `--cluster` the other
    nodes answer at once), else the usual window."""
    if not local_system_alive():
        return RECONNECT_WINDOW_S
    try:
        kept = LOCAL_URL_FILE.read_text().strip()
    except OSError:
        return RECONNECT_WINDOW_S
    return SERVER_RESTART_WINDOW_S if settings.nats_url == kept else RECONNECT_WINDOW_S


def local_url(settings: Settings) -> str:
    """NATS_URL when set, else the URL of the system `parley up` runs here, else the default.

    Raises:
        ConfigError: `.parley/nats.url` was left by a `parley up` that is gone.
    """
    if "nats_url" in settings.model_fields_set or not LOCAL_URL_FILE.is_file():
        return settings.nats_url
    if not local_system_alive():
        raise ConfigError(f"{NO_LOCAL_SYSTEM} (in this directory; or set NATS_URL)")
    return LOCAL_URL_FILE.read_text().strip() or settings.nats_url


def _local_system_is_up(settings: Settings) -> bool:
    """Whether the command talks to the system `parley up` runs here: no URL was given, and
    `parley up` wrote one. Its credentials are for that server only."""
    return "nats_url" not in settings.model_fields_set and LOCAL_URL_FILE.is_file()


def local_settings(config: Path | None, role: str, **overrides: Any) -> Settings:
    """The settings of a command acting as `role` (see the module docstring for the order)."""
    given = {k: v for k, v in overrides.items() if v is not None}
    if config is None and _local_system_is_up(load_settings(None, **given)):
        mine = LOCAL_BROKER / "actors" / f"{role}.toml"
        config = mine if mine.is_file() else None
    settings = load_settings(config, **given)
    url = local_url(settings)
    if url != settings.nats_url:
        settings = settings.model_copy(update={"nats_url": url})
    return settings


def missing_credentials(principal: str) -> str | None:
    """What to do when `parley up` runs here without broker credentials for `principal` (a
    person whose token was just issued), else None: it writes them at its start only."""
    if not local_system_alive() or (LOCAL_BROKER / "actors" / f"{principal}.toml").is_file():
        return None
    return (
        f"`parley up` runs here without credentials for {principal}: restart it to write "
        f"them; its policy bundle needs a profile `{principal}` (as `cli`'s: "
        "speaks_for_person, start_traces) for the gate to admit what the person sends"
    )


def local_cluster(size: int, store: Path, authorization: Path | None) -> EmbeddedCluster:
    """`parley up --cluster SIZE`'s servers: SIZE nodes on loopback, each with its own store
    under `store`, locked down like the single server (`authorization`), their warnings and
    errors shown with the node's name."""

    def node_line(node: str, line: str) -> None:
        if "[WRN]" in line or "[ERR]" in line or "[FTL]" in line:
            print(f"[nats {node}] {line}", flush=True)

    def node_exit(node: str, code: int) -> None:
        # Told only of exits no stop of ours asked for: said, or nobody knew a node was gone.
        how = f"signal {-code}" if code < 0 else f"code {code}"
        print(
            f"[nats {node}] exited ({how}); not restarted: the cluster goes on while most "
            "of its nodes run, and `parley up` started again brings it back",
            flush=True,
        )

    return EmbeddedCluster(
        size, store, authorization=authorization, on_log=node_line, on_exit=node_exit
    )


def local_server_text(server: EmbeddedServer | EmbeddedCluster) -> str:
    """What `parley up` says it started: the server's pid and URL; for a cluster, one line per
    node (its pid, to kill it and watch the others carry on) and then the URL list (`parley
    up` prefixes each line)."""
    if isinstance(server, EmbeddedServer):
        return f"embedded nats-server (pid {server.pid}) ready at {server.url}"
    nodes = "".join(
        f"node {name} (pid {server.node(name).pid}) at {server.node(name).url}\n"
        for name in server.names
    )
    return f"{nodes}embedded {len(server.names)}-node cluster ready at {server.url}"


def console_people(
    tokens: Path = DEFAULT_TOKENS_FILE, clients: Path = DEFAULT_A2A_TOKENS_FILE
) -> tuple[str, ...]:
    """The principals of everyone with a console token (`parley console token`) or an A2A
    client token (`parley a2a token`): each gets credentials of its own, which the console or
    the A2A edge uses to act as that person. (A client's were left out: a topology running
    the edge refused every client, and a restart did not help.)"""
    people = [*TokenStore(tokens).people(), *TokenStore(clients).people()]
    return tuple(dict.fromkeys(principal_of(person) for person in people))


def _env_value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list | tuple):
        return json.dumps(list(value))
    return str(value)


def _child_options(child: ChildSpec) -> dict[str, Any]:
    """A child's `[options]`, as it will run: `PARLEY_OPTIONS` in its environment, else its
    config file's table."""
    try:
        if "PARLEY_OPTIONS" in child.env:
            options = json.loads(child.env["PARLEY_OPTIONS"])
        elif child.config is not None:
            options = tomllib.loads(child.config.read_text()).get("options", {})
        else:
            options = {}
    except (OSError, ValueError) as exc:
        raise ConfigError(f"cannot read {child.name}'s options: {exc}") from None
    if not isinstance(options, dict):
        raise ConfigError(f"{child.name}'s options are not a table")
    return options


def relay_serves(topology: Topology) -> tuple[str, ...]:
    """The names the topology's relay serves: its shared agents and its shares' device
    principals (none without a relay).

    Raises:
        ConfigError: the relay's options or device keys cannot be read.
    """
    for child in topology.actor:
        if role_of(child.name) != RELAY:
            continue
        options = _child_options(child)
        try:
            relay_dir, device_dir = Path(options["relay_dir"]), Path(options["device_dir"])
            return served_names_of(relay_dir, device_dir)
        except KeyError as exc:
            raise ConfigError(f"the relay's options lack {exc}") from None
        except DeviceKeyError as exc:
            raise ConfigError(f"the relay's device keys: {exc}") from None
    return ()


def lock_down(
    topology: Topology, ns: Namespace, broker: Path = LOCAL_BROKER, people: Sequence[str] = ()
) -> Topology:
    """Write the broker config for `topology` under `broker` and return the topology with each
    child's credentials and least-privilege settings in its environment.

    `people` (principals, `person-<name>`) get credentials beside everyone holding a console
    token: the people the system's bundle names, so that a token issued after `parley up`
    started signs in at once, with no restart.

    The generated settings files get the topology's shared settings too, so the durables the
    provisioner creates for receivers match what each child binds with.
    """
    names = [child.name for child in topology.actor]
    people = [*dict.fromkeys([*console_people(), *people])]
    operators = [PERSON, *people, POLICY_SIGNER, AUDIT_READER, ARTIFACT_READER, OPERATOR]
    serves = relay_serves(topology)  # and a system user, for `nats server report`
    write_nats_config(broker, [*names, *operators], ns, relay_serves=serves, system_user=True)
    # The namespace is `ns`, already in every file (a key written twice is not TOML).
    shared = "".join(
        f"{k} = {json.dumps(v)}\n" for k, v in topology.settings.items() if k != "namespace"
    )
    for name in [*names, *operators, PROVISIONER]:
        path = broker / "actors" / f"{name}.toml"
        path.write_text(path.read_text() + shared)
    children = []
    for child in topology.actor:
        values = {
            **settings_for(child.name, ns),
            "nkey_seed_file": str((broker / "seeds" / f"{child.name}.nk").resolve()),
        }
        env = {f"PARLEY_{k.upper()}": _env_value(v) for k, v in values.items()}
        children.append(child.model_copy(update={"env": {**env, **child.env}}))
    return topology.model_copy(update={"actor": tuple(children)})


async def provision_locked(
    url: str, names: Sequence[str], broker: Path = LOCAL_BROKER, people: Sequence[str] = ()
) -> None:
    """Create the streams, buckets and the receivers' durables as the provisioner, and each
    agent's own buckets (its waits, which an agent may not create): the actors
    named (the relay's, one per name `lock_down` granted it), and the person at this
    terminal, whose answers to `parley delegate` the gate delivers to `parley.deliver.cli` (a
    person may not create its own durable)."""
    everyone = (PERSON, *dict.fromkeys([*console_people(), *people]))
    actors = [broker / "actors" / f"{name}.toml" for name in (*names, *everyone)]
    actors = [path for path in actors if path.is_file()]  # a token issued since lock_down
    await provision_once(broker / "actors" / f"{PROVISIONER}.toml", url, actors)
