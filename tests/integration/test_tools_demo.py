"""`parley demo --tools` (`make demo-tools`) as a person runs it: a real process that starts a
locked-down nats-server and five actors, and a scripted coding agent that fixes a repository
with tools, its commands approved by the demo as the person.

Each run's processes are found by the run's directory (`--keep`), which every one of them
names: the nats-server on its command line, each actor in its credentials' path. None may
be left once the demo has exited, whether it finished or was stopped by Ctrl-C.
"""

from __future__ import annotations

import os
import re
import signal
from pathlib import Path

from tests.support.processes import ProcessOutput, parley_env
from tests.support.system import finished, parley_cli
from tools.demo_tools import AGENT, FIX_SUBJECT

_APPROVED = re.compile(r"^  \(the demo, as you: parley approvals approve \S+ --session \S+\)$")
_TESTS = 'Shell.Exec python3 -B -m unittest -v cwd="stats"'


def _processes_of(run: Path) -> list[str]:
    """The live processes naming `run` on their command line or in their environment."""
    needle = str(run).encode()
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == os.getpid():
            continue
        try:
            cmdline = Path(f"/proc/{name}/cmdline").read_bytes()
            environ = Path(f"/proc/{name}/environ").read_bytes()
            state = Path(f"/proc/{name}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue  # gone meanwhile, or not ours to read
        if state != "Z" and (needle in cmdline or needle in environ):
            words = cmdline.replace(b"\0", b" ").decode(errors="replace")
            found.append(f"{name}: {words}")
    return found


def _demo(tmp_path: Path, run: Path) -> ProcessOutput:
    env = parley_env("unused", "unused")
    for name in ("NATS_URL", "PARLEY_NAMESPACE"):
        env.pop(name)
    return parley_cli(env, "demo", "--tools", "--keep", str(run), cwd=tmp_path)


async def test_the_tools_demo_fixes_commits_is_refused_a_push_and_leaves_no_process(
    tmp_path: Path,
) -> None:
    run = tmp_path / "run"
    demo = _demo(tmp_path, run)
    try:
        await demo.wait_line(f"^you → {AGENT}: ", timeout=90)
        running = _processes_of(run)
        assert len(running) >= 6, running  # the nats-server and the five actors
        code, lines = await finished(demo, timeout=120)
    finally:
        demo.close()
    output = "\n".join(lines)
    assert code == 0, output
    # Each command waited for the person, and the demo approved it as them.
    # Each under its approval rule's title (deploy/policy/tools-demo.toml), then who asks.
    asking = f"Run a command in the workspace: {AGENT} asks to use Shell.Exec"
    asked = [line for line in lines if line.startswith(asking)]
    assert len(asked) == 4, output
    assert sum(line.endswith(_TESTS) for line in asked) == 2, output
    assert sum(bool(_APPROVED.match(line)) for line in lines) == 4, output
    assert lines.count("tools returned: SUCCEEDED") == 13, output
    assert (
        "tools returned: DENIED (CAPABILITY_DENIED: the remote "
        "'https://github.com/example/stats.git': its host is not allowed)"
    ) in lines, output
    # The commit on top is the fix, by the agent's identity, never the machine's user.
    assert "Parley agent <agent@parley.invalid>" in lines, output
    assert FIX_SUBJECT in lines, output
    assert "+    return (ordered[middle - 1] + ordered[middle]) / 2" in lines, output
    # The audit holds what came back: the tests failing, then passing.
    results = [line for line in lines if re.match(r"#\d+ +tools → builder  test_even_median", line)]
    assert len(results) == 2, output
    assert "test_even_median) ... FAIL" in results[0] and "test_even_median) ... ok" in results[1]
    assert sum(" cli → tools  control (approve)  ALLOW" in line for line in lines) == 4, output
    assert lines[-2] == "parley demo --tools: done", output
    assert lines[-1].startswith(f"kept in {run.resolve()}: the server's store"), output
    assert _processes_of(run) == []
    assert not (tmp_path / ".parley").exists()  # it ran in a directory of its own


async def test_ctrl_c_in_the_middle_of_the_demo_leaves_no_process(tmp_path: Path) -> None:
    run = tmp_path / "run"
    demo = _demo(tmp_path, run)
    try:
        await demo.wait_line(r"^  approve: parley approvals approve ", timeout=90)
        assert len(_processes_of(run)) >= 6
        demo.signal(signal.SIGINT)
        code, lines = await finished(demo, timeout=60)
    finally:
        demo.close()
    assert code == 130, "\n".join(lines)
    assert _processes_of(run) == []
    # One line says so, and nothing else: no traceback, no "exception was never retrieved".
    assert lines[-1] == "parley demo: interrupted; everything it started is stopped", lines
    noise = [line for line in lines if "Traceback" in line or "never retrieved" in line]
    assert not noise, "\n".join(lines)
