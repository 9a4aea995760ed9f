"""One principal's grants, accumulated by what it does with streams, consumers and buckets.

`_permissions.py` says which principal does what; each method here is the subjects one such
act needs on the broker (nats-py's JetStream API subjects, `$KV.<bucket>.<key>` for a put),
so a grant is written once, the same for every principal that needs it.
"""

from __future__ import annotations

from schemas import Namespace

__all__ = ("ADVISORY", "JS_API", "Grants")

JS_API = "$JS.API"
ADVISORY = "$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES"


class Grants:
    """Accumulates one actor's grants, in order and without repeats."""

    def __init__(self, ns: Namespace, actor: str) -> None:
        self.ns = ns
        self.actor = actor
        self.publish: list[str] = []
        self.subscribe: list[str] = [f"{ns.inbox_prefix(actor)}.>"]

    def pub(self, *subjects: str) -> None:
        self.publish.extend(s for s in subjects if s not in self.publish)

    def sub(self, *subjects: str) -> None:
        self.subscribe.extend(s for s in subjects if s not in self.subscribe)

    def bind(self, family: str) -> None:
        """Look at, read and ack this actor's own durable (named after it) on a stream."""
        self.bind_stream(self.ns.stream(family))

    def bind_stream(self, stream: str) -> None:
        """`bind` on a stream named in full (an agent's own: `Namespace.agent_stream`)."""
        name = self.actor
        self.pub(
            f"{JS_API}.CONSUMER.INFO.{stream}.{name}",
            f"{JS_API}.CONSUMER.MSG.NEXT.{stream}.{name}",
            f"$JS.ACK.{stream}.{name}.>",
        )

    def durable(self, family: str, filter_subject: str | None) -> None:
        """Create (or update) and bind this actor's own durable: trusted actors only, since a
        consumer's creator chooses where a push consumer republishes what it reads."""
        create = f"{JS_API}.CONSUMER.CREATE.{self.ns.stream(family)}.{self.actor}"
        self.pub(create if filter_subject is None else f"{create}.{filter_subject}")
        self.bind(family)

    def move_own_exhausted(self, family: str, *, delete: bool) -> None:
        """Dead-letter this actor's own exhausted messages of a stream it may read whole."""
        stream = self.ns.stream(family)
        self.pub(f"{JS_API}.STREAM.MSG.GET.{stream}")
        if delete:
            self.pub(f"{JS_API}.STREAM.MSG.DELETE.{stream}")
        self.sub(f"{ADVISORY}.{stream}.{self.actor}")

    def read_stream(self, stream: str) -> None:
        """Look up, get by sequence or subject, and follow (ephemeral consumers) a stream."""
        self.pub(
            f"{JS_API}.STREAM.INFO.{stream}",
            f"{JS_API}.STREAM.MSG.GET.{stream}",
            f"{JS_API}.DIRECT.GET.{stream}",
            f"{JS_API}.DIRECT.GET.{stream}.>",
            f"{JS_API}.CONSUMER.CREATE.{stream}",
            f"{JS_API}.CONSUMER.INFO.{stream}.*",  # nats-py looks at the one it created
            f"$JS.FC.{stream}.>",
        )

    def handling_marks(self) -> None:
        """Mark, read and clear its own quarantine marks of redelivered inputs in hand
        (bus/_quarantine.py), and no other actor's: in a bucket of their own, so filling its
        marks up to the bucket's quota stops nobody's admissions."""
        bucket = self.ns.bucket("handling")
        marks = f"$KV.{bucket}.handling.{self.actor}.>"
        self.pub(
            f"{JS_API}.STREAM.INFO.KV_{bucket}", marks, f"{JS_API}.DIRECT.GET.KV_{bucket}.{marks}"
        )

    def own_bucket(self, name: str) -> None:
        """Open, write and read, key by key, its own bucket `name` (`Namespace.agent_bucket`),
        and no other agent's: a bucket bounded on its own, which it can fill only for itself."""
        bucket = self.ns.agent_bucket(name, self.actor)
        keys = f"$KV.{bucket}.>"
        self.pub(
            f"{JS_API}.STREAM.INFO.KV_{bucket}", keys, f"{JS_API}.DIRECT.GET.KV_{bucket}.{keys}"
        )

    def own_keys(self, name: str) -> None:
        """Write and read, key by key, the keys of bucket `name` under its own name only."""
        bucket = self.ns.bucket(name)
        keys = f"$KV.{bucket}.{self.actor}.>"
        self.pub(
            f"{JS_API}.STREAM.INFO.KV_{bucket}", keys, f"{JS_API}.DIRECT.GET.KV_{bucket}.{keys}"
        )

    def read_bucket(self, name: str) -> None:
        self.read_stream(f"KV_{self.ns.bucket(name)}")

    def write_keys(self, name: str, *keys: str) -> None:
        """Put keys (a JetStream publish on `$KV.<bucket>.<key>`); opening needs STREAM.INFO."""
        bucket = self.ns.bucket(name)
        self.pub(f"{JS_API}.STREAM.INFO.KV_{bucket}", *(f"$KV.{bucket}.{key}" for key in keys))

    def own_pending_approvals(self) -> None:
        """A person reads the list of tool requests held for them (actors/tools/_pending.py),
        by a direct get of that one key: no other person's list, and nothing else of the
        bucket (no stream info: not even how many steps the runtime keeps)."""
        runs = self.ns.bucket("tool_runs")
        self.pub(f"{JS_API}.DIRECT.GET.KV_{runs}.$KV.{runs}.pending.{self.actor}")

    def own_last_events(self) -> None:
        """A person reads the last event stored on a timeline of its own (`parley collab
        --follow` and `--stop` of a session that may have ended, tools/_stored_events.py): by
        a direct get whose own subject names the timeline. The server reads the subject from
        there and refuses a body that asks for any other (a sequence, a next or last subject,
        a batch), so nothing of another person's timelines and nothing before a session's
        last event; the bare `DIRECT.GET.<stream>`, whose body names the subject, stays out."""
        events = self.ns.stream("events")
        self.pub(f"{JS_API}.DIRECT.GET.{events}.{self.ns.timelines(self.actor)}")
        # And how each of its sessions stands, which nothing told after its end can hide.
        self.pub(f"{JS_API}.DIRECT.GET.{events}.{self.ns.standings(self.actor)}")

    def pending_approvals_of_everyone(self) -> None:
        """The router reads a session owner's list of held tool requests, to move the
        deadline of a call that waits on one (actors/router/_approval_wait.py): by a direct
        get of `pending.<owner>` keys only, nothing else of the bucket."""
        runs = self.ns.bucket("tool_runs")
        self.pub(f"{JS_API}.DIRECT.GET.KV_{runs}.$KV.{runs}.pending.*")

    def session_standings(self) -> None:
        """Read how each session stands, its last message only (bus/_session_ends.py): the
        tool runtime and the LLM gateway do nothing more in a session its person ended."""
        events = self.ns.stream("events")
        self.pub(f"{JS_API}.DIRECT.GET.{events}.{self.ns.wildcard('standing')}")

    def tool_runtime(self) -> None:
        """The tool runtime verifies the bundle itself (reading the floor, never raising it)
        and keeps each step's run, so a redelivered request is answered from it; and each
        person's list of the requests held for them (actors/tools/_pending.py), and what each
        person and agent keeps in the artifact store and in the step records
        (bus/_shares.py)."""
        self.read_bucket("policy")
        self.read_bucket("tool_runs")
        self.session_standings()
        self.write_keys("tool_runs", "run.>", "approval.>", "pending.>", "usage.>", "records.>")
        self.pub(self.ns.timers(self.actor))  # reminders of held requests' expiry, to itself
        self.bind("timers")
        self.bind("events")  # how sessions stand: what an ended one held is let go
