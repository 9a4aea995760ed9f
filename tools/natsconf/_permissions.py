"""What each actor may publish and subscribe to on the broker: least privilege, per role.

Identity on the bus comes from the subject (an actor publishes only on `submit.<itself>`) and
only the gate writes `deliver.*`, so these permissions are what makes DESIGN.md's guarantees
hold against a misbehaving actor, not a convention. Every grant names one stream, one
consumer, one bucket key or one subject family; nobody gets `>`, `_INBOX.>` or `$JS.API.>`.

The roles, by actor id: `gate`, `router`, `auditor`, `cli` (a person, as is any
`person-<name>`), `console` (the web console's own process: it acts for people only as each
person, with that person's own credentials, so its own user just beats and reads the policy
bundle, which it checks before a session starts), `a2a` (the A2A edge:
likewise for its clients, and it reads the policy bundle), `relay` (the
shared-agent relay, in an account of its own), `provisioner`,
`policy-signer` (`parley policy publish`), `audit-cli` (`parley audit`, `trace`, `tail`),
`artifacts-cli` (`parley artifacts`: the tool runtime's stored files, read-only) and
`operator` (a person reading everything with the nats CLI, `_operator.py`) are fixed ids; any
other id is an agent. The JetStream subjects are the ones nats-py uses for what the
runtime does (bus/_consumer.py, bus/_deadletter.py, bus/_heartbeat.py, bus/_provision.py):

- a durable pull consumer: read with `CONSUMER.MSG.NEXT`, acked on
  `$JS.ACK.<stream>.<durable>.>`, looked at with `CONSUMER.INFO`. Receivers on PARLEY_DELIVER
  (agents, the router, the CLI) may not create theirs: `parley provision` does, and they bind
  (`create_consumers = false`). Whoever creates a consumer chooses its `deliver_subject`, and
  a push consumer republishes what it reads on that subject wherever anyone listens, into
  any stream that captures it, past the creator's publish permissions. The gate and the
  auditor create their own, on `$JS.API.CONSUMER.CREATE.<stream>.<name>.<filter>` (the server
  checks the filter against the request);
- a KV get is `$JS.API.DIRECT.GET.KV_<bucket>...`, a put is a JetStream publish on
  `$KV.<bucket>.<key>`, opening a bucket is `STREAM.INFO.KV_<bucket>`, a watch or key listing
  is an ephemeral consumer (`CONSUMER.CREATE.KV_<bucket>`, no name: ephemerals only);
- every reply (JetStream acks, API answers, pushed messages) comes back under the actor's own
  inbox prefix `_INBOX_<actor>`; no actor answers requests, so none needs `allow_responses`.
  Nobody subscribes to anything else but max-deliveries advisories (which the mover checks
  came from the server), so no subject outside an inbox has a listener a push consumer could
  feed.

Accounts: what the broker writes on a principal's behalf
-------------------------------------------------------
nats-server checks a publish against the publisher's permissions, but not the reply subject of
a request it answers itself: a JetStream API answer, a publish acknowledgement, an ack's
confirmation and the messages a pull request asks for all go to whatever reply subject the
requester chose, and a stream that captures that subject stores them. Within one account any
principal could therefore have the server write on `parley.submit.<someone else>`,
`parley.audit.>` or `$KV.<bucket>.<key>`. So only the trusted actors (the gate, the router,
the auditor and the provisioner, `TRUSTED_ROLES`) share the account that holds JetStream
(`CORE_ACCOUNT`); every other principal (each agent, each person) is alone in an account of
its own, which has no JetStream and no subjects but what it imports:

- every subject of its grants is a *service* the core account exports to that account alone
  and it imports (JetStream API subjects under `IMPORTED_JS_API` instead of `$JS.API`, so
  they do not collide with the server's own "JetStream not enabled" responder); a request
  crosses into the core account, and its answer comes back into the principal's account on
  its reply subject there, where nothing but its own imports lead anywhere, and those are
  subjects it may publish on anyway;
- what it may read live (a person follows the timelines of the sessions it opened,
  `parley.events.<itself>.*`, and the gate's decisions on what it sent) is a *stream* the
  core account exports to it: read-only, it cannot publish back through it, and another
  person's timelines are not exported to it at all. Of what is stored, a person reads only
  the last event of a timeline of its own (`Grants.own_last_events`).

Moving an exhausted message to PARLEY_DEAD means reading and deleting it by sequence
(`STREAM.MSG.GET`, `STREAM.MSG.DELETE`), which on PARLEY_DELIVER would let one receiver read
and delete every other receiver's messages. Receivers therefore do not get them: the gate,
which wrote those messages in the first place, moves every receiver's exhausted deliveries
(`move_exhausted_of = ["deliver"]` in its settings) and files each under the receiver's name.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from bus import AGENT_BUCKETS, ARTIFACTS, BUCKETS, RETIRED_BUCKETS, STREAM_FAMILIES
from schemas import Namespace, check_token
from tools.natsconf._artifacts import artifact_grants
from tools.natsconf._edge import A2A, a2a_grants, console_grants
from tools.natsconf._grants import ADVISORY, JS_API, Grants
from tools.natsconf._operator import OPERATOR, operator_denies, operator_grants
from tools.natsconf._relay import relay_grants

__all__ = (
    "A2A",
    "ARTIFACT_READER",
    "AUDIT_READER",
    "CONSOLE",
    "CORE_ACCOUNT",
    "FIXED_ROLES",
    "IMPORTED_JS_API",
    "LLM",
    "OPERATOR",
    "OPERATOR_ROLES",
    "PERSON_PREFIX",
    "POLICY_SIGNER",
    "PROVISIONER",
    "RELAY",
    "TOOLS",
    "TRUSTED_ROLES",
    "Permissions",
    "account_of",
    "core_subject",
    "permissions_for",
    "role_of",
    "settings_for",
)

PROVISIONER = "provisioner"
PERSON_PREFIX = "person-"
POLICY_SIGNER = "policy-signer"
AUDIT_READER = "audit-cli"
ARTIFACT_READER = "artifacts-cli"
CONSOLE = "console"
TOOLS = "tools"
LLM = "llm"
OPERATOR_ROLES = (POLICY_SIGNER, AUDIT_READER, ARTIFACT_READER, OPERATOR)
RELAY = "relay"
FIXED_ROLES = (
    "gate",
    "router",
    "auditor",
    "cli",
    CONSOLE,
    A2A,
    RELAY,
    TOOLS,
    LLM,
    PROVISIONER,
    *OPERATOR_ROLES,
)
TRUSTED_ROLES = ("gate", "router", "auditor", TOOLS, LLM, PROVISIONER)
"""The tool runtime is trusted like the gate: it acts on the host for every agent, and what it
runs never holds its credentials (actors/tools/: a command sees only the environment its
settings name). The LLM gateway likewise serves every agent and holds the provider keys,
which no agent's credentials reach (actors/llm/)."""
CORE_ACCOUNT = "PARLEY"
IMPORTED_JS_API = "$JS.PARLEY.API"
_STREAM_ADMIN = ("CREATE", "UPDATE", "DELETE", "PURGE")


