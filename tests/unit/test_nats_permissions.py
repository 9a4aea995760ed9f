"""Lint of the generated broker permissions: the rules of least privilege, checked on the file.

The checks read `authorization.conf` and `actors.json` as written (the committed example in
deploy/nats/ and a fresh one for another namespace and other agents), not the generator's
Python objects, so a hand edit of the file is caught too. Subjects are compared the way
nats-server does, token by token, wildcards included: an allow entry "reaches" a subject
family when some subject matches both, so `>` or `$JS.>` cannot slip past a literal check.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest

from schemas import Namespace
from tools.natsconf import DEFAULT_ACTORS, read_accounts, write_nats_config
from tools.natsconf._permissions import (
    AUDIT_READER,
    CORE_ACCOUNT,
    OPERATOR,
    PROVISIONER,
    TRUSTED_ROLES,
    core_subject,
    role_of,
)

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "deploy" / "nats"
PUBLIC_USER_KEY = re.compile(r"U[A-Z2-7]{55}")
USER_SEED = re.compile(r"SU[A-Z2-7]{56}")


def overlaps(a: str, b: str) -> bool:
    """Whether some subject matches both patterns (NATS wildcards `*` and `>`)."""
    left, right = a.split("."), b.split(".")
    for x, y in zip(left, right, strict=False):
        if x == ">" or y == ">":
            return True  # both still have a token here, and `>` takes one or more
        if x != y and "*" not in (x, y):
            return False
    return len(left) == len(right)


def covers(a: str, b: str) -> bool:
    """Whether every subject matching `b` matches `a`."""
    left, right = a.split("."), b.split(".")
    for i, x in enumerate(left):
        if x == ">":
            return i < len(right)
        if i >= len(right) or right[i] == ">":
            return False
        if x not in ("*", right[i]):
            return False
    return len(left) == len(right)


def literal_head(entry: str) -> int:
    """How many leading tokens of a JetStream or KV grant must be literal: up to and including
    the stream (and consumer) it names, so a wildcard can never widen it to other streams."""
    tokens = entry.split(".")
    if entry.startswith("$JS.API."):
        if tokens[2:5] in (["STREAM", "MSG", "GET"], ["STREAM", "MSG", "DELETE"]):
            return 6
        if tokens[2:5] == ["CONSUMER", "MSG", "NEXT"]:
            return 7
        return 5 if tokens[2] in ("STREAM", "CONSUMER", "DIRECT") else len(tokens)
    if entry.startswith("$JS.ACK."):
        return 4
    if entry.startswith("$JS.EVENT.ADVISORY."):
        return 6
    if entry.startswith(("$JS.FC.", "$KV.")):
        return 3 if entry.startswith("$JS.FC.") else 2
    return 0


def test_subject_algebra() -> None:
    assert overlaps(">", "_INBOX.x") and overlaps("*.>", "_INBOX.>")
    assert overlaps("$JS.API.*.INFO.*", "$JS.API.STREAM.INFO.X")
    assert not overlaps("parley.submit.gpt", "parley.deliver.>")
    assert not overlaps("a.b", "a.b.c") and not overlaps("a.b.c", "a.*")
    assert covers(">", "_INBOX.>") and covers("$JS.>", "$JS.API.>") and covers("a.*", "a.b")
    assert not covers("$JS.API.*", "$JS.API.>") and not covers("a.b", "a.*")
    assert not covers("_INBOX_gpt.>", "_INBOX.>")


@dataclass(frozen=True)
class User:
    """One principal's reach into the core account, where every stream lives: for an agent or
    a person, the subjects of its own account translated through its imports."""

    actor: str
    role: str
    publish: tuple[str, ...]
    subscribe: tuple[str, ...]
    publish_deny: tuple[str, ...]
    account: str = CORE_ACCOUNT
    follows: tuple[str, ...] = ()  # core subjects it receives live through stream imports

    def publishes(self, family: str) -> list[str]:
        return [entry for entry in self.publish if overlaps(entry, family)]

    def subscribes(self, family: str) -> list[str]:
        return [entry for entry in self.subscribe if overlaps(entry, family)]


def _imports(account: dict[str, Any]) -> tuple[dict[str, str], list[str]]:
    """An account's service imports (local subject -> core subject) and stream imports from
    the core account (what it follows there)."""
    services, streams = {}, []
    for entry in account.get("imports", []):
        if "service" in entry:
            assert entry["service"]["account"] == CORE_ACCOUNT, entry
            services[entry["to"]] = entry["service"]["subject"]
        elif entry["stream"]["account"] == CORE_ACCOUNT:
            streams.append(entry["stream"]["subject"])
    return services, streams


def _peer_streams(account: dict[str, Any]) -> list[tuple[str, str]]:
    """An account's stream imports from other principals' accounts: (account, subject)."""
    return [
        (entry["stream"]["account"], entry["stream"]["subject"])
        for entry in account.get("imports", [])
        if "stream" in entry and entry["stream"]["account"] != CORE_ACCOUNT
    ]


def _check_peer_streams(accounts: dict[str, dict[str, Any]]) -> None:
    """A follower imports from another principal's account only what that principal itself
    publishes (through its own service import), exported to the follower, and what the
    follower may subscribe to (tools/natsconf/_follows.py)."""
    for name, account in accounts.items():
        for peer, subject in _peer_streams(account):
            exported = {e["stream"]: e["accounts"] for e in accounts[peer].get("exports", [])}
            assert name in exported.get(subject, ()), (name, peer, subject)
            assert subject in _imports(accounts[peer])[0], (peer, subject)
            (user,) = account["users"]
            assert any(covers(s, subject) for s in user["permissions"]["subscribe"]["allow"])


def load_users(directory: Path) -> list[User]:
    manifest = json.loads((directory / "actors.json").read_text())
    by_key = {entry["nkey"]: (actor, entry["role"]) for actor, entry in manifest.items()}
    accounts = read_accounts(directory / "authorization.conf")
    _check_peer_streams(accounts)
    exports = {
        (kind, entry[kind]): set(entry["accounts"])
        for entry in accounts[CORE_ACCOUNT]["exports"]
        for kind in ("service", "stream")
        if kind in entry
    }
    users = []
    for name, account in accounts.items():
        services, streams = _imports(account)
        if name == CORE_ACCOUNT:
            # JetStream within limits that bound everything any principal stores (issue 30).
            limits = account["jetstream"]
            assert limits["max_bytes_required"] is True and not services and not streams
            assert all(limits[key] > 0 for key in ("max_file", "max_streams", "max_consumers"))
        else:
            assert "jetstream" not in account and len(account["users"]) == 1, name
        for raw in account["users"]:
            assert set(raw) == {"nkey", "permissions"}, raw.keys()
            actor, role = by_key.pop(raw["nkey"])  # every user is a known actor, once
            assert PUBLIC_USER_KEY.fullmatch(raw["nkey"]), raw["nkey"]
            assert manifest[actor]["account"] == name, actor
            perms = raw["permissions"]
            publish = tuple(perms["publish"]["allow"])
            subscribe = tuple(perms["subscribe"]["allow"])
            if name != CORE_ACCOUNT:
                # What it may publish reaches the core account only through an import, each
                # exported to this account alone (a grant without one would reach nothing).
                local = [s for s in publish if not s.startswith("_INBOX")]
                assert sorted(local) == sorted(services), actor
                for subject in services.values():
                    assert name in exports[("service", subject)], (actor, subject)
                for subject in streams:
                    assert name in exports[("stream", subject)], (actor, subject)
                    assert subject in subscribe, (actor, subject)
                publish = tuple(core_subject(s) for s in publish)
                subscribe = tuple(s for s in subscribe if s not in streams)
            users.append(
                User(
                    actor,
                    role,
                    publish,
                    subscribe,
                    tuple(core_subject(s) for s in perms["publish"].get("deny", ())),
                    name,
                    tuple(streams),
                )
            )
    assert not by_key, f"actors without a user: {by_key}"
    for (kind, subject), to in exports.items():  # nothing is exported to a stranger
        for name in to:
            services, streams = _imports(accounts[name])
            assert subject in (services.values() if kind == "service" else streams), subject
    return users


@pytest.fixture(
    params=["example", "generated"],
    ids=["committed example", "fresh, other namespace"],
)
def config(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[Namespace, list[User]]:
    if request.param == "example":
        return Namespace("parley"), load_users(EXAMPLE)
    ns = Namespace("acme-prod")
    actors = ["gate", "router", "auditor", "cli", "person-bob", "a1", "b-2", "c_3", "audit-cli"]
    actors.append("operator")
    write_nats_config(tmp_path, actors, ns)
    return ns, load_users(tmp_path)


def test_every_actor_and_role_is_present(config: tuple[Namespace, list[User]]) -> None:
    _, users = config
    roles = {user.role for user in users}
    assert {"gate", "router", "auditor", "cli", PROVISIONER, "agent"} <= roles
    assert len([u for u in users if u.role == "agent"]) >= 2


def test_nobody_gets_everything(config: tuple[Namespace, list[User]]) -> None:
    ns, users = config
    too_wide = [">", "*.>", "_INBOX.>", "$JS.>", "$JS.API.>", "$JS.API.*", "$JS.API.STREAM.>"]
    too_wide += ["$JS.API.CONSUMER.>", "$JS.API.DIRECT.>", "$JS.ACK.>", "$KV.>", f"{ns.root}.>"]
    for user in users:
        for entry in user.publish + user.subscribe:
            wide = [w for w in too_wide if covers(entry, w)]
            assert not wide, f"{user.actor}: {entry!r} covers {wide}"
            head = entry.split(".")[: literal_head(entry)]
            assert "*" not in head and ">" not in head, f"{user.actor}: {entry!r}"
        for stray in ("x", "x.y", "_INBOX.abc", "$SYS.REQ.SERVER.PING", "$JS.API.ACCOUNT.x"):
            reached = [e for e in user.publish + user.subscribe if overlaps(e, stray)]
            assert not reached, (user.actor, stray, reached)


def test_only_the_gate_publishes_deliveries(config: tuple[Namespace, list[User]]) -> None:
    ns, users = config
    deliver = f"{ns.root}.deliver.>"
    writers = {u.actor for u in users if u.publishes(deliver)}
    assert writers == {"gate"}
    for user in users:
        if user.actor != "gate":
            assert any(covers(d, deliver) for d in user.publish_deny), user.actor


def test_only_the_provisioner_manages_streams(config: tuple[Namespace, list[User]]) -> None:
    _, users = config
    for verb in ("CREATE", "UPDATE", "DELETE", "PURGE"):
        family = f"$JS.API.STREAM.{verb}.>"
        assert {u.actor for u in users if u.publishes(family)} == {PROVISIONER}, verb
        for user in users:
            if user.role != PROVISIONER:
                assert any(covers(d, family) for d in user.publish_deny), (user.actor, verb)
    # Consumers are deleted only by the provisioner too: a receiver deleting another's durable
    # would throw away its delivery state.
    deleters = {u.actor for u in users if u.publishes("$JS.API.CONSUMER.DELETE.>")}
    assert deleters == {PROVISIONER}


def test_the_provisioner_may_move_an_agents_earlier_reminders(
    config: tuple[Namespace, list[User]],
) -> None:
    """bus/_earlier_reminders.py: read and delete a reminder in the shared stream, publish it
    into the agent's own; no other principal but the gate deletes a stored message."""
    ns, users = config
    (provisioner,) = [u for u in users if u.role == PROVISIONER]
    timers = ns.stream("timers")
    for agent in (u.actor for u in users if u.role == "agent"):
        assert provisioner.publishes(ns.agent_timers(agent)), agent
    assert provisioner.publishes(f"$JS.API.STREAM.MSG.GET.{timers}")
    assert provisioner.publishes(f"$JS.API.STREAM.MSG.DELETE.{timers}")
    others = {u.actor for u in users if u.publishes(f"$JS.API.STREAM.MSG.DELETE.{timers}")}
    assert others == {PROVISIONER}, others


