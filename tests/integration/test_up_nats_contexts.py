"""`parley up` writes a nats CLI context per role a person uses, says how to use them, and
they get in: the operator's reads and the system user's reports answer under lockdown."""

from __future__ import annotations

import json
import signal
import stat
from pathlib import Path

from schemas import Namespace
from tests.support.natscli import NatsCli
from tests.support.processes import REPO, close_up, parley_env, parley_up

SMOKE = REPO / "deploy" / "topologies" / "smoke.toml"


async def test_up_writes_contexts_the_nats_cli_gets_in_with(
    tmp_path: Path, namespace: Namespace
) -> None:
    env = parley_env("unused", namespace.root)
    del env["NATS_URL"]
    home = tmp_path / "home"
    home.mkdir()
    up = parley_up(SMOKE, env, "--store", str(tmp_path / "store"), cwd=home)
    contexts = home / ".parley" / "nats-contexts"
    operator: NatsCli | None = None
    system: NatsCli | None = None
    try:
        await up.wait_line(
            r"^\[nats\] nats CLI contexts in \.parley/nats-contexts/ .*"
            r"nats --context \.parley/nats-contexts/operator\.json stream ls"
        )
        assert stat.S_IMODE(contexts.stat().st_mode) == 0o700
        written = sorted(path.name for path in contexts.iterdir())
        roles = ("audit-cli", "cli", "operator", "policy-signer", "system")
        assert written == sorted([*(f"{r}.json" for r in roles), *(f"{r}.nk" for r in roles)])
        assert all(stat.S_IMODE(p.stat().st_mode) == 0o600 for p in contexts.iterdir())

        operator = await NatsCli.from_context(json.loads((contexts / "operator.json").read_text()))
        streams = await operator.run(["stream", "ls"])
        assert isinstance(streams, str) and namespace.stream("submit") in streams
        system = await NatsCli.from_context(json.loads((contexts / "system.json").read_text()))
        jsz = await system.nc.request("$SYS.REQ.SERVER.PING.JSZ", b"{}", timeout=5)
        assert json.loads(jsz.data)["data"]["streams"] >= 6  # `nats server report jetstream`
        up.signal(signal.SIGTERM)
        assert await up.wait_exit(timeout=10) == 0
    finally:
        for cli in (operator, system):
            if cli is not None:
                await cli.nc.close()
        close_up(up)