@dataclass(frozen=True, slots=True)
class Permissions:
    """One user's nats-server permissions: allow lists (everything else is refused) plus
    explicit denies of what must never be granted by mistake (deny wins in nats-server)."""

    publish_allow: tuple[str, ...]
    subscribe_allow: tuple[str, ...]
    publish_deny: tuple[str, ...] = field(default=())
    subscribe_deny: tuple[str, ...] = field(default=())
    account: str = CORE_ACCOUNT
    stream_imports: tuple[str, ...] = field(default=())
    """Core subjects an account principal receives live (read-only), beside its inbox."""

    @property
    def imports_services(self) -> tuple[str, ...]:
        """The core subjects an account principal reaches: every publish grant but its inbox."""
        if self.account == CORE_ACCOUNT:
            return ()
        return tuple(s for s in self.publish_allow if not s.startswith("_INBOX"))

    def to_config(self) -> dict[str, object]:
        """The `permissions` block of a nats-server user, in its own account's subjects."""
        publish: dict[str, list[str]] = {"allow": [self.local(s) for s in self.publish_allow]}
        if self.publish_deny:
            publish["deny"] = [self.local(s) for s in self.publish_deny]
        subscribe: dict[str, list[str]] = {"allow": [*self.subscribe_allow, *self.stream_imports]}
        if self.subscribe_deny:
            subscribe["deny"] = list(self.subscribe_deny)
        return {"publish": publish, "subscribe": subscribe}

    def local(self, subject: str) -> str:
        """`subject` as this principal names it in its own account (the imported JS API)."""
        if self.account != CORE_ACCOUNT and subject.startswith(f"{JS_API}."):
            return IMPORTED_JS_API + subject[len(JS_API) :]
        return subject