def test_agents_publish_only_as_themselves(config: tuple[Namespace, list[User]]) -> None:
    ns, users = config
    for user in users:
        if user.role in ("agent", "router", "cli", "auditor", "gate"):
            me = user.actor
            assert user.publishes(f"{ns.root}.submit.>") == [f"{ns.root}.submit.{me}"], me
        if user.role != "agent":
            continue
        me = user.actor
        assert sorted(user.publishes(f"{ns.root}.>")) == sorted(
            # Its own dead letters on one subject only, bounded there (docs/quotas.md).
            # Its reminders in a stream of its own, never the router's and tool runtime's.
            [f"{ns.root}.submit.{me}", f"{ns.root}.dead.{me}.{me}", ns.agent_timers(me)]
        )
        registry = f"$KV.{ns.bucket('registry')}"
        waits, marks = ns.agent_bucket("waits", me), ns.agent_bucket("marks", me)
        assert sorted(user.publishes("$KV.>")) == sorted(
            [
                f"{registry}.heartbeat.{me}",
                f"{registry}.profile.{me}",
                # Its quarantine marks in its own bucket: in the shared one, filling them
                # stopped every actor's marks, the gate's and the router's included.
                f"$KV.{marks}.>",
                f"$KV.{waits}.>",  # its waits for the agents it called, in its own bucket
            ]
        )
        assert not user.publishes(f"$KV.{ns.bucket('handling')}.>")
        # Its own waits bucket, opened and read key by key; no other agent's (issue 30).
        assert sorted(user.publishes(f"$JS.API.*.*.KV_{ns.bucket('waits')}_{me}.>")) == [
            f"$JS.API.DIRECT.GET.KV_{waits}.$KV.{waits}.>"
        ]
        assert user.publishes(f"$JS.API.STREAM.INFO.KV_{waits}") == [
            f"$JS.API.STREAM.INFO.KV_{waits}"
        ]
        for other in users:
            if other.role == "agent" and other.actor != me:
                theirs = ns.agent_bucket("waits", other.actor)
                for family in (
                    f"$KV.{theirs}.>",
                    f"$JS.API.*.*.KV_{theirs}",
                    f"$JS.API.*.*.*.KV_{theirs}.>",
                ):
                    assert not user.publishes(family), (me, family)


