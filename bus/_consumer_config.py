"""The durable pull consumer an actor reads an input through, and checking a provisioned one.

An actor that may create its consumers creates exactly this configuration; one that may not
(least privilege) binds only to a consumer `parley provision` made the same way, and is
refused at start, with what differs, when an operator's consumer would change what the
runtime relies on (its ack wait, its filter, how often a message is redelivered).
"""

from __future__ import annotations

import math

from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

from bus._actor import Input
from bus._settings import Settings

__all__ = ("ConsumerBindError", "consumer_config", "differences")


class ConsumerBindError(RuntimeError):
    """The actor may not create its consumer, and the provisioned one is missing or differs."""


def consumer_config(spec: Input, settings: Settings) -> ConsumerConfig:
    """The durable pull consumer an actor with `settings` reads `spec` through.

    Naming the consumer as well makes nats-py create it on
    `$JS.API.CONSUMER.CREATE.<stream>.<durable>.<filter>`, a subject the server checks against
    the request, so broker permissions can allow exactly this consumer. It is also what
    `parley provision` creates for actors that may not create their own.
    """
    return ConsumerConfig(
        name=spec.durable,
        durable_name=spec.durable,
        filter_subject=spec.filter_subject,
        ack_policy=AckPolicy.EXPLICIT,
        deliver_policy=DeliverPolicy.NEW if spec.from_now else DeliverPolicy.ALL,
        ack_wait=settings.ack_wait_s,
        max_deliver=settings.max_deliver if spec.max_deliver is None else spec.max_deliver,
        max_ack_pending=spec.max_ack_pending or max(settings.max_in_flight * 4, 256),
        max_waiting=512,
    )


def differences(wanted: ConsumerConfig, found: ConsumerConfig) -> list[str]:
    differences = [
        f"{name} is {have!r}, expected {want!r}"
        for name, want, have in (
            ("filter_subject", wanted.filter_subject, found.filter_subject),
            ("ack_policy", wanted.ack_policy, found.ack_policy),
            ("max_deliver", wanted.max_deliver, found.max_deliver),
        )
        if want != have
    ]
    if not math.isclose(wanted.ack_wait or 0.0, found.ack_wait or 0.0, rel_tol=1e-6):
        differences.append(f"ack_wait is {found.ack_wait} s, expected {wanted.ack_wait} s")
    if found.deliver_subject:
        differences.append(f"it pushes to {found.deliver_subject!r} instead of being pulled")
    return differences
