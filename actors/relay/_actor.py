"""The shared-agent relay: the host of remote agents here, and the door for remote devices.

On the calling side (Alice) it reads `deliver.<shared name>` for each shared agent the
deployment added (`parley shared add`): the gate already decided the call, so the relay seals
it to the owner's device and stores it on the gateway. On the owning side (Bob) it reads the
gateway, opens each frame (actors/relay/_sealing.py), checks the replay window and the share,
and submits the call through the gate as the principal that stands for the calling device
(`device-<id>`), whose policy decides what it may reach. The owner's agent answers that
principal; the relay reads `deliver.<principal>` and seals the answer back, and the caller's
relay submits it through its gate as the shared agent's answer to the original call.

Nothing is kept only in memory (actors/relay/_store.py): every id is derived from the
envelope or frame it answers, so a relay killed at any point and restarted sends each frame
and submits each envelope under the same id again, which the gateway, the gate and the replay
window each drop.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import ClassVar

from msgspec import UNSET
from msgspec.structs import replace
from nats.aio.msg import Msg
from nats.js.api import PubAck

from actors.relay._gateway import Gateway, frame_msg_id
from actors.relay._keys import DeviceKeys
from actors.relay._options import RelayOptions
from actors.relay._outbound import Outbound, call_ticket, numbered_by_delivery
from actors.relay._presence import SharedPresence
from actors.relay._sealing import FrameError, open_frame, seal_frame
from actors.relay._serving import relay_inputs, served_names
from actors.relay._shares import ShareRefused, find_share, load_shared_agents, load_shares
from actors.relay._store import Forwarded, Numbered, Outgoing, RelayStore
from actors.relay._tickets import TicketRefused, Tickets
from actors.relay._traced import carried, frame_span, frame_traceparent
from actors.relay._translate import (
    RelayRefused,
    answer_for_caller,
    call_for_owner,
    decode_remote,
    session_of,
)
from actors.relay._window import ReplayRefused
from bus import (
    HOP_COUNT,
    MSG_ID,
    TRACEPARENT,
    Actor,
    BusHandle,
    Context,
    DeadLetters,
    Input,
    MessageTooLarge,
    Settings,
    TraceHeaders,
    trace_publish,
    validated_options,
)
from schemas import (
    AgentCall,
    AnyEnvelope,
    Error,
    ErrorCode,
    FrameBody,
    SharedAgent,
    ShareRecord,
    derive_id,
    encode,
    utc_now,
)

__all__ = ("RelayActor",)

log = logging.getLogger("parley.relay")


class RelayActor(Actor):
    """Forward calls to shared agents over the gateway, and remote devices' calls inward."""

    kind: ClassVar[str] = "relay"
    settles_behind: ClassVar[bool] = True

    def __init__(self, settings: Settings) -> None:
        super().__init__(settings)
        self.options = validated_options(RelayOptions, settings.options, "relay")
        self.keys = DeviceKeys.load(Path(self.options.device_dir))
        self.me = self.keys.device_id
        self.tickets = Tickets(self.keys)
        self.relay_dir = Path(self.options.relay_dir)
        self.shared = {s.name: s for s in load_shared_agents(self.relay_dir)}
        self.served = served_names(self.relay_dir, self.me)
        self.gateway = Gateway(
            self.options.gateway_url,
            self.options.gateway_root,
            self.me,
            nkey_seed_file=self.options.gateway_nkey_seed_file,
            ack_wait_s=self.options.gateway_ack_wait_s,
            max_handler_s=settings.max_handler_s,
        )

    def inputs(self) -> Sequence[Input]:
        """A deliver durable per shared agent (calls out) and per device principal (answers
        back), as the provisioner creates them (actors/relay/_serving.py)."""
        return relay_inputs(self.namespace, self.served)

    async def start(self, bus: BusHandle) -> None:
        self.bus = bus
        self.store = RelayStore(await bus.js.key_value(bus.namespace.bucket("relay")))
        self.dead = DeadLetters(
            bus.js, bus.namespace, self.actor_id, bus.settings.max_payload, bus.metrics
        )
        registry = await bus.js.key_value(bus.namespace.bucket("registry"))
        self.presence = SharedPresence(
            registry, self.actor_id, tuple(self.shared.values()), bus.settings.heartbeat_s
        )
        await self.presence.announce()
        await self.gateway.connect()

    async def stop(self) -> None:
        await self.gateway.close()

    async def background(self, stopping: asyncio.Event) -> None:
        async with asyncio.TaskGroup() as tasks:
            tasks.create_task(self.presence.run(stopping))
            await self.gateway.read(self._receive, lambda: not stopping.is_set())

    # -- out: envelopes delivered here go to the gateway ----------------------------------
    async def handle(self, envelope: AnyEnvelope, ctx: Context) -> None:
        """Seal the frame `envelope` becomes and send it; the runtime acks the delivery only
        once the gateway stored it (`Outbox.include`), and handles the next meanwhile
        (`settles_behind`), so frames go out pipelined, in delivery order."""
        frame = await self._outbound(envelope, ctx)
        if frame is not None:
            await self._send(frame)

    async def _outbound(self, envelope: AnyEnvelope, ctx: Context) -> Outbound | None:
        """The frame `envelope` becomes; None if it goes nowhere (dead-lettered, or declined
        with an error to its caller)."""
        receiver = ctx.subject.rsplit(".", 1)[-1]
        payload = ctx.payload or encode(envelope)
        if receiver not in self.shared:
            forwarded = await self.store.forwarded(ctx.causation_id)
            if forwarded is None:
                await self._dead_ctx(ctx, "relay_unknown_call", "answers no call that came in")
                return None
            out = numbered_by_delivery(
                ctx, forwarded.session, forwarded.peer, ticket=forwarded.ticket
            )
            return Outbound(envelope, ctx, out, forwarded.peer_kem, payload, forwarded=forwarded)
        shared = self.shared[receiver]
        if isinstance(envelope, AgentCall):
            session = session_of(envelope, ctx.trace_id)
            peer = shared.device.device_id
            ticket = self.tickets.seal(
                call_ticket(envelope, ctx, shared), peer=peer, session=session, call=envelope.id
            )
            out = numbered_by_delivery(ctx, session, peer, hop_count=ctx.hop_count, ticket=ticket)
            return Outbound(envelope, ctx, out, shared.device.kem_key, payload, shared=shared)
        if isinstance(envelope, Error):
            # The gate refused an answer this relay submitted for the shared agent (the caller
            # was told by the gate itself): nothing goes to the remote side; kept for audit.
            await self._dead_ctx(
                ctx, "relay_answer_refused", f"{envelope.code}: {envelope.message}"
            )
            return None
        kind = envelope.__struct_config__.tag
        why = f"{receiver} is a shared agent: the relay carries agent calls, not {kind}"
        await self._decline(shared, envelope, ctx, why)
        return None

    async def _send(self, frame: Outbound) -> None:
        """Seal and send one numbered frame; its input settles once the gateway stored it."""
        ctx, shared, forwarded = frame.ctx, frame.shared, frame.forwarded
        out = replace(frame.out, traceparent=frame_traceparent(frame, self.actor_id))
        try:
            if shared is not None:
                stored = await self._seal_and_send(
                    out, frame.kem, "call", shared.agent, "", frame.payload
                )
            elif forwarded is not None:
                stored = await self._seal_and_send(
                    out, frame.kem, "answer", "", forwarded.remote_call, frame.payload
                )
            else:
                raise RuntimeError("a frame is either a call or an answer")
        except MessageTooLarge as exc:
            await self._dead_ctx(ctx, "relay_too_large", str(exc))
            if shared is not None:
                await self._decline(shared, frame.envelope, ctx, f"the call is {exc}")
                return
            if forwarded is None:
                raise
            # The caller still gets an answer: an error in its place, small enough to go,
            # under the number the answer would have had (it never reached the gateway).
            refusal = Error(
                id=ctx.derive_id("relay-too-large"),
                created_at=utc_now(),
                code=ErrorCode.INTERNAL_ERROR,
                message=f"{forwarded.agent}'s answer is {exc}",
                cause_id=forwarded.remote_call,
            )
            stored = await self._seal_and_send(
                out, forwarded.peer_kem, "answer", "", forwarded.remote_call, encode(refusal)
            )
        ctx.outbox.include(stored)

    async def _decline(
        self, shared: SharedAgent, envelope: AnyEnvelope, ctx: Context, why: str
    ) -> None:
        """What the relay cannot carry (another kind, a call too large for the gateway): the
        caller gets a typed error at once, as the shared agent's answer, not a timeout."""
        refusal = Error(
            id=ctx.derive_id("relay-declined"),
            created_at=utc_now(),
            code=ErrorCode.INVALID_REQUEST,
            message=why,
            cause_id=envelope.id,
        )
        await ctx.publish(self.namespace.submit(shared.name), refusal, hop_delta=-1)

    async def _seal_and_send(
        self, out: Outgoing, kem: str, kind: str, agent: str, in_reply_to: str, payload: bytes
    ) -> asyncio.Future[PubAck]:
        """Send the frame now; the future resolves once the gateway stored it."""
        body = FrameBody(
            sender_device=self.me,
            recipient_device=out.peer,
            session=out.session,
            seq=out.seq,
            kind="call" if kind == "call" else "answer",
            agent=agent,
            in_reply_to=in_reply_to,
            sent_at_ms=int(time.time() * 1000),
            envelope=payload,
            hop_count=out.hop_count if kind == "call" else 0,
            numbered_by=out.numbered_by,
            ticket=out.ticket,
            traceparent=out.traceparent or UNSET,  # none: the field is absent, as before
        )
        frame = seal_frame(body, self.keys, kem)
        msg_id = frame_msg_id(self.me, out.session, out.seq, out.numbered_by)
        return await self.gateway.send(out.peer, frame, msg_id)

    async def _dead_ctx(self, ctx: Context, reason: str, detail: str) -> None:
        await self.dead.publish(
            payload=ctx.payload,
            headers=ctx.headers,
            subject=ctx.subject,
            stream=ctx.stream,
            seq=ctx.stream_seq,
            attempt=ctx.attempt,
            reason=reason,
            detail=detail,
        )

    # -- in: frames from the gateway are submitted here -----------------------------------
    def _known_senders(self, shares: Sequence[ShareRecord]) -> frozenset[str]:
        devices = {s.device.device_id for s in shares}
        devices |= {s.device.device_id for s in load_shared_agents(self.relay_dir)}
        return frozenset(devices)

    async def _receive(self, msg: Msg) -> None:
        # Read once per frame (a revocation takes effect on the next one) and used for both
        # the sender check and the call's share: each read verifies every share's signature.
        shares = load_shares(self.relay_dir, self.me)
        try:
            body = open_frame(
                msg.data,
                self.keys,
                self._known_senders(shares),
                max_age_s=self.options.max_frame_age_s,
            )
            seq = Numbered(body.seq, body.numbered_by)
            read = await self.store.check_window(body.sender_device, body.session, seq)
            # The sender's span, from the signed body (never the gateway's headers): what is
            # submitted here continues the caller's trace.
            with frame_span(body):
                if body.kind == "call":
                    await self._submit_call(body, shares)
                else:
                    await self._submit_answer(body)
            if not await self.store.mark_window(body.sender_device, body.session, seq, read):
                # Another delivery of this frame (to a replica, while this one was slow) did
                # the same effect and marked it first: done, not a replay.
                log.info("frame already handled", extra={"seq": body.seq})
        except ReplayRefused as exc:
            if msg.metadata.num_delivered > 1:
                await msg.ack_sync()  # our own frame again: handled before a crash, not acked
                return
            await self._dead_frame(msg, f"relay_{exc.reason}", str(exc))
        except ShareRefused as exc:
            await self._dead_frame(msg, f"relay_{exc.reason}", str(exc))
            if exc.share is not None:
                await self._refuse_call(body, exc.share, str(exc))
                # Authentic and answered: a replay of it is refused as one, not answered again.
                numbered = Numbered(body.seq, body.numbered_by)
                await self.store.mark_window(body.sender_device, body.session, numbered)
        except (FrameError, RelayRefused) as exc:
            await self._dead_frame(msg, f"relay_{exc.reason}", str(exc))
        await msg.ack_sync()

    async def _refuse_call(self, body: FrameBody, share: ShareRecord, reason: str) -> None:
        """Tell a device whose share was revoked or expired, so its caller is not left to
        time out: an `error` sealed back as the answer to its call."""
        remote = decode_remote(body.envelope)
        refusal = Error(
            id=derive_id(f"{body.sender_device}:{remote.id}", "relay-refusal"),
            created_at=utc_now(),
            code=ErrorCode.UNAUTHORIZED,
            message=reason,
            cause_id=remote.id,
        )
        draft = Outgoing(seq=0, session=body.session, peer=body.sender_device, ticket=body.ticket)
        out = await self.store.claim_outgoing(refusal.id, draft)
        stored = await self._seal_and_send(
            out, share.device.kem_key, "answer", "", remote.id, encode(refusal)
        )
        await stored

    async def _dead_frame(self, msg: Msg, reason: str, detail: str) -> None:
        meta = msg.metadata
        await self.dead.publish(
            payload=msg.data,
            headers=None,
            subject=msg.subject,
            stream=f"gateway:{meta.stream}",
            seq=meta.sequence.stream,
            attempt=meta.num_delivered,
            reason=reason,
            detail=detail,
        )

    async def _submit_call(self, body: FrameBody, shares: Sequence[ShareRecord]) -> None:
        now = datetime.now(UTC)
        share = find_share(shares, body.sender_device, body.agent, now)
        remote = decode_remote(body.envelope)
        call = call_for_owner(remote, body.sender_device, share.principal, share.agent)
        await self.store.record_forwarded(
            call.id,
            Forwarded(
                peer=body.sender_device,
                peer_kem=share.device.kem_key,
                session=body.session,
                remote_call=remote.id,
                principal=share.principal,
                agent=share.agent,
                ticket=body.ticket,
                traced=bool(carried(body)),
            ),
        )
        # The calling side's hop, one deeper for the call it becomes here: the gate takes it
        # as the floor of this root's chain, so a loop through both deployments meets
        # maxHopCount (actors/gate/_routes.py `claimed_hop_floor`).
        hop = str(body.hop_count + 1)
        subject, payload = self.bus.namespace.submit(share.principal), encode(call)
        headers = {MSG_ID: call.id, HOP_COUNT: hop}
        if carried(body):
            headers[TRACEPARENT] = carried(body)
            trace_publish(subject, payload, headers)  # under the frame's span, when tracing
        await self.bus.js.publish(subject, payload, headers=headers)

    async def _submit_answer(self, body: FrameBody) -> None:
        try:
            caller = self.tickets.open(
                body.ticket, peer=body.sender_device, session=body.session, call=body.in_reply_to
            )
        except TicketRefused as exc:
            raise RelayRefused(
                "unsolicited_answer", f"answers no call this relay sent that device: {exc}"
            ) from None
        if caller.shared not in self.shared:
            raise RelayRefused("unsolicited_answer", f"{caller.shared} is no longer shared here")
        answer = answer_for_caller(decode_remote(body.envelope), body.in_reply_to, caller)
        position = TraceHeaders(
            trace_id=caller.trace_id,
            hop_count=max(0, caller.hop_count - 1),
            causation_id=body.in_reply_to,
            origin=caller.origin,
            deadline_ms=caller.deadline_ms,
        )
        subject, payload = self.bus.namespace.submit(caller.shared), encode(answer)
        headers = position.to_headers(answer.id)
        if carried(body):  # the answering side's span, sealed in its frame
            headers[TRACEPARENT] = carried(body)
        trace_publish(subject, payload, headers)  # in the caller's trace, when tracing
        await self.bus.js.publish(subject, payload, headers=headers)
        log.info("answer submitted", extra={"shared": caller.shared, "id": answer.id})