def test_the_provisioner_makes_each_agents_own_buckets(
    config: tuple[Namespace, list[User]],
) -> None:
    """Agents may not create streams, so each one's waits bucket is the provisioner's to make
    and bound; nobody else manages any of them."""
    ns, users = config
    agents = [user.actor for user in users if user.role == "agent"]
    (provisioner,) = [user for user in users if user.role == PROVISIONER]
    for agent in agents:
        bucket = f"KV_{ns.agent_bucket('waits', agent)}"
        for verb in ("INFO", "CREATE", "UPDATE"):
            assert provisioner.publishes(f"$JS.API.STREAM.{verb}.{bucket}"), (agent, verb)
        for user in users:
            if user.role != PROVISIONER:
                assert not user.publishes(f"$JS.API.STREAM.CREATE.{bucket}"), user.actor
    # The shared waits bucket of an earlier release: the provisioner deletes it, nobody uses it.
    retired = f"KV_{ns.bucket('waits')}"
    assert provisioner.publishes(f"$JS.API.STREAM.DELETE.{retired}")
    assert not any(u.publishes(f"$KV.{ns.bucket('waits')}.>") for u in users)
    assert not provisioner.publishes(f"$JS.API.STREAM.CREATE.{retired}")


def test_receivers_read_only_their_own_deliveries(config: tuple[Namespace, list[User]]) -> None:
    ns, users = config
    deliver = ns.stream("deliver")
    for user in users:
        me = user.actor
        if user.role in ("agent", "router", "cli", "tools", "llm"):
            assert user.publishes(f"$JS.API.CONSUMER.MSG.NEXT.{deliver}.>") == [
                f"$JS.API.CONSUMER.MSG.NEXT.{deliver}.{me}"
            ]
            assert user.publishes(f"$JS.ACK.{deliver}.>") == [f"$JS.ACK.{deliver}.{me}.>"]
            # Provisioned for it: it only binds (see test_untrusted_actors_create_no_durable).
            assert not user.publishes(f"$JS.API.CONSUMER.CREATE.{deliver}.>"), me
        elif user.role != "gate":
            assert not user.publishes(f"$JS.API.CONSUMER.MSG.NEXT.{deliver}.>"), me
            assert not user.publishes(f"$JS.ACK.{deliver}.>"), me
        if user.role != "gate":
            # Reading or deleting by sequence or subject reaches every receiver's messages:
            # only the operator, who reads everything and deletes nothing, may read them.
            for api in ("STREAM.MSG.GET", "STREAM.MSG.DELETE", "DIRECT.GET", "STREAM.INFO"):
                if user.role == PROVISIONER and api == "STREAM.INFO":
                    continue
                if user.role == OPERATOR and api != "STREAM.MSG.DELETE":
                    continue
                assert not user.publishes(f"$JS.API.{api}.{deliver}.>"), (me, api)
                assert not user.publishes(f"$JS.API.{api}.{deliver}"), (me, api)
            assert not user.publishes(f"$JS.API.CONSUMER.DURABLE.CREATE.{deliver}.>"), me
            assert not user.publishes(f"$JS.API.CONSUMER.CREATE.{deliver}"), me
        assert not user.subscribes(f"{ns.root}.deliver.>"), me


