"""A Parley connection's `flush()` is a barrier: the server has every command sent before it
(bus/_barrier_client.py). With nats-py's own flush the PING went to the socket ahead of a SUB
still in its buffer, so a subscriber could miss what another connection published right after
its flush returned."""

from __future__ import annotations

from nats.aio.client import Client as NATS

from bus import EmbeddedServer, Settings, connect


async def test_a_subscription_is_on_the_wire_before_the_flush_ping(
    nats_server: EmbeddedServer,
) -> None:
    nc = await connect(Settings(nats_url=nats_server.url), "barrier-test")
    try:
        sent: list[bytes] = []
        transport = nc._transport
        assert transport is not None
        write, writelines = transport.write, transport.writelines

        def record(data: bytes) -> None:
            sent.append(bytes(data))
            write(data)

        def record_lines(lines: list[bytes]) -> None:
            sent.extend(bytes(line) for line in lines)
            writelines(lines)

        transport.write = record  # type: ignore[method-assign,assignment]
        transport.writelines = record_lines  # type: ignore[method-assign,assignment]
        await nc.subscribe("barrier.test")
        await nc.flush()
        wire = b"".join(sent)
        assert wire.index(b"SUB barrier.test") < wire.index(b"PING"), wire
    finally:
        await nc.close()


async def test_what_is_published_right_after_the_flush_is_received(
    nats_server: EmbeddedServer, nc: NATS
) -> None:
    subscriber = await connect(Settings(nats_url=nats_server.url), "barrier-test")
    try:
        for round_no in range(50):
            sub = await subscriber.subscribe(f"barrier.round.{round_no}")
            await subscriber.flush()
            await nc.publish(f"barrier.round.{round_no}", b"x")
            await nc.flush()
            assert (await sub.next_msg(timeout=5)).data == b"x", round_no
            await sub.unsubscribe()
    finally:
        await subscriber.close()
