"""After an attack campaign, the system is whole: the audit chain intact, every actor running,
and a normal collaboration completes.

One locked-down system (gate, router, auditor, both scripted agents, every process as its own
nkey user). Holding gpt's own credentials, and the person's, the attacker: aims the server's
answers at every protected subject through reply subjects; speaks for a person; stops a
session it does not own; re-submits a decided envelope's id; submits bytes that do not decode
and an envelope too large to deliver. Then `parley collab` runs seed 001's tale to its
`final`, every actor process is still the one that started, and once the auditor has pinned
everything, `parley audit verify --strict` reports an intact chain.
"""

from __future__ import annotations

import signal
from pathlib import Path

from nats.aio.client import Client as NATS

from bus import CAUSATION_ID, MSG_ID, TraceHeaders
from schemas import Control, HumanMessage, Namespace, encode, new_id, utc_now
from tests.support.audit import AuditorKeys
from tests.support.lockdown import LockedDown
from tests.support.processes import parley_env
from tests.support.system import finished, parley_cli, running_locked_system
from tools.demo import DEMO_GOAL
from tools.natsconf._permissions import permissions_for

_PRINCIPALS = ("gpt", "claude", "cli", "gate", "router", "auditor", "provisioner")


def _protected(ns: Namespace) -> list[str]:
    targets = [ns.submit(p) for p in _PRINCIPALS if p not in ("gpt", "cli")]
    targets += [ns.deliver(p) for p in _PRINCIPALS]
    targets += [ns.audit("demo", "gpt"), ns.decisions("claude"), ns.events("cli", "s1")]
    targets += [f"$KV.{ns.bucket(b)}.attack" for b in ("policy", "traces", "sessions")]
    targets.append(f"$KV.{ns.bucket('policy')}.trusted.version")
    return targets


async def _reply_storm(nc: NATS, ns: Namespace, principal: str) -> None:
    """Every grant but pulls and acks (which would only delay the real host's deliveries),
    each with its reply subject aimed at every protected subject."""
    grants = [
        s
        for s in permissions_for(principal, ns).publish_allow
        if not s.startswith("_INBOX") and ".MSG.NEXT." not in s and "$JS.ACK." not in s
    ]
    for subject in grants:
        local = subject.replace("$JS.API.", "$JS.PARLEY.API.").replace(".>", ".x")
        for target in _protected(ns):
            await nc.publish(local, b"", reply=target)
    await nc.flush()


def _person_message(max_rounds: int = 4) -> HumanMessage:
    return HumanMessage(
        id=new_id(),
        created_at=utc_now(),
        text="gpt speaking for a person",
        call_id=new_id(),
        mode="collaborate",
        participants=("claude",),
        first_speaker="claude",
        max_rounds=max_rounds,
        session_id=new_id(),
    )


async def test_after_the_attacks_the_chain_is_intact_and_the_system_still_works(
    locked_down: LockedDown, tmp_path: Path
) -> None:
    locked, ns = locked_down, locked_down.ns
    keys = AuditorKeys(tmp_path)
    auditor_config = locked.settings_file("auditor")
    auditor_config.write_text(
        auditor_config.read_text()
        + "ack_wait_s = 5.0\n[options]\n"
        + f'signing_key = "{keys.private_path}"\ntenant = "demo"\ncheckpoint_s = 0.5\n'
    )
    async with running_locked_system(locked, tmp_path / "keys") as system:
        env = parley_env(locked.server.url, ns.root)
        await system.start("auditor", "auditor", env, "--config", str(auditor_config))
        pids = {name: process.pid for name, process in system.processes.items()}
        gpt, cli = await locked.connect("gpt"), await locked.connect("cli")
        try:
            await _reply_storm(gpt, ns, "gpt")
            await _reply_storm(cli, ns, "cli")
            gpt_js = locked.js(gpt, "gpt")
            # gpt speaks for a person, twice with the same id, and tries to stop a session.
            forged = _person_message()
            headers = TraceHeaders(trace_id=forged.id, origin="gpt").to_headers(forged.id)
            await gpt_js.publish(ns.submit("gpt"), encode(forged), headers=headers)
            again = {**headers, MSG_ID: new_id()}
            await gpt_js.publish(ns.submit("gpt"), encode(forged), headers=again)
            stop = Control(
                id=new_id(),
                created_at=utc_now(),
                action="stop",
                session_id=forged.session_id or "",
            )
            await gpt_js.publish(
                ns.submit("gpt"), encode(stop), headers={MSG_ID: stop.id, CAUSATION_ID: forged.id}
            )
            # Bytes that do not decode, and an envelope too large to deliver.
            await gpt_js.publish(ns.submit("gpt"), b"{not json", headers={MSG_ID: new_id()})
            huge = encode(_person_message()).replace(b"gpt speaking", b"x" * 1_047_000)
            await gpt_js.publish(ns.submit("gpt"), huge, headers={MSG_ID: new_id()})
        finally:
            await gpt.close()
            await cli.close()

        code, lines = await finished(
            parley_cli(env, "collab", "--config", str(locked.settings_file("cli")), DEMO_GOAL),
            120,
        )
        assert code == 0 and any("final" in line for line in lines), lines
        for name, process in system.processes.items():
            assert process.process.poll() is None, f"{name} died"
            assert process.pid == pids[name], f"{name} was restarted"
            refused = [line for line in process.lines if "permission violation" in line.lower()]
            assert not refused, (name, refused)

        auditor = system.processes["auditor"]
        auditor.signal(signal.SIGTERM)  # its last checkpoint pins every record it wrote
        assert await auditor.wait_exit() == 0
        verify = parley_cli(
            env,
            "audit",
            "verify",
            "--strict",
            "--key",
            str(keys.public_path),
            "--config",
            str(locked.settings_file("audit-cli")),
        )
        code, lines = await finished(verify, 60)
        assert code == 0 and any("audit chain intact" in line for line in lines), lines
        assert not any("ALERT" in line for line in lines), lines
