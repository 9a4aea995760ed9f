"""`parley artifacts list|get` as an operator runs them: a real process with the
`artifacts-cli` credentials `parley nats-config` wrote, against a locked-down server where the
tool runtime stored the artifacts with its own."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

from actors.tools import ArtifactStore, ArtifactUri
from tests.support.lockdown import LockedDown
from tools.natsconf import ARTIFACT_READER, TOOLS


async def _parley(locked: LockedDown, *argv: str) -> tuple[int, str, str]:
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "tools",
        "artifacts",
        *argv,
        "--config",
        str(locked.settings_file(ARTIFACT_READER)),
        env={**os.environ, "NATS_URL": locked.server.url},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(), 60)
    return process.returncode or 0, out.decode(), err.decode()


async def test_a_person_lists_and_gets_a_sessions_artifacts_checked_against_their_uri(
    locked_down: LockedDown, tmp_path: Path
) -> None:
    locked = locked_down
    await locked.provision()
    tools = await locked.connect(TOOLS)
    try:
        store = ArtifactStore(tools.jetstream(), locked.ns, "demo")
        content = b"collected 12 items\n" * 20_000  # several chunks
        text = await store.put_bytes("s1", content, name="pytest output.txt", step_id="7")
        await store.put_bytes("s2", b"another session's\n", name="other.txt", step_id="1")
    finally:
        await tools.close()

    code, out, err = await _parley(locked, "list", "--session", "s1")
    assert code == 0, err
    assert out.splitlines() == [f"{text}\t{len(content)}\tpytest output.txt"]

    # Another tenant's filter finds none, and says under which tenant it looked.
    code, out, err = await _parley(locked, "list", "--session", "s1", "--tenant", "acme")
    assert (code, out) == (0, ""), err
    assert err.strip() == "parley artifacts: none stored for session s1 under tenant acme", err

    target = tmp_path / "got.txt"
    code, _, err = await _parley(locked, "get", text, "-o", str(target))
    assert code == 0, err
    assert target.read_bytes() == content

    uri = ArtifactUri.parse(text)
    wrong = ArtifactUri(uri.tenant, uri.session, "0" * 64, uri.size, uri.name)
    code, _, err = await _parley(locked, "get", str(wrong), "-o", str(tmp_path / "no.txt"))
    assert code == 2 and "no artifact" in err
    assert not (tmp_path / "no.txt").exists()