def test_each_actor_has_its_own_inbox(config: tuple[Namespace, list[User]]) -> None:
    ns, users = config
    for user in users:
        mine = f"{ns.inbox_prefix(user.actor)}.>"
        assert mine in user.subscribe
        assert not user.subscribes("_INBOX.>"), user.actor
        assert not user.publishes("_INBOX.>"), user.actor
        for other in users:
            if other.actor != user.actor:
                theirs = f"{ns.inbox_prefix(other.actor)}.>"
                assert not user.subscribes(theirs), (user.actor, other.actor)
                assert not user.publishes(theirs), (user.actor, other.actor)
        inboxes = [e for e in user.subscribe if e.startswith("_INBOX")]
        assert inboxes == [mine], user.actor


def test_untrusted_actors_create_no_durable(config: tuple[Namespace, list[User]]) -> None:
    """Whoever creates a consumer picks where a push consumer republishes what it reads, past
    its own publish permissions: agents and persons create none; the router only ephemeral
    ones on streams it may read whole (the API subject without a name makes an ephemeral)."""
    _, users = config
    for user in users:
        creates = user.publishes("$JS.API.CONSUMER.CREATE.>") + user.publishes(
            "$JS.API.CONSUMER.DURABLE.CREATE.>"
        )
        if user.role in ("agent", "cli", OPERATOR):
            assert not creates, user.actor
        elif user.role == "router":
            assert all(len(entry.split(".")) == 5 for entry in creates), (user.actor, creates)


