"""A process that stops cleanly hands what it settled to the next one (bus/_quarantine.py).

A reminder deferred again and again (a router waiting on an agent) comes back many times; to a
new process that knows nothing of those deferrals each looked like a delivery that died, and
every restart of `parley up` printed an error line per waiting reminder. After a clean stop the
next process knows they settled; after a SIGKILL it cannot, and still alerts (the poison
bound counts what may have died)."""

from __future__ import annotations

import re
import signal

import pytest
from nats.aio.client import Client as NATS
from nats.js.errors import BucketNotFoundError

from bus import EmbeddedServer, Quarantine, handling_key
from bus._quarantine import Settled
from schemas import Namespace, encode
from tests.support.processes import READY, ProcessOutput, parley_env, start_actor
from tests.support.wire import human

REMINDER_PROBE = "support.probe:ReminderProbe"
DEFERRED = r'"msg":"deferred a reminder"'
ALERT = "earlier delivery never settled"


def _attempt(line: str) -> int:
    found = re.search(r'"attempt":(\d+)', line)
    assert found is not None, line
    return int(found.group(1))


@pytest.mark.parametrize(
    ("stop", "alerted"), [(signal.SIGTERM, False), (signal.SIGKILL, True)], ids=["clean", "kill"]
)
async def test_a_reminder_deferred_before_a_stop_is_a_possible_death_only_after_a_kill(
    nats_server: EmbeddedServer,
    nc: NATS,
    namespace: Namespace,
    stop: signal.Signals,
    alerted: bool,
) -> None:
    env = parley_env(nats_server.url, namespace.root, ack_wait_s="2", fetch_timeout_s="0.5")
    processes: list[ProcessOutput] = []
    try:
        first = start_actor(REMINDER_PROBE, "probe", env)
        processes.append(first)
        await first.wait_line(READY)
        reminder = human("remind:100000")  # deferred for as long as the test runs
        await nc.jetstream().publish(
            namespace.timers("probe"), encode(reminder), headers={"Nats-Msg-Id": reminder.id}
        )
        await first.wait_line(DEFERRED + r'.*"attempt":3\b', timeout=20)
        first.signal(stop)
        await first.wait_exit()
        deferred_before = max(
            _attempt(line) for line in first.lines if "deferred a reminder" in line
        )

        second = start_actor(REMINDER_PROBE, "probe", env)
        processes.append(second)
        _, line = await second.wait_line(DEFERRED, timeout=20)
        assert _attempt(line) > deferred_before, "the reminder came back to the new process"
        alerts = [line for line in second.lines if ALERT in line]
        assert bool(alerts) == alerted, alerts or second.lines[-10:]
    finally:
        for process in processes:
            process.close()


async def test_a_handover_never_overwrites_a_mark_and_updates_only_its_own_records(
    nc: NATS, namespace: Namespace
) -> None:
    """A replica of the same actor may hold a message under its mark while another stops:
    the mark must stand, or that replica's death of it would go uncounted."""
    js = nc.jetstream()
    bucket = namespace.bucket("handling")
    try:
        kv = await js.key_value(bucket)  # provisioned with the namespace
    except BucketNotFoundError:
        kv = await js.create_key_value(bucket=bucket)
    marked, recorded, fresh = (handling_key("probe", "S", seq) for seq in (1, 2, 3))
    await kv.put(marked, b"3")  # a replica handles seq 1 under its mark
    await kv.put(recorded, b"settled:1")  # an earlier stop's record of seq 2
    settled = Settled()
    for seq in (1, 2, 2, 3):
        settled.add("S", seq)
    await Quarantine(js, namespace, "probe").hand_over(settled)
    assert (await kv.get(marked)).value == b"3"
    assert (await kv.get(recorded)).value == b"settled:2"
    assert (await kv.get(fresh)).value == b"settled:1"
