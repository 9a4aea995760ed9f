"""The optional system user (`parley nats-config --system-user`): `nats server report` and
`nats events` work with it, it changes nothing on the server, and the actors still work.

`nats server list` asks `$SYS.REQ.SERVER.PING` (STATSZ), `server report jetstream`
`$SYS.REQ.SERVER.PING.JSZ`, `server report connections` `$SYS.REQ.SERVER.PING.CONNZ`;
`nats events` subscribes to `$SYS.ACCOUNT.>` (connects and disconnects) among others.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import nats
import pytest
from nats.aio.client import Client as NATS
from nats.errors import TimeoutError as NatsTimeoutError

from bus import EmbeddedServer
from schemas import Namespace
from tests.support.lockdown import LOCKED_ACTORS, LockedDown
from tools.natsconf import SYSTEM_USER, read_accounts, write_nats_config


@pytest.fixture
def with_system_user(tmp_path: Path, namespace: Namespace) -> Iterator[LockedDown]:
    config_dir = tmp_path / "nats-config"
    write_nats_config(config_dir, LOCKED_ACTORS, namespace, system_user=True)
    server = EmbeddedServer(tmp_path / "nats", authorization=config_dir / "authorization.conf")
    server.start()
    yield LockedDown(server, config_dir, namespace)
    server.close()


async def _system(locked: LockedDown, errors: list[Exception]) -> NATS:
    async def on_error(exc: Exception) -> None:
        errors.append(exc)

    return await nats.connect(
        locked.server.url,
        nkeys_seed=str(locked.config_dir / "seeds" / f"{SYSTEM_USER}.nk"),
        inbox_prefix=locked.ns.inbox_prefix(SYSTEM_USER).encode(),
        error_cb=on_error,
        allow_reconnect=False,
    )


async def test_the_system_user_reads_the_servers_reports_and_events(
    with_system_user: LockedDown,
) -> None:
    locked = with_system_user
    accounts = read_accounts(locked.config_dir / "authorization.conf")
    assert set(accounts["SYS"]) == {"users"}  # no imports: no Parley subject in reach
    errors: list[Exception] = []
    system = await _system(locked, errors)
    try:
        # `nats events` listens on `$SYS.ACCOUNT.*.CONNECT`; the server announces the system
        # user's own connect there too, at a moment of its choosing, so listen to one account.
        connects = await system.subscribe("$SYS.ACCOUNT.PARLEY.CONNECT")
        await system.flush()
        gate = await locked.connect("gate")  # an actor logs in as before
        event = json.loads((await connects.next_msg(timeout=10)).data)
        assert event["client"]["acc"] == "PARLEY"
        await locked.provision()
        await gate.jetstream().stream_info(locked.ns.stream("dead"))  # its grants still work
        await gate.close()

        statsz = json.loads((await system.request("$SYS.REQ.SERVER.PING", b"", timeout=5)).data)
        server_id = statsz["server"]["id"]
        jsz = json.loads(
            (await system.request("$SYS.REQ.SERVER.PING.JSZ", b'{"accounts":true}', 5)).data
        )
        assert jsz["data"]["streams"] >= 6  # `nats server report jetstream`
        connz = await system.request("$SYS.REQ.SERVER.PING.CONNZ", b"{}", timeout=5)
        assert "connections" in json.loads(connz.data)["data"]

        # Reads only: reloading the config or kicking a client is refused.
        for verb in ("RELOAD", "KICK"):
            with pytest.raises(NatsTimeoutError):
                await system.request(f"$SYS.REQ.SERVER.{server_id}.{verb}", b"{}", timeout=1)
        await system.flush()
        assert len([e for e in errors if "permissions violation" in str(e).lower()]) == 2, errors
    finally:
        await system.close()


def test_nats_config_writes_the_system_user_only_when_asked(tmp_path: Path) -> None:
    ns = Namespace("parley")
    write_nats_config(tmp_path / "plain", ["gate"], ns)
    assert "system_account" not in (tmp_path / "plain" / "authorization.conf").read_text()
    assert not (tmp_path / "plain" / "seeds" / f"{SYSTEM_USER}.nk").exists()
    manifest = write_nats_config(tmp_path / "sys", ["gate"], ns, system_user=True)
    assert manifest[SYSTEM_USER]["account"] == "SYS"
    assert (tmp_path / "sys" / "seeds" / f"{SYSTEM_USER}.nk").stat().st_mode & 0o077 == 0
    with pytest.raises(ValueError, match="system user"):
        write_nats_config(tmp_path / "bad", ["gate", SYSTEM_USER], ns)