def test_nobody_listens_where_a_push_consumer_could_write(
    config: tuple[Namespace, list[User]],
) -> None:
    """Subscriptions only on one's own inbox and on the server's max-deliveries advisories,
    which nobody may publish: no other subject has a listener to feed."""
    _, users = config
    for user in users:
        assert not user.publishes("$JS.EVENT.>"), user.actor
        for entry in user.subscribe:
            assert entry == f"_INBOX_{user.actor}.>" or entry.startswith(
                "$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES."
            ), (user.actor, entry)


def test_only_the_auditor_writes_the_audit_trail(config: tuple[Namespace, list[User]]) -> None:
    ns, users = config
    audit = f"{ns.root}.audit.>"
    assert {u.actor for u in users if u.publishes(audit)} == {"auditor"}
    events = f"{ns.root}.events.>"
    # The router tells sessions' timelines; the gate tells them the calls agents make; the
    # tool runtime answers a person's decision it cannot apply (actors/tools/_decisions.py).
    writers = {"router", "gate", "tools"} & {u.actor for u in users}
    assert {u.actor for u in users if u.publishes(events)} == writers
    decisions = f"{ns.root}.decisions.>"
    assert {u.actor for u in users if u.publishes(decisions)} == {"gate"}


def test_the_auditor_reads_dead_letters_but_never_moves_them(
    config: tuple[Namespace, list[User]],
) -> None:
    """Its durable on PARLEY_DEAD, filtered to dead letters, is read and acked; nothing lets
    it get, copy or watch them, which is how a dead letter could be dead-lettered again."""
    ns, users = config
    (auditor,) = (u for u in users if u.actor == "auditor")
    dead = ns.stream("dead")
    consumers = [e for e in auditor.publishes("$JS.API.CONSUMER.>") if dead in e.split(".")]
    assert set(consumers) == {
        f"$JS.API.CONSUMER.CREATE.{dead}.auditor.{ns.root}.dead.*.*",
        f"$JS.API.CONSUMER.INFO.{dead}.auditor",
        f"$JS.API.CONSUMER.MSG.NEXT.{dead}.auditor",
    }
    assert auditor.publishes(f"$JS.ACK.{dead}.>") == [f"$JS.ACK.{dead}.auditor.>"]
    assert not auditor.publishes(f"$JS.API.STREAM.MSG.*.{dead}")
    assert not auditor.publishes(f"$JS.API.DIRECT.GET.{dead}.>")
    assert not auditor.subscribes(f"$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.{dead}.>")


