"""The shared-agent relay's grants (actors/relay/): what it reads and submits for each name it
serves, and its own bucket."""

from __future__ import annotations

from collections.abc import Sequence

from schemas import check_token
from tools.natsconf._grants import JS_API, Grants

__all__ = ("relay_grants",)


def relay_grants(g: Grants, serves: Sequence[str]) -> None:
    """The relay hosts remote agents here and stands for remote devices (actors/relay/): for
    each name it serves, it reads that name's deliveries (a durable named after it, which the
    provisioner creates, as for any receiver) and submits as that name, and nothing else; its
    state is the relay bucket, which nobody else writes. It beats and writes the registry
    profile in the name of each shared agent it hosts (actors/relay/_presence.py)."""
    ns = g.ns
    for name in serves:
        check_token(name, "relay-served name")
        stream = ns.stream("deliver")
        g.pub(
            ns.submit(name),
            f"{JS_API}.CONSUMER.INFO.{stream}.{name}",
            f"{JS_API}.CONSUMER.MSG.NEXT.{stream}.{name}",
            f"$JS.ACK.{stream}.{name}.>",
        )
        g.write_keys("registry", f"heartbeat.{name}", f"profile.{name}")
    bucket = ns.bucket("relay")
    g.pub(
        f"{JS_API}.STREAM.INFO.KV_{bucket}",
        f"{JS_API}.STREAM.MSG.GET.KV_{bucket}",
        f"{JS_API}.DIRECT.GET.KV_{bucket}.>",
        f"$KV.{bucket}.>",
    )
