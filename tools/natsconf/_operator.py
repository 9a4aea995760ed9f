"""The `operator` role: a person who reads everything on the bus with the nats CLI, and writes
nothing.

What it gets, each a read the nats CLI makes (docs/nats-cli.md lists the commands):

- the account's and every stream's and bucket's description (`$JS.API.INFO`,
  `STREAM.NAMES`, `STREAM.LIST`, `STREAM.INFO.<stream>`): `nats stream ls`, `stream info`,
  `kv ls`, `kv info`, `account info`;
- every consumer's description (`CONSUMER.NAMES`, `CONSUMER.LIST`, `CONSUMER.INFO`):
  `nats consumer ls`, `consumer info`;
- any stored message by sequence or by subject (`STREAM.MSG.GET`, `DIRECT.GET`), which
  creates no consumer and takes nothing from a work queue: `nats stream get`, `kv get`;
- every Parley subject live, submissions included, as a read-only stream import (as the audit
  reader has for `parley tail`): `nats sub 'parley.>'`.

What it does not get is any consumer, not even the ephemeral ordered ones `nats stream view`
(on a limits stream), `kv watch`, `kv history` and `kv ls <bucket>` create. nats-server checks
nothing of a consumer create request but its subject: the subject the nats CLI uses,
`CONSUMER.CREATE.<stream>.<name>.<filter>` with a random name, creates a durable just as well
when the body names one (server/jetstream_api.go, `ccNew`), and every form takes a
`deliver_subject` the server pushes the stream's messages to inside the core account, checked
against no permission of the requester (server/consumer.go, `checkConsumerCfg`: literal, and
not the stream's own subjects, is all). A consumer of the registry bucket pushing onto
`parley.deliver.<agent>` would put whatever an agent wrote as its profile in front of another
agent, past the gate. On a work-queue stream (submit, deliver, timers) a consumer with
explicit acks whose filter overlaps no other takes messages away from their receiver. So a
grant of consumer creation is a grant to write, and the operator reads without one.
"""

from __future__ import annotations

from collections.abc import Sequence

from bus import AGENT_BUCKETS, ARTIFACTS, BUCKETS, STREAM_FAMILIES
from tools.natsconf._grants import JS_API, Grants

__all__ = ("OPERATOR", "operator_denies", "operator_grants", "operator_streams")

OPERATOR = "operator"


def operator_streams(g: Grants, agents: Sequence[str]) -> list[str]:
    """Every stream and bucket of the namespace (the artifacts' object store too), and each
    agent's own buckets and reminders stream."""
    ns = g.ns
    streams = [ns.stream(family) for family in STREAM_FAMILIES]
    streams += [f"KV_{ns.bucket(spec.name)}" for spec in BUCKETS]
    streams.append(f"OBJ_{ns.bucket(ARTIFACTS)}")
    for agent in agents:
        streams += [f"KV_{ns.agent_bucket(spec.name, agent)}" for spec in AGENT_BUCKETS]
        streams.append(ns.agent_stream("timers", agent))
    return streams


def operator_grants(g: Grants, agents: Sequence[str]) -> None:
    """Look at every stream, bucket and consumer, and get any stored message: no consumer."""
    g.pub(f"{JS_API}.INFO", f"{JS_API}.STREAM.NAMES", f"{JS_API}.STREAM.LIST")
    for stream in operator_streams(g, agents):
        g.pub(
            f"{JS_API}.STREAM.INFO.{stream}",
            f"{JS_API}.STREAM.MSG.GET.{stream}",
            f"{JS_API}.DIRECT.GET.{stream}",
            f"{JS_API}.DIRECT.GET.{stream}.>",  # the last message of a subject: `kv get`
            f"{JS_API}.CONSUMER.NAMES.{stream}",
            f"{JS_API}.CONSUMER.LIST.{stream}",
            f"{JS_API}.CONSUMER.INFO.{stream}.*",
        )


def operator_denies(root: str) -> list[str]:
    """What must never be granted to it by mistake (deny wins in nats-server): any Parley
    subject, any key, any consumer's creation or deletion, any message's deletion."""
    return [
        f"{root}.>",
        "$KV.>",
        f"{JS_API}.CONSUMER.CREATE.>",
        f"{JS_API}.CONSUMER.DURABLE.CREATE.>",
        f"{JS_API}.CONSUMER.DELETE.>",
        f"{JS_API}.STREAM.MSG.DELETE.>",
        "$JS.ACK.>",
    ]