def test_a_dead_letter_names_its_sender_only_when_a_trusted_actor_files_it(
    config: tuple[Namespace, list[User]],
) -> None:
    """A trusted actor whose deliveries come from many senders files one it gives up on under
    the sender the gate named in it (bus/_deadletter.py), always as itself (the audit record's
    profile is the last token); any other writes its own one subject: an agent or a person
    could otherwise spread letters past every bound."""
    ns, users = config
    for user in users:
        me, role = user.actor, role_of(user.actor)
        dead = sorted(user.publishes(f"{ns.root}.dead.>"))
        if role == "gate":
            assert f"{ns.root}.dead.*.*" in dead  # it moves every receiver's
        elif role in ("router", "tools", "llm"):  # `Actor.files_by_sender`
            assert dead == sorted([ns.dead(me), f"{ns.root}.dead.*.{me}"]), me
        elif dead:
            assert dead == [ns.dead(me)], me


def test_only_trusted_actors_share_the_account_that_holds_jetstream(
    config: tuple[Namespace, list[User]],
) -> None:
    """The server writes its answers on whatever reply subject a request names, past the
    requester's publish permissions; only an account of its own keeps an agent's or a
    person's reply subjects from reaching a stream (tools/natsconf/_permissions.py)."""
    ns, users = config
    for user in users:
        if user.role in TRUSTED_ROLES:
            assert user.account == CORE_ACCOUNT, user.actor
        else:
            assert user.account not in (CORE_ACCOUNT, *(u.account for u in users if u != user))
        # What it follows live, read-only: a person its timelines, the text being written in
        # them and its own decisions; the
        # audit reader (`parley tail`) everything; an agent the text of its own streamed model
        # calls; nobody else anything.
        if user.role == "cli":
            follows = {ns.timelines(user.actor), ns.typings(user.actor), ns.decisions(user.actor)}
            assert set(user.follows) == follows
        elif user.role in (AUDIT_READER, OPERATOR):
            assert user.follows == (f"{ns.root}.>",)
        elif user.role == "agent":
            assert user.follows == (ns.chunks(user.actor),), user.actor
        else:
            assert not user.follows, user.actor


