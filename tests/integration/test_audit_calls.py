"""The records and views of agents calling agents (issue 15, item 5), end to end.

A person (the test, as `cli`) delegates to `planner`, a real agent host whose scripted brain
fans out at once to a delegate (`coder`), a sub-agent given filtered context (`reviewer`),
an agent its policy does not let it call (`stranger`) and a sub-agent it does not let it
call (`third`), then answers from the results.
The gate, the auditor and the agents are real processes on a real nats-server. Then
`parley trace` and `parley calls`, run as an operator runs them, must draw that from the
audit history, one line per call with its answer's figures; and the sub-agent's context,
which the reviewer did receive, must be in no decision and no audit record.
"""

from __future__ import annotations

import asyncio
import re
import signal
import subprocess
import sys
from pathlib import Path

from nats.aio.client import Client as NATS
from nats.aio.msg import Msg

from bus import EmbeddedServer, read_history
from schemas import (
    Namespace,
    SubAgentCall,
    decode_envelope,
    new_id,
)
from tests.support.agents import start_agent, write_profile
from tests.support.audit import AuditorKeys, start_auditor
from tests.support.delegation import delegate_as_person, person_request
from tests.support.gate import Signer, make_bundle, publish_bundle, start_gate
from tests.support.processes import READY, REPO, ProcessOutput, parley_env
from tools.audit import query_records

MARKER = "ZEBRA-7781"
"""In the caller's conversation only: what the filtered context carries to the sub-agent."""
FACTS = (f"the parser has a bug near {MARKER}", "lunch is at noon")

PLANNER_SCRIPT = """
[[turn]]
goal = "fan out"
step = 0

[[turn.calls]]
to = "coder"
objective = "code for {task}"

[[turn.calls]]
tool = "call_sub_agent"
to = "reviewer"
objective = "check it"
context = { keywords = ["bug"] }
allowed_tools = ["read"]

[[turn.calls]]
to = "stranger"
objective = "who are you"

[[turn.calls]]
tool = "call_sub_agent"
to = "third"
objective = "look again"

[[turn]]
message = "planner gathered: {results}"
final = true
"""

SPECIALIST_SCRIPT = """
[[turn]]
message = "{name} did {goal}"
"""


def _cli(url: str, ns: Namespace, *argv: str) -> subprocess.CompletedProcess[str]:
    """Run `parley ARGV` without `--tenant`: the records are found under whichever tenant the
    gate has (`demo` here), as a person who never heard of tenants would run it."""
    return subprocess.run(
        [sys.executable, "-m", "tools", *argv, "--namespace", ns.root],
        env=parley_env(url, ns.root),
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=60,
    )


def _start_office(url: str, ns: Namespace, tmp_path: Path, signer: Signer) -> list[ProcessOutput]:
    """The gate, the planner and its two specialists, as real processes."""
    env = parley_env(url, ns.root, ack_wait_s="5")
    agents = tmp_path / "agents"
    planner = write_profile(
        agents,
        "planner",
        'backend = "scripted"\nscript = "planner-script.toml"',
        script=PLANNER_SCRIPT,
        extra='delegates_to = ["coder", "stranger"]\n'
        'allow_sub_agent_calls = true\nsub_agents = ["reviewer", "third"]',
    )
    specialists = [
        write_profile(
            agents,
            name,
            f'backend = "scripted"\nscript = "{name}-script.toml"',
            script=SPECIALIST_SCRIPT,
        )
        for name in ("coder", "reviewer")
    ]
    gate = start_gate(url, ns, signer, ack_wait_s="5")
    return [gate, *(start_agent(str(path), env) for path in (planner, *specialists))]


