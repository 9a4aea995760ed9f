"""Moving messages that cannot be processed to `PARLEY_DEAD`, with the reason.

Two ways in: the runtime dead-letters at once what can never succeed (bytes that do not decode,
malformed headers) and what failed on its last allowed delivery; and the max-deliveries
advisory catches a message whose handler never finished at all (the actor crashed on it every
time), which would otherwise sit in a work-queue stream for ever.

A dead letter keeps the original payload (truncated to fit if needed) and headers, and adds
`Parley-Dead-*` headers saying why, from where, and at which delivery. Its `Nats-Msg-Id` is the
source stream and sequence, so replicas that dead-letter the same message store it once.

Moving a message out of a stream takes reading and deleting it by sequence, which on a shared
stream (PARLEY_DELIVER) would let an actor read and delete other actors' messages. Under the
least-privilege broker config (deploy/nats/) receivers therefore leave their exhausted
deliveries to the gate, which watches every consumer of that stream and files each dead letter
under the receiver's name; a message of a limits stream (PARLEY_EVENTS) is copied, never
deleted, since other readers still need it.

Bounded per sender (docs/quotas.md): a dead letter's subject is `dead.<sender>.<actor>`, the
sender being whoever submitted the message (the token of its `submit` subject), or for a
delivery filed by a trusted actor whose deliveries come from many senders (gate, router, tool
runtime, LLM gateway: `Actor.files_by_sender`) the sender the gate named in it, or else the
filer itself;
PARLEY_DEAD keeps at most `dead_letters_per_sender` per subject, dropping the oldest. One
sender's garbage therefore drops only that sender's older dead letters. A trusted filer (an
actor of the core account: gate, router, auditor, tool runtime, LLM gateway) counts each letter
its publish pushes out (`parley_dead_letters_dropped_total`) and logs it, naming the sender.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Mapping, Sequence

from nats.aio.client import Client as NATS
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from nats.js import JetStreamContext
from nats.js.errors import NotFoundError

from bus._headers import MSG_ID, SENDER
from bus._metrics import ActorMetrics
from bus._settings import Settings
from schemas import Namespace, SubjectTokenError, check_token

__all__ = (
    "DEAD_ACTOR",
    "DEAD_ATTEMPT",
    "DEAD_DETAIL",
    "DEAD_REASON",
    "DEAD_SEQ",
    "DEAD_STREAM",
    "DEAD_SUBJECT",
    "DEAD_TRUNCATED",
    "DeadLetters",
    "dead_letters_for",
)

log = logging.getLogger("parley.bus.dead")

DEAD_REASON = "Parley-Dead-Reason"
DEAD_DETAIL = "Parley-Dead-Detail"
DEAD_STREAM = "Parley-Dead-Stream"
DEAD_SEQ = "Parley-Dead-Seq"
DEAD_SUBJECT = "Parley-Dead-Subject"
DEAD_ATTEMPT = "Parley-Dead-Attempt"
DEAD_ACTOR = "Parley-Dead-Actor"
DEAD_TRUNCATED = "Parley-Dead-Truncated"
"""Set when the payload was cut to fit: the original's size in bytes."""
_HEADER_ROOM = 8 * 1024
_ADVISORY = "$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES"
_ADVISORY_TYPE = "io.nats.jetstream.advisory.v1.max_deliver"


_HEADER_KEY = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]{1,64}")


def _copyable(key: str) -> bool:
    """Whether an original header may travel with the dead letter.

    `Nats-*` headers are instructions to JetStream (expected stream, expected sequence,
    rollup…) that would make it refuse the dead letter itself, and a key nats-py would reject
    would make the publish fail: either way the message could never leave its work queue.
    """
    return (
        _HEADER_KEY.fullmatch(key) is not None
        and not key.lower().startswith("nats-")
        and not key.startswith("Parley-Dead-")
    )


def _header_safe(text: str, limit: int = 1024) -> str:
    """Header values may not hold CR/LF; keep them short and printable."""
    cleaned = "".join(ch if ch.isprintable() else " " for ch in text)
    return cleaned[:limit]


