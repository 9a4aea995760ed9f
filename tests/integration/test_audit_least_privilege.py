"""The auditor does its whole job as its own nkey user under the least-privilege config,
dead letters included."""

from __future__ import annotations

import signal
from pathlib import Path

from actors.auditor._chain import CHECKPOINT_PROFILE
from bus import DEAD_REASON
from schemas import encode
from tests.support.audit import AuditorKeys, decision
from tests.support.lockdown import LockedDown
from tests.support.processes import READY, parley_env, start_actor
from tools.audit import query_records


async def test_the_auditor_records_and_reads_back_with_only_its_own_grants(
    locked_down: LockedDown, tmp_path: Path
) -> None:
    locked, ns = locked_down, locked_down.ns
    await locked.provision()
    keys = AuditorKeys(tmp_path)
    config = locked.settings_file("auditor")
    config.write_text(
        config.read_text() + "\n[options]\n"
        f'signing_key = "{keys.private_path}"\ntenant = "demo"\ncheckpoint_s = 0.3\n'
    )
    gate = await locked.connect("gate")
    auditor_nc = await locked.connect("auditor")
    env = parley_env(locked.server.url, ns.root, allow_lazy_fsync="true")
    auditor = start_actor("auditor", "auditor", env, "--config", str(config))
    try:
        await auditor.wait_line(READY)
        fact = decision("gpt", "claude", objective="as the gate would say")
        await gate.jetstream().publish(
            ns.decisions("gpt"), encode(fact), headers={"Nats-Msg-Id": fact.id}
        )
        await auditor.wait_line(r'"count":2\b', timeout=20)
        # A dead letter the gate files under a receiver it gave up on, as bus/_deadletter.py does.
        await gate.jetstream().publish(
            ns.dead("gpt"), b"\xffnot an envelope", headers={DEAD_REASON: "max_deliveries"}
        )
        await auditor.wait_line(r'"count":3\b', timeout=20)
        auditor.signal(signal.SIGTERM)
        assert await auditor.wait_exit() == 0
        auditor.close()
        # A restart reads the chain's head and recent records back through its own grants.
        auditor = start_actor("auditor", "auditor", env, "--config", str(config))
        await auditor.wait_line(r'"msg":"audit chain head","index":3\b')
        await auditor.wait_line(READY)
        auditor.signal(signal.SIGTERM)
        assert await auditor.wait_exit() == 0
        # Reading back as the auditor's user: the history reader's grants suffice too.
        records = await query_records(auditor_nc.jetstream(), ns, tenant="demo", profile="gpt")
        assert [(r.fact, r.envelope_id) for r in records] == [
            ("decision", fact.envelope_id),
            ("dead_letter", ""),
        ]
        assert records[1].status == "max_deliveries"
        assert not [line for line in auditor.lines if "permission" in line.lower()]
        assert CHECKPOINT_PROFILE not in {r.profile for r in records}
    finally:
        auditor.close()
        await gate.close()
        await auditor_nc.close()