async def test_a_fan_out_is_recorded_and_drawn_call_by_call(
    nc: NATS, nats_server: EmbeddedServer, namespace: Namespace, tmp_path: Path
) -> None:
    js, ns = nc.jetstream(), namespace
    signer = Signer.create(tmp_path)
    bundle = make_bundle(
        1,
        days=1,
        cli={"start_traces": True, "speaks_for_person": True, "allowed_targets": ("planner",)},
        planner={
            "allowed_targets": ("coder", "reviewer", "cli"),
            "allow_sub_agent_calls": True,
            "tools_allowed": ("read", "grep"),
        },
        coder={"allowed_targets": ("planner",)},
        reviewer={"allowed_targets": ("planner",), "tools_allowed": ("read", "grep")},
    )
    await publish_bundle(js, ns, signer.sign(bundle))
    delivered: list[SubAgentCall] = []

    async def on_delivery(msg: Msg) -> None:
        envelope = decode_envelope(msg.data)
        if isinstance(envelope, SubAgentCall):
            delivered.append(envelope)

    watch = await nc.subscribe(ns.deliver("reviewer"), cb=on_delivery)
    keys = AuditorKeys(tmp_path)
    auditor = start_auditor(nats_server.url, ns, keys, tmp_path, checkpoint_s=0.3)
    processes = [auditor, *_start_office(nats_server.url, ns, tmp_path, signer)]
    try:
        for process in processes:
            await process.wait_line(READY)
        await processes[1].wait_line("policy bundle in force")

        session = new_id()
        request = person_request("fan out", text="the parser", facts=FACTS, session_id=session)
        answer = await delegate_as_person(js, ns, request)
        assert answer.status == "partial", answer  # the stranger was refused
        # The sub-agent did get the caller's context, filtered: the line with the bug.
        (call,) = delivered
        assert [m.content for m in call.context.messages] == [FACTS[0]]

        # Eight decisions: five calls (two refused) and three answers. Every admitted one
        # is recorded for both ends: 14 records, all pinned by the auditor's checkpoint.
        await auditor.wait_line(r'"count":14\b', timeout=30)
        records = await query_records(js, ns, tenant="demo")
        (root,) = {r.trace_id for r in records if r.envelope_id == request.id}

        stored = [m.data async for m in read_history(js, ns.stream("audit"))]
        decided = [
            m.data
            async for m in read_history(js, ns.stream("events"), subject=f"{ns.root}.decisions.>")
        ]
        assert len(stored) >= 14 and len(decided) == 8
        assert not [data for data in (*stored, *decided) if MARKER.encode() in data]

        trace = await asyncio.to_thread(_cli, nats_server.url, ns, "trace", root)
        assert trace.returncode == 0, trace.stderr
        lines = trace.stdout.splitlines()
        assert lines[0] == f"trace {root}: 8 decision(s), 0 session event(s)", lines
        assert len(lines) == 6, lines  # the answers are on their calls' lines
        assert re.match(
            r"└─ cli -> planner  delegation  hop 1  delivered policy v1  at \S+  "
            r"=> PARTIAL \(\d+ tokens, [\d.]+s\)  tools: read, grep$",
            lines[1],
        ), lines
        children = sorted(line[6:] for line in lines[2:])
        assert re.match(
            r"planner -> coder  delegation fan-out  hop 2  delivered policy v1  at \S+  "
            r"=> SUCCESS \(\d+ tokens, [\d.]+s\)  tools: none$",
            children[0],
        ), children
        assert re.match(
            r"planner -> reviewer  sub-agent fan-out  hop 2  delivered policy v1  at \S+  "
            r"=> SUCCESS \(\d+ tokens, 0s\)  tools: read$",
            children[1],
        ), children
        assert re.match(
            # A refused call opened no level: the gate records it where its sender is.
            r"planner -> stranger  delegation fan-out  hop 1  rejected TARGET_NOT_ALLOWED "
            r"policy v1  at \S+  \(allowed_targets: planner may not send to stranger ",
            children[2],
        ), children
        assert re.match(
            r"planner -> third  sub-agent fan-out  hop 1  rejected TARGET_NOT_ALLOWED ",
            children[3],
        ), children

        for key in (session, root):  # the person's session, or the trace itself
            calls = await asyncio.to_thread(_cli, nats_server.url, ns, "calls", key)
            assert calls.returncode == 0, calls.stderr
            lines = calls.stdout.splitlines()
            assert len(lines) == 10, lines
            assert lines[0] == "cli calling planner with task: fan out"
            assert {line for line in lines[1:] if " calling " in line} == {
                "planner calling coder with task: code for the parser",
                "planner calling reviewer with task: check it",
                "planner calling stranger with task: who are you",
                "planner calling third with task: look again",  # refused, still named
            }, lines
            for name, task in (("stranger", "who are you"), ("third", "look again")):
                assert lines.index(f"planner calling {name} with task: {task}") + 1 == (
                    lines.index(next(line for line in lines if line.startswith(f"{name} returned")))
                )
            returned = {
                line.partition(" returned: ")[0]: line for line in lines if " returned: " in line
            }
            assert returned.keys() == {"coder", "reviewer", "stranger", "third", "planner"}
            assert re.fullmatch(
                r"coder returned: SUCCESS \(\d+ tokens, [\d.]+s\)", returned["coder"]
            )
            assert re.fullmatch(
                r"reviewer returned: SUCCESS \(\d+ tokens, 0s\)", returned["reviewer"]
            )
            assert returned["stranger"].startswith(
                "stranger returned: REFUSED (TARGET_NOT_ALLOWED: planner may not send to stranger"
            )
            assert returned["third"].startswith(
                "third returned: REFUSED (TARGET_NOT_ALLOWED: planner may not send to third"
            )
            assert re.fullmatch(r"planner returned: PARTIAL \(\d+ tokens, [\d.]+s\)", lines[-1])
        nowhere = await asyncio.to_thread(_cli, nats_server.url, ns, "calls", new_id())
        assert nowhere.returncode == 1, nowhere.stderr
        assert "the audit history holds no session or trace" in nowhere.stderr
        assert "`parley audit query`" in nowhere.stderr  # where to look instead
    finally:
        await watch.unsubscribe()
        auditor.signal(signal.SIGTERM)
        for process in processes:
            process.close()