def core_subject(local: str) -> str:
    """The core account's subject for a subject an account principal publishes on."""
    if local.startswith(f"{IMPORTED_JS_API}."):
        return JS_API + local[len(IMPORTED_JS_API) :]
    return local


def account_of(actor: str) -> str:
    """The account `actor` logs in to: the core account for trusted actors, else its own."""
    return CORE_ACCOUNT if role_of(actor) in TRUSTED_ROLES else f"principal-{actor}"


def role_of(actor: str) -> str:
    """The role of an actor id: one of FIXED_ROLES, `cli` (a person) for `person-<name>`,
    else `agent`. Each person at a terminal is a principal of its own: `cli` is one,
    `person-alice` another, each in an account of its own with its own credentials."""
    check_token(actor, "actor id")
    if actor.startswith(PERSON_PREFIX):
        return "cli"
    return actor if actor in FIXED_ROLES else "agent"


def _actor_grants(g: Grants, role: str, serves: Sequence[str] = ()) -> None:
    ns, me = g.ns, g.actor
    if role not in (CONSOLE, A2A):  # they submit nothing as themselves, only as each person
        g.pub(ns.submit(me))
    g.pub(ns.dead(me))  # its own letters, bounded on this one subject (docs/quotas.md)
    if role in TRUSTED_ROLES:  # to count the letters its own push out (bus/_deadletter.py)
        g.pub(f"{JS_API}.STREAM.INFO.{ns.stream('dead')}")
    if role in ("gate", "router", TOOLS, LLM):  # `Actor.files_by_sender`: deliveries from many
        g.pub(f"{ns.root}.dead.*.{me}")  # a delivery's letter under its sender, bounded there
    g.write_keys("registry", f"heartbeat.{me}")
    if role not in ("agent", "cli"):  # an agent's marks are in its own bucket; a person has none
        g.handling_marks()
    if role in ("agent", "router", "cli", TOOLS, LLM):
        g.bind("deliver")  # provisioned for it; exhausted deliveries are the gate's to move
    elif role == RELAY:
        relay_grants(g, serves)
    if role == "cli":
        g.own_pending_approvals()
        g.own_last_events()
    if role == "agent":
        g.write_keys("registry", f"profile.{me}")
        # Calls to other agents (actors/delegation/): its waits, in a bucket of its own, and
        # reminders of their deadlines to itself.
        for spec in AGENT_BUCKETS:
            g.own_bucket(spec.name)
        # In a stream of its own: in the shared one, reminders it never took filled it for
        # the router and the tool runtime too.
        g.pub(ns.agent_timers(me))
        g.bind_stream(ns.agent_stream("timers", me))
    elif role == "gate":
        g.durable("submit", ns.wildcard("submit"))
        # Reading PARLEY_SUBMIT by sequence also tells whether a cause it took in is still
        # being decided (actors/gate/_unfinished_causes.py).
        g.move_own_exhausted("submit", delete=True)
        g.pub(ns.wildcard("deliver"), ns.wildcard("decisions"), ns.wildcard("dead"))
        g.pub(ns.wildcard("events"))  # calls between agents, told to the person they work for
        deliver = ns.stream("deliver")  # it moves every receiver's exhausted deliveries
        g.pub(f"{JS_API}.STREAM.MSG.GET.{deliver}", f"{JS_API}.STREAM.MSG.DELETE.{deliver}")
        g.sub(f"{ADVISORY}.{deliver}.*")
        g.read_bucket("traces")
        g.write_keys("traces", ">")
        g.read_bucket("idempotency")  # the envelope ids it decided (actors/gate/_ids.py)
        g.write_keys("idempotency", "id.>")
        g.read_bucket("policy")
        g.write_keys("policy", "trusted", "trusted.>")  # bundles are the signer's to write
        g.read_bucket("registry")
    elif role == A2A:
        a2a_grants(g)
    elif role == CONSOLE:
        console_grants(g)
    elif role == "router":
        g.read_bucket("sessions")
        g.write_keys("sessions", ">")
        g.read_bucket("early_stops")
        g.write_keys("early_stops", ">")
        g.pub(ns.wildcard("events"))
        g.pub(ns.wildcard("standing"))  # how each session stands, readable by its owner
        g.pub(ns.timers(me))  # reminders about its calls, to itself only
        g.bind("timers")
        g.read_bucket("registry")
        g.pending_approvals_of_everyone()
    elif role == TOOLS:
        g.tool_runtime()
        g.pub(ns.wildcard("events"))  # a decision it cannot apply, told to the one who sent it
        artifact_grants(g, write=True)
    elif role == LLM:
        # It verifies the bundle itself and keeps each answer (never answered twice).
        g.read_bucket("policy")
        g.read_bucket("llm_runs")
        g.write_keys("llm_runs", "run.>", "shares.>")  # answers, and whose share they are
        g.session_standings()  # no model call in a session its person ended
        g.pub(ns.wildcard("chunks"))  # streamed answers, each to the principal that asked
        g.pub(ns.wildcard("typing"))  # and their visible text, to the session's person
    elif role == "auditor":
        g.durable("events", None)  # the whole stream, unfiltered or filtered as it likes
        g.pub(f"{JS_API}.CONSUMER.CREATE.{ns.stream('events')}.{me}.>")
        g.move_own_exhausted("events", delete=False)  # a limits stream: copy, never delete
        # Dead letters it only reads and acks: one it cannot audit is never moved again.
        g.durable("dead", ns.wildcard("dead"))
        g.pub(ns.wildcard("audit"))
        g.read_stream(ns.stream("audit"))
        g.own_keys("leases")  # the writer's lease its replicas take from each other