class DeadLetters:
    """Publishes dead letters for one actor."""

    def __init__(
        self,
        js: JetStreamContext,
        ns: Namespace,
        actor_id: str,
        max_payload: int,
        metrics: ActorMetrics,
        *,
        trusted: bool = False,
        by_sender: bool = False,
    ) -> None:
        """`trusted`: the filer is an actor of the core account, which may look at PARLEY_DEAD
        to count the letters its own push out. `by_sender`: it files a delivery under the
        sender the gate named in it, which a trusted actor's grants allow
        (`parley.dead.*.<actor>`, tools/natsconf/_permissions.py); an agent or a person may
        write only its own subject: were it let name the sender, it could spread its letters
        over subjects without end, past every bound."""
        self._js = js
        self._ns = ns
        self._actor_id = actor_id
        self._max_payload = max_payload
        self._metrics = metrics
        self._trusted = trusted
        self._by_sender = trusted and by_sender

    def _sender_of(self, subject: str, headers: Mapping[str, str] | None, actor: str) -> str:
        """The principal a dead letter is bounded under: the sender of a submission (the
        broker let only it publish on its `submit` subject); for a trusted filer, the sender
        of a delivery (its `Parley-Sender`, which the gate alone writes on `deliver`
        subjects: a person's refused controls filed by the router drop that person's older
        letters, not everyone's); else the actor filing it."""
        submit, deliver = f"{self._ns.root}.submit.", f"{self._ns.root}.deliver."
        token: str | None = None
        if subject.startswith(submit):
            token = subject[len(submit) :]
        elif self._by_sender and subject.startswith(deliver):
            token = (headers or {}).get(SENDER)
        if token and "." not in token:
            try:
                return check_token(token, "sender")
            except SubjectTokenError:
                pass
        return actor

    async def _drops_one(self, subject: str) -> bool:
        """Whether storing one more letter on `subject` drops its oldest: its count is at the
        stream's per-subject bound. Unknown (False) when the stream cannot be looked at."""
        if not self._trusted:
            return False
        try:
            info = await self._js.stream_info(self._ns.stream("dead"), subjects_filter=subject)
        except Exception as exc:
            log.debug("could not look at the dead-letter stream", extra={"error": repr(exc)})
            return False
        bound = info.config.max_msgs_per_subject
        held = (info.state.subjects or {}).get(subject, 0)
        return bound is not None and bound > 0 and held >= bound

    async def publish(
        self,
        *,
        payload: bytes,
        headers: Mapping[str, str] | None,
        subject: str,
        stream: str,
        seq: int,
        attempt: int,
        reason: str,
        detail: str,
        owner: str | None = None,
    ) -> None:
        """Store one dead letter and wait for JetStream to acknowledge it.

        `owner` files it under another actor (the receiver whose consumer gave up on it) instead
        of this one.
        """
        actor = self._actor_id if owner is None else check_token(owner, "consumer")
        out = {key: _header_safe(value) for key, value in (headers or {}).items() if _copyable(key)}
        out.update(
            {
                MSG_ID: f"dead:{stream}:{seq}",
                DEAD_REASON: reason,
                DEAD_DETAIL: _header_safe(detail),
                DEAD_STREAM: stream,
                DEAD_SEQ: str(seq),
                DEAD_SUBJECT: _header_safe(subject, 256),
                DEAD_ATTEMPT: str(attempt),
                DEAD_ACTOR: actor,
            }
        )
        room = self._max_payload - _HEADER_ROOM
        if len(payload) > room:
            out[DEAD_TRUNCATED] = str(len(payload))
            payload = payload[:room]
        sender = self._sender_of(subject, headers, actor)
        subject = self._ns.dead(actor, sender)
        drops = await self._drops_one(subject)
        stored = await self._js.publish(subject, payload, headers=out)
        if not stored.duplicate:  # the same dead letter written again after a crash: once
            self._metrics.dead_lettered.labels(self._actor_id, reason).inc()
        if drops:
            self._metrics.dead_letters_dropped.labels(self._actor_id, sender).inc()
            log.warning(
                "dropped the oldest dead letter of a sender at its quota",
                extra={"sender": sender, "filed_under": actor, "subject": subject},
            )
        log.warning(
            "dead-lettered a message",
            extra={"reason": reason, "detail": detail[:300], "stream": stream, "seq": seq},
        )

    async def watch_max_deliveries(
        self, nc: NATS, stream: str, durable: str | None, *, remove: bool = True
    ) -> Subscription:
        """Dead-letter messages of `stream`/`durable` that exhausted their deliveries.

        Args:
            nc: the connection to subscribe on.
            stream: the stream the consumer reads.
            durable: the consumer, or None for every consumer of the stream (each dead letter
                is then filed under the consumer's name).
            remove: delete the message from `stream` once its dead letter is stored (work
                queues, where it would otherwise sit for ever); False copies it only.
        """

        async def on_advisory(msg: Msg) -> None:
            if msg.reply:
                # The server publishes advisories without a reply subject. A message with one
                # is a push consumer's delivery, which an actor allowed to create consumers
                # could aim here to have other receivers' messages moved.
                log.warning("ignored a max-deliveries advisory the server did not send")
                return
            try:
                advisory = json.loads(msg.data)
                if advisory["type"] != _ADVISORY_TYPE or advisory["stream"] != stream:
                    raise ValueError(f"not a max-deliveries advisory of {stream}")
                if durable is not None and advisory["consumer"] != durable:
                    raise ValueError(f"not a max-deliveries advisory of {durable}")
                seq = int(advisory["stream_seq"])
                deliveries = int(advisory.get("deliveries", 0))
                owner = None if durable is not None else str(advisory["consumer"])
            except (ValueError, KeyError, TypeError):
                log.warning("unreadable max-deliveries advisory", extra={"data": msg.data[:200]})
                return
            await self._move_exhausted(stream, seq, deliveries, owner, remove)

        consumer = "*" if durable is None else durable
        return await nc.subscribe(f"{_ADVISORY}.{stream}.{consumer}", cb=on_advisory)

    async def _move_exhausted(
        self, stream: str, seq: int, deliveries: int, owner: str | None, remove: bool
    ) -> None:
        try:
            stored = await self._js.get_msg(stream, seq)
        except NotFoundError:
            return  # already moved by another replica, or acked in the end
        except Exception:
            log.exception("could not read an exhausted message", extra={"seq": seq})
            return
        try:
            await self.publish(
                payload=stored.data or b"",
                headers=stored.headers,
                subject=stored.subject or "",
                stream=stream,
                seq=seq,
                attempt=deliveries,
                reason="max_deliveries",
                detail=f"not acknowledged after {deliveries} deliveries",
                owner=owner,
            )
            if remove:
                await self._js.delete_msg(stream, seq)
                log.warning("moved an exhausted message out of its stream", extra={"seq": seq})
        except NotFoundError:
            return
        except SubjectTokenError:
            log.warning("advisory names an invalid consumer", extra={"owner": owner, "seq": seq})
            return
        except Exception:
            # Left in place: the message stays in its stream, nothing is lost.
            log.exception("could not move an exhausted message", extra={"seq": seq})