def test_the_example_is_marked_and_holds_no_seed() -> None:
    for path in EXAMPLE.iterdir():
        if path.is_file():
            assert not USER_SEED.search(path.read_text()), f"{path.name} holds a seed"
    assert "EXAMPLE ONLY" in (EXAMPLE / "authorization.conf").read_text()
    assert "EXAMPLE ONLY" in (EXAMPLE / "nats-server.conf").read_text()
    assert "sync_interval: always" in (EXAMPLE / "nats-server.conf").read_text()


def _mutated(users: list[User], actor: str, publish: str = "", subscribe: str = "") -> list[User]:
    out = []
    for user in users:
        if user.actor == actor:
            extra_pub = (publish,) if publish else ()
            extra_sub = (subscribe,) if subscribe else ()
            user = replace(
                user, publish=user.publish + extra_pub, subscribe=user.subscribe + extra_sub
            )
        out.append(user)
    return out


LINTS = {
    "create": test_untrusted_actors_create_no_durable,
    "listen": test_nobody_listens_where_a_push_consumer_could_write,
    "nobody": test_nobody_gets_everything,
    "deliver": test_only_the_gate_publishes_deliveries,
    "streams": test_only_the_provisioner_manages_streams,
    "as-self": test_agents_publish_only_as_themselves,
    "own-deliveries": test_receivers_read_only_their_own_deliveries,
    "inbox": test_each_actor_has_its_own_inbox,
    "audit": test_only_the_auditor_writes_the_audit_trail,
    "accounts": test_only_trusted_actors_share_the_account_that_holds_jetstream,
}


@pytest.mark.parametrize(
    ("actor", "publish", "subscribe", "lint"),
    [
        ("gpt", "", ">", "nobody"),
        ("gpt", "$JS.>", "", "nobody"),
        ("router", "$JS.API.*.*.T", "", "nobody"),
        ("cli", "$KV.*.heartbeat.gpt", "", "nobody"),
        ("gpt", "parley.deliver.claude", "", "deliver"),
        ("router", "parley.*.router", "", "deliver"),
        ("auditor", "$JS.API.STREAM.PURGE.PARLEY_AUDIT", "", "streams"),
        ("gate", "$JS.API.CONSUMER.DELETE.PARLEY_DELIVER.claude", "", "streams"),
        ("gpt", "parley.submit.claude", "", "as-self"),
        ("gpt", "$KV.parley_registry.heartbeat.claude", "", "as-self"),
        ("gpt", "$KV.parley_waits_claude.>", "", "as-self"),
        ("gpt", "$JS.API.DIRECT.GET.KV_parley_waits_claude.>", "", "as-self"),
        ("gpt", "$JS.API.STREAM.INFO.KV_parley_waits_claude", "", "as-self"),
        ("gpt", "$JS.API.CONSUMER.MSG.NEXT.PARLEY_DELIVER.claude", "", "own-deliveries"),
        ("claude", "$JS.API.STREAM.MSG.GET.PARLEY_DELIVER", "", "own-deliveries"),
        ("gpt", "$JS.API.CONSUMER.DURABLE.CREATE.PARLEY_DELIVER.gpt", "", "own-deliveries"),
        ("gpt", "", "_INBOX_claude.>", "inbox"),
        ("gate", "", "_INBOX.>", "inbox"),
        ("router", "parley.audit.t.p", "", "audit"),
        ("gpt", "$JS.API.CONSUMER.CREATE.PARLEY_EVENTS", "", "create"),
        ("operator", "$JS.API.CONSUMER.CREATE.KV_parley_registry.x.>", "", "create"),
        ("operator", "$JS.API.STREAM.MSG.DELETE.PARLEY_DELIVER", "", "own-deliveries"),
        ("cli", "$JS.API.CONSUMER.CREATE.PARLEY_EVENTS.cli.parley.events.*.*", "", "create"),
        ("router", "", "parley.events.cli.s1", "listen"),
        ("gpt", "$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.PARLEY_DELIVER.gpt", "", "listen"),
    ],
)
def test_the_lint_catches_a_widened_grant(
    actor: str, publish: str, subscribe: str, lint: str
) -> None:
    """Each rule fails on the committed example with one grant too many added by hand."""
    ns, users = Namespace("parley"), load_users(EXAMPLE)
    LINTS[lint]((ns, users))  # passes as committed
    with pytest.raises(AssertionError):
        LINTS[lint]((ns, _mutated(users, actor, publish, subscribe)))