def _operator_grants(g: Grants, role: str) -> None:
    """Operators' tools, each only what its commands do: the signer puts the bundle (the gates
    verify it before they trust it) and reads the policy bucket back; the audit reader gets
    audit records by direct get (no consumer) and the stream's info, and follows live traffic
    through a read-only import."""
    if role == POLICY_SIGNER:
        g.write_keys("policy", "bundle")
        # And read what is stored: `parley up` keeps a bundle someone published and says so
        # (tools/_system_policy.py). Bundles are signed, not secret: every gate reads them.
        g.pub(f"{JS_API}.STREAM.MSG.GET.KV_{g.ns.bucket('policy')}")
    elif role == AUDIT_READER:  # its info too: `audit verify` reads its retention
        audit = g.ns.stream("audit")
        g.pub(f"{JS_API}.DIRECT.GET.{audit}", f"{JS_API}.STREAM.INFO.{audit}")
    elif role == ARTIFACT_READER:
        artifact_grants(g, write=False)


def _provisioner_grants(g: Grants, agents: Sequence[str]) -> None:
    """Every stream and bucket's administration, and each agent's own buckets (`agents`: the
    agents of the config, whose buckets it creates)."""
    ns = g.ns
    streams = [ns.stream(family) for family in STREAM_FAMILIES]
    streams += [f"KV_{ns.bucket(spec.name)}" for spec in BUCKETS]
    streams.append(f"OBJ_{ns.bucket(ARTIFACTS)}")
    for name in RETIRED_BUCKETS:  # made by an earlier release: provisioning deletes them
        g.pub(*(f"{JS_API}.STREAM.{verb}.KV_{ns.bucket(name)}" for verb in ("INFO", "DELETE")))
    for agent in agents:
        if role_of(agent) != "agent":
            raise ValueError(f"{agent} is no agent: it has no buckets of its own")
        streams += [f"KV_{ns.agent_bucket(spec.name, agent)}" for spec in AGENT_BUCKETS]
        streams.append(ns.agent_stream("timers", agent))
        g.pub(f"{JS_API}.CONSUMER.CREATE.{ns.agent_stream('timers', agent)}.>")  # its durable
        g.pub(ns.agent_timers(agent))  # reminders moved into it (below)
    # The reminders an earlier release kept in the shared stream, read, moved into each
    # agent's own and deleted there (bus/_earlier_reminders.py).
    timers = ns.stream("timers")
    g.pub(f"{JS_API}.STREAM.MSG.GET.{timers}", f"{JS_API}.STREAM.MSG.DELETE.{timers}")
    g.pub(f"{JS_API}.INFO", f"{JS_API}.STREAM.NAMES", f"{JS_API}.STREAM.LIST")
    for stream in streams:
        g.pub(*(f"{JS_API}.STREAM.{verb}.{stream}" for verb in ("INFO", *_STREAM_ADMIN)))
        g.pub(
            f"{JS_API}.CONSUMER.NAMES.{stream}",
            f"{JS_API}.CONSUMER.LIST.{stream}",
            f"{JS_API}.CONSUMER.INFO.{stream}.*",
            f"{JS_API}.CONSUMER.DELETE.{stream}.*",
        )
    for family in ("deliver", "timers", "events"):  # every receiver's durables, and the
        g.pub(f"{JS_API}.CONSUMER.CREATE.{ns.stream(family)}.>")  # tool runtime's session ends
    g.pub(f"$KV.{ns.bucket('policy')}.>")  # publishing signed bundles is an operator's act
    g.read_stream(ns.stream("events"))  # the whole timeline is an operator's to read


