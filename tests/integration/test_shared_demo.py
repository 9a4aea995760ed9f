"""`parley demo --shared` as a person runs it: a real process that starts three nats-servers
and both deployments' actors, and prints the orchestrated session and what the gateway
stored."""

from __future__ import annotations

import re
from pathlib import Path

from tests.support.processes import parley_env
from tests.support.system import finished, parley_cli
from tools.demo_shared import BYTE_DOC_SCRIPT, LOCAL_SCRIPT, MAX_TURNS


async def test_the_shared_demo_runs_to_its_turn_limit_and_the_gateway_holds_only_ciphertext(
    tmp_path: Path,
) -> None:
    env = parley_env("unused", "unused")
    for name in ("NATS_URL", "PARLEY_NAMESPACE"):
        env.pop(name)
    code, lines = await finished(parley_cli(env, "demo", "--shared", cwd=tmp_path), timeout=120)
    output = "\n".join(lines)
    assert code == 0, output
    # The timeline: each local draft went to bob-byte-doc and came back answered, in order.
    for turn in range(1, MAX_TURNS + 1):
        draft = LOCAL_SCRIPT[min(turn, len(LOCAL_SCRIPT)) - 1]
        answer = BYTE_DOC_SCRIPT[min(turn, len(BYTE_DOC_SCRIPT)) - 1]
        assert f"[Local Agent · {turn}/{MAX_TURNS}] {draft}" in lines, output
        assert f"[Remote Agent · {turn}/{MAX_TURNS}] {answer}" in lines, output
    assert lines.count("    → bob-byte-doc (auto-sent)") == MAX_TURNS, output
    assert "======== TURN LIMIT REACHED ========" in lines and "stopped: max_turns" in lines
    # What the gateway stored: a call and an answer per turn, between the two device ids.
    frames = [line for line in lines if re.match(r"  #\d+ +\d+ bytes  (alice|bob) ", line)]
    assert len(frames) == 2 * MAX_TURNS, output
    assert sum(" alice " in f.split("→")[0] for f in frames) == MAX_TURNS
    assert f"stream PARLEYGW: {2 * MAX_TURNS} frame(s) stored in all, 0 still there" in output
    assert re.search(r"message texts: none found: ciphertext only$", output, re.M), output
    assert lines[-1] == "parley demo --shared: done"
    assert not (tmp_path / ".parley").exists()  # it ran in a scratch directory of its own
