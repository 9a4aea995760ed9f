"""Talking to actors under test the way the gate will: deliver in, read effects out."""

from __future__ import annotations

from nats.aio.msg import Msg
from nats.js import JetStreamContext

from bus import MSG_ID, SENDER
from schemas import AgentResponse, HumanMessage, Namespace, decode_envelope, new_id, utc_now

__all__ = ("PROBE", "Effects", "dead_letters", "deliver", "human")

PROBE = "support.probe:ProbeActor"


def human(text: str) -> HumanMessage:
    return HumanMessage(id=new_id(), created_at=utc_now(), text=text, call_id=new_id())


async def deliver(
    js: JetStreamContext, ns: Namespace, receiver: str, payload: bytes, msg_id: str
) -> int:
    ack = await js.publish(
        ns.deliver(receiver), payload, headers={SENDER: "router", MSG_ID: msg_id}
    )
    return int(ack.seq)


class Effects:
    """Reads an actor's submitted envelopes in order, through a durable pull consumer."""

    def __init__(self, js: JetStreamContext, ns: Namespace, actor: str) -> None:
        self._js, self._ns, self._actor = js, ns, actor

    async def open(self) -> None:
        self._sub = await self._js.pull_subscribe(
            self._ns.submit(self._actor),
            durable=f"test-{self._actor}",
            stream=self._ns.stream("submit"),
        )

    async def next(self, timeout: float = 20.0) -> tuple[dict[str, str], AgentResponse]:
        (msg,) = await self._sub.fetch(1, timeout=timeout)
        await msg.ack_sync()
        envelope = decode_envelope(msg.data)
        assert isinstance(envelope, AgentResponse)
        return dict(msg.headers or {}), envelope

    async def none_left(self) -> bool:
        try:
            await self._sub.fetch(1, timeout=0.3)
        except TimeoutError:
            return True
        return False


async def dead_letters(js: JetStreamContext, ns: Namespace, actor: str, timeout: float) -> Msg:
    """The first dead letter of `actor`, waiting up to `timeout` for it."""
    reader = await js.pull_subscribe(
        ns.dead(actor), durable="dead-reader", stream=ns.stream("dead")
    )
    (letter,) = await reader.fetch(1, timeout=timeout)
    return letter