def test_the_example_matches_the_generator(tmp_path: Path) -> None:
    """The committed example is what `parley nats-config --example` writes today, keys aside."""
    write_nats_config(tmp_path, DEFAULT_ACTORS, Namespace("parley"), example=True)
    for name in ("authorization.conf", "actors.json", "nats-server.conf"):
        fresh, committed = (
            PUBLIC_USER_KEY.sub("U…", (d / name).read_text()) for d in (tmp_path, EXAMPLE)
        )
        assert fresh == committed, (
            f"deploy/nats/{name} is stale: run `parley nats-config --out deploy/nats --example`"
        )


def test_who_follows_everything_sees_what_agents_and_people_publish(tmp_path: Path) -> None:
    """nats-server passes nothing that came in through a service import on to a stream
    export: the operator and the audit reader see an agent's or a person's own subjects
    only because that principal's account exports them to them (tools/natsconf/_follows.py);
    a person, who follows only its own timelines, gets nobody's."""
    ns = Namespace("acme-prod")
    write_nats_config(tmp_path, ["gate", "cli", "person-bob", "gpt", "operator", "audit-cli"], ns)
    accounts = read_accounts(tmp_path / "authorization.conf")
    for follower in ("operator", "audit-cli"):
        seen = set(_peer_streams(accounts[f"principal-{follower}"]))
        for who in ("cli", "person-bob", "gpt"):
            assert (f"principal-{who}", ns.submit(who)) in seen, (follower, who)
            assert (f"principal-{who}", ns.dead(who)) in seen, (follower, who)
        assert ("principal-gpt", ns.agent_timers("gpt")) in seen
    for person in ("cli", "person-bob"):
        assert not _peer_streams(accounts[f"principal-{person}"]), person


def test_the_router_reads_held_approval_lists_and_nothing_else_of_the_tool_runs(
    config: tuple[Namespace, list[User]],
) -> None:
    """The router moves a call's deadline past a held approval (actors/router/_approval_wait.py)
    from its owner's list: a direct get of `pending.<owner>`, never a step's record (the held
    request itself, its arguments), nor a scan of the bucket."""
    ns, users = config
    (router,) = [u for u in users if u.role == "router"]
    runs = ns.bucket("tool_runs")
    direct = f"$JS.API.DIRECT.GET.KV_{runs}"
    assert router.publishes(f"{direct}.$KV.{runs}.pending.person-alice")
    for elsewhere in (
        f"{direct}.$KV.{runs}.run.0a1b",
        f"{direct}.$KV.{runs}.approval.0a1b",
        direct,
        f"$JS.API.STREAM.MSG.GET.KV_{runs}",
        f"$JS.API.CONSUMER.CREATE.KV_{runs}",
        f"$KV.{runs}.pending.person-alice",
    ):
        assert not router.publishes(elsewhere), elsewhere