def dead_letters_for(
    js: JetStreamContext,
    ns: Namespace,
    actor_id: str,
    settings: Settings,
    metrics: ActorMetrics,
    *,
    by_sender: bool = False,
) -> DeadLetters:
    """An actor's dead letters as its settings say: an actor of the core account (its
    JetStream API the server's own, `$JS.API`) is trusted to look at PARLEY_DEAD and counts the
    letters its own push out, and, if it is one that `by_sender` (`Actor.files_by_sender`),
    files a delivery under its sender; an agent or a person files only on its own subject."""
    trusted = settings.js_api_prefix == "$JS.API"
    return DeadLetters(
        js, ns, actor_id, settings.max_payload, metrics, trusted=trusted, by_sender=by_sender
    )


async def watch_exhausted(
    nc: NATS,
    dead: DeadLetters,
    ns: Namespace,
    settings: Settings,
    inputs: Sequence[tuple[str, str]],
) -> None:
    """Watch for messages that exhausted their deliveries: an actor's own on its `inputs`
    (stream, durable), unless it leaves them to a more trusted actor (`move_exhausted`), and
    every consumer's of the stream families it was told to look after (`move_exhausted_of`)."""
    work_queues = {ns.stream("submit"), ns.stream("deliver")}
    dead_stream = ns.stream("dead")
    if settings.move_exhausted:
        for stream, durable in inputs:
            if stream == dead_stream:
                continue  # a dead letter is never dead-lettered again (bus/_failures.py)
            await dead.watch_max_deliveries(nc, stream, durable, remove=stream in work_queues)
    for family in settings.move_exhausted_of:
        stream = ns.stream(family)
        if stream == dead_stream:
            log.warning("not moving exhausted dead letters: they would loop back")
            continue
        await dead.watch_max_deliveries(nc, stream, None, remove=stream in work_queues)
