"""`parley up` with a relay in the topology, locked down: the relay is granted the names it
serves and finds their durables made by the provisioner, with nothing done by hand.

The relay reads `deliver.<name>` for its shared agents and its shares' device principals, and
under least privilege may neither subscribe elsewhere nor create a consumer: it starts (and
says ready) only if `parley up` passed those names to the broker config and `parley provision`
created exactly the durables it binds.
"""

from __future__ import annotations

import json
import signal
import uuid
from datetime import timedelta
from pathlib import Path

from actors.relay import DeviceKeys, save_shared_agent, write_share
from bus import EmbeddedServer
from schemas import SharedAgent, ShareRecord, device_principal, new_id, utc_now
from tests.support.processes import close_up, parley_env, parley_up


async def test_parley_up_grants_and_provisions_what_the_relay_serves(tmp_path: Path) -> None:
    device_dir, relay_dir = tmp_path / ".parley" / "device", tmp_path / ".parley" / "relay"
    alice, bob, carol = DeviceKeys.generate(), DeviceKeys.generate(), DeviceKeys.generate()
    alice.save(device_dir)
    save_shared_agent(
        relay_dir, SharedAgent(name="bob-byte-doc", agent="byte-doc", device=bob.public)
    )
    now = utc_now()
    share = ShareRecord(  # Alice shares her own agent with Carol's device
        share_id=new_id(),
        agent="local",
        device=carol.public,
        principal=device_principal(carol.device_id),
        owner_device=alice.device_id,
        created_at=now,
        expires_at=now + timedelta(days=1),
    )
    write_share(relay_dir, share, alice.signing)
    gateway = EmbeddedServer(tmp_path / "gateway")
    gateway.start()
    options = {
        "device_dir": str(device_dir),
        "relay_dir": str(relay_dir),
        "gateway_url": gateway.url,
        "gateway_root": "upgw",
    }
    (tmp_path / "relay.toml").write_text(
        "[options]\n" + "".join(f"{k} = {json.dumps(v)}\n" for k, v in options.items())
    )
    topology = tmp_path / "shared.toml"
    namespace = f"t{uuid.uuid4().hex[:12]}"
    topology.write_text(
        f'[settings]\nnamespace = "{namespace}"\n'
        '[[actor]]\nname = "relay"\nrun = "relay"\nconfig = "relay.toml"\n'
    )
    env = parley_env("unused", namespace)
    del env["NATS_URL"]
    up = parley_up(topology, env, "--store", str(tmp_path / "store"), cwd=tmp_path)
    try:
        await up.wait_line(r"^\[nats\] embedded nats-server .* locked down")
        await up.wait_line(r'^\[relay\] .*"msg":"ready"', timeout=30)
        manifest = json.loads((tmp_path / ".parley" / "broker" / "actors.json").read_text())
        assert manifest["relay"]["serves"] == f"bob-byte-doc,{share.principal}"
        up.signal(signal.SIGTERM)
        assert await up.wait_exit(timeout=15) == 0
    finally:
        close_up(up)
        gateway.close()
    assert not [line for line in up.lines if "Violation" in line]