def permissions_for(
    actor: str, ns: Namespace, serves: Sequence[str] = (), agents: Sequence[str] = ()
) -> Permissions:
    """The permissions of `actor` in namespace `ns`; `serves`: the names a relay reads the
    deliveries of and submits as (its shared agents and the device principals); `agents`:
    the agents whose own buckets the provisioner creates and looks at."""
    role = role_of(actor)
    g = Grants(ns, actor)
    if role == PROVISIONER:
        _provisioner_grants(g, agents)
    elif role == OPERATOR:
        operator_grants(g, agents)
    elif role in OPERATOR_ROLES:
        _operator_grants(g, role)
    else:
        _actor_grants(g, role, serves)
    deny = [] if role == "gate" else [f"{ns.root}.deliver.>"]
    if role != PROVISIONER:
        deny += [f"{JS_API}.STREAM.{verb}.>" for verb in _STREAM_ADMIN]
    if role == OPERATOR:
        deny += operator_denies(ns.root)
    # A person follows its sessions' timelines, the text being written in them and the gate's
    # word on what it sent, live; an agent the text of its own streamed model calls as the
    # gateway sends it.
    follows: tuple[str, ...] = (ns.chunks(actor),) if role == "agent" else ()
    if role == "cli":
        follows = (ns.timelines(actor), ns.typings(actor), ns.decisions(actor))
    elif role in (AUDIT_READER, OPERATOR):
        follows = (f"{ns.root}.>",)  # `parley tail`, `nats sub`: every envelope, live, read-only
    return Permissions(
        publish_allow=tuple(g.publish),
        subscribe_allow=tuple(g.subscribe),
        publish_deny=tuple(deny),
        subscribe_deny=("_INBOX.>",),
        account=account_of(actor),
        stream_imports=follows,
    )


def settings_for(actor: str, ns: Namespace) -> dict[str, object]:
    """The Parley settings an actor runs with under these permissions (besides its seed).

    Streams are the provisioner's; receivers on PARLEY_DELIVER leave their exhausted messages
    to the gate, which moves every receiver's.
    """
    role = role_of(actor)
    values: dict[str, object] = {"actor_id": actor, "namespace": ns.root, "provision": False}
    if role in ("agent", "router", "cli", RELAY, TOOLS, LLM):
        values["create_consumers"] = False
        values["move_exhausted"] = False
    if role == "gate":
        values["move_exhausted_of"] = ["deliver"]
    if role == "agent":  # its quarantine marks, in its own bucket (AGENT_BUCKETS)
        values["marks_bucket"] = ns.agent_bucket("marks", actor)
    if account_of(actor) != CORE_ACCOUNT:
        values["js_api_prefix"] = IMPORTED_JS_API
    return values
