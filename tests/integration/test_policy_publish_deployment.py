"""`parley policy publish --config` on a deployment of its own (docs/security.md's flow).

A newcomer's walk followed docs/security.md: `parley nats-config --out nats`, a real
nats-server on it, `parley provision`, and then `parley policy publish`, which had no
`--config` (docs/commands.md said it had) and, with no `parley up` in the directory, could
only be made to work with three `PARLEY_*` variables. It takes the policy signer's settings
file now, as every other command takes its role's.
"""

from __future__ import annotations

from pathlib import Path

from tests.integration.test_cli_errors import run_parley
from tests.support.lockdown import LockedDown
from tests.support.processes import REPO, parley_env
from tools.demo import sign_policy


async def test_the_signer_publishes_with_the_settings_file_nats_config_wrote(
    locked_down: LockedDown, tmp_path: Path
) -> None:
    locked, ns = locked_down, locked_down.ns
    await locked.provision()
    signed, _ = sign_policy(REPO / "deploy" / "policy" / "demo.toml", tmp_path / "keys")
    bundle = tmp_path / "demo.signed.json"
    bundle.write_bytes(signed)
    env = parley_env(locked.server.url, ns.root)
    signer = str(locked.settings_file("policy-signer"))
    ran = await run_parley(env, tmp_path, "policy", "publish", str(bundle), "--config", signer)
    assert ran.code == 0, ran
    assert ran.out.startswith(f"published {bundle} as revision "), ran
    operator = await locked.connect("operator")  # reads every stream, writes nothing
    try:
        policy = ns.bucket("policy")
        stored = await locked.js(operator, "operator").get_msg(
            f"KV_{policy}", subject=f"$KV.{policy}.bundle"
        )
        assert stored.data == signed
    finally:
        await operator.close()
