"""`parley demo --tools`: a coding agent works on a repository with tools, under least privilege.

On this machine, locked down as `parley up` locks a system down (an nkey user per actor): an
embedded nats-server, the gate, the router, the auditor, the tool runtime and the scripted
coding agent `builder` (deploy/agents/builder.toml), each a separate supervised process,
under the demo's own bundle (deploy/policy/tools-demo.toml), signed with a key made for this
run. The demo asks the builder, as the person at this terminal would with `parley say`, to
fix a small repository's failing tests. In its session's workspace the builder writes the
repository's files (File.Write), makes it a Git repository with an upstream (Shell.Exec,
`git init`, `git remote add`), commits it (Git.Commit), reads the code (File.Read), runs
the tests (Shell.Exec), writes a fix, runs the tests again, looks at its change (Git.Diff),
commits it and tries to push it (Git.Push), which the bundle's scope refuses: it allows no
host.

Every Shell.Exec waits for the person's approval (the bundle's `commands` rule); the demo
approves each as that person, saying which command it approves, as `parley approvals approve`
would. Then it prints the commit the builder made (`git show`, read as the person) and the
session's audit: every tool step and decision as the auditor recorded it, with what came
back. Exit 0 when the session completed, the fix is the commit
on top and the push was refused.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final, TextIO

from nats.aio.client import Client as NATS

from actors.gate import BUNDLE_KEY
from bus import (
    ChildSpec,
    EmbeddedServer,
    Supervisor,
    Topology,
    connect,
    jetstream,
    load_settings,
    owned_argv,
    scratch_directory,
    shipped,
)
from bus._supervisor import GiveUp
from schemas import AuditRecord, Control, HumanMessage, Namespace, SessionEvent, new_id, utc_now
from tools._interruptible import all_set
from tools._local import lock_down, provision_locked
from tools._local_system import key_pair
from tools._waiting import submit_as
from tools.audit import query_records
from tools.collab import follow_session
from tools.demo import sign_policy
from tools.natsconf import AUDIT_READER, POLICY_SIGNER

__all__ = ("AGENT", "FIX_SUBJECT", "TOOLS_GOAL", "TOOLS_POLICY", "run_tools_demo")

TOOLS_POLICY: Final = shipped("deploy/policy/tools-demo.toml")
AGENTS_DIR: Final = shipped("deploy/agents")
AGENT: Final = "builder"
TENANT: Final = "tools-demo"
PERSON: Final = "cli"
REPOSITORY: Final = "stats"
"""The repository the builder's script makes, relative to its session's workspace."""
TOOLS_GOAL: Final = "The stats tests fail: fix median(), run the tests, commit and push the fix."
FIX_SUBJECT: Final = "Fix median() of an even count: the mean of the two middle values"
"""The subject of the builder's fix (deploy/agents/scripts/builder.toml)."""

_READY = '"msg":"ready"'
_LOUD = ('"level":"error"', '"level":"critical"', "Traceback", "exited (")
_READY_S: Final = 60.0
_AUDIT_S: Final = 15.0
"""How long the auditor may take to record the session's end once the demo saw it."""
_GIT_S: Final = 10.0


def tools_topology(work: Path, public_key: Path) -> Topology:
    """Gate, router, auditor, tool runtime and the builder, with this run's keys."""
    keys = {"policy_keys": [str(public_key)], "tenant": TENANT}
    audit_key = work / "keys" / "audit.key"
    key_pair(audit_key)
    runtime = {**keys, "workspaces": str(work / "workspaces")}

    def options(values: object) -> dict[str, str]:
        return {"PARLEY_OPTIONS": json.dumps(values)}

    children = (
        ChildSpec(name="gate", run="gate", env=options(keys)),
        ChildSpec(name="router", run="router"),
        ChildSpec(
            name="auditor",
            run="auditor",
            env=options({"signing_key": str(audit_key), "tenant": TENANT}),
        ),
        ChildSpec(name="tools", run="tools", env=options(runtime)),
        ChildSpec(name=AGENT, run="agent", env=options({"agents_dir": str(AGENTS_DIR.resolve())})),
    )
    return Topology(settings={"log_level": "info"}, actor=children)


async def _connect_as(broker: Path, url: str, role: str) -> NATS:
    """A connection with `role`'s own credentials, as `lock_down` wrote them."""
    settings = load_settings(broker / "actors" / f"{role}.toml", nats_url=url)
    return await connect(settings, role, reconnect_forever=False)


def tools_message() -> HumanMessage:
    """The person's request to the builder, as `parley say @builder ...` sends it."""
    return HumanMessage(
        id=new_id(),
        created_at=utc_now(),
        text=TOOLS_GOAL,
        call_id=new_id(),
        user_id="",
        mode="single",
        participants=(AGENT,),
        first_speaker=AGENT,
        max_rounds=1,
        session_id=new_id(),
    )


async def run_tools_demo(out: TextIO, *, keep: Path | None = None) -> int:
    """Run the tools demo; return the exit code. Every process it started is gone when it
    returns or raises (Ctrl-C included): the supervisor stops the actors, the server stops."""
    with scratch_directory("parley-demo-tools-") as scratch:
        work = (keep or Path(scratch)).resolve()
        # Without bubblewrap a command runs as a sandbox user at the workspace's real path,
        # and git resolves it: the user must pass through (never list) the dirs above it.
        if keep is None:
            work.chmod(0o711)
        (work / "workspaces").mkdir(parents=True, exist_ok=True, mode=0o711)
        ns = Namespace("parley")
        signed, public = await asyncio.to_thread(sign_policy, TOOLS_POLICY, work / "keys")
        broker = work / "broker"
        topology = lock_down(tools_topology(work, public), ns, broker)
        server = EmbeddedServer(work / "nats", authorization=broker / "authorization.conf")
        await asyncio.to_thread(server.start)
        try:
            await provision_locked(server.url, [c.name for c in topology.actor], broker)
            signer = await _connect_as(broker, server.url, POLICY_SIGNER)
            try:
                settings = load_settings(broker / "actors" / f"{POLICY_SIGNER}.toml")
                policy = await jetstream(signer, settings).key_value(ns.bucket("policy"))
                await policy.put(BUNDLE_KEY, signed)
            finally:
                await signer.close()
            return await _supervised(work, server, topology, ns, out)
        finally:
            await asyncio.to_thread(server.stop)
            if keep is not None:  # what it kept, where: a newcomer's walk found no word of it
                print(
                    f"kept in {work}: the server's store (nats/), the broker config (broker/), "
                    "the keys (keys/) and the session's workspace (workspaces/)",
                    file=out,
                    flush=True,
                )


async def _supervised(
    work: Path, server: EmbeddedServer, topology: Topology, ns: Namespace, out: TextIO
) -> int:
    ready = {child.name: asyncio.Event() for child in topology.actor}

    def on_line(name: str, line: str) -> None:
        if _READY in line and name in ready:
            ready[name].set()
        if any(mark in line for mark in _LOUD):
            print(f"[{name}] {line}", file=out, flush=True)

    env = {k: v for k, v in os.environ.items() if not k.startswith(("PARLEY_", "NATS_"))}
    supervisor = Supervisor(topology, base_env={**env, "NATS_URL": server.url}, on_line=on_line)
    print(
        f"Parley tools demo: nats-server at {server.url}, locked down (one user per actor); "
        f"starting {', '.join(ready)} as separate processes",
        file=out,
        flush=True,
    )
    stopping = asyncio.Event()
    code = 1
    try:
        async with asyncio.TaskGroup() as tasks:
            supervised = tasks.create_task(supervisor.run(stopping))
            started = all_set(list(ready.values()))
            try:
                waits: set[asyncio.Future[Any]] = {started, supervised}
                await asyncio.wait(waits, timeout=_READY_S, return_when=asyncio.FIRST_COMPLETED)
                if started.done():
                    code = await _session(work, server.url, ns, out)
                else:
                    missing = ", ".join(n for n, e in ready.items() if not e.is_set())
                    print(f"parley demo --tools: not ready within 60 s: {missing}", file=out)
            finally:
                started.cancel()
                stopping.set()
    except* GiveUp as group:
        print(f"parley demo --tools: an actor kept failing: {group.exceptions[0]}", file=out)
        code = 1
    return code


async def _session(work: Path, url: str, ns: Namespace, out: TextIO) -> int:
    """The person's session with the builder, then what it committed and the audit."""
    broker = work / "broker"
    nc = await _connect_as(broker, url, PERSON)
    deciding: set[asyncio.Task[None]] = set()
    push: list[str] = []
    msg = tools_message()
    session = msg.session_id or ""
    try:
        print(f"\nyou → {AGENT}: {TOOLS_GOAL}\n", file=out, flush=True)

        def on_event(event: SessionEvent) -> None:
            if event.event_type == "approval_requested":
                task = asyncio.ensure_future(_approve(nc, ns, event, out))
                deciding.add(task)
                task.add_done_callback(deciding.discard)
            elif event.event_type == "tool_completed" and event.payload.get("tool") == "Git.Push":
                push.append(str(event.payload.get("status")))

        end = await follow_session(nc, ns, msg, out=out, on_event=on_event, person=PERSON)
    finally:
        for task in deciding:
            task.cancel()
        await asyncio.gather(*deciding, return_exceptions=True)
        with contextlib.suppress(Exception):
            await nc.close()
    completed = end.event is not None and end.event.event_type == "session_completed"
    subject = await _print_commit(work / "workspaces" / session / REPOSITORY, out)
    await _print_audit(broker, url, ns, session, out)
    checks = {
        "the session completed": completed,
        "the fix is the commit on top": subject == FIX_SUBJECT,
        "the push was refused": push == ["denied"],
    }
    failed = [what for what, held in checks.items() if not held]
    verdict = "done" if not failed else "FAILED: not " + "; not ".join(failed)
    print(f"\nparley demo --tools: {verdict}", file=out, flush=True)
    return 0 if not failed else 1


async def _approve(nc: NATS, ns: Namespace, event: SessionEvent, out: TextIO) -> None:
    """Approve a held request as the person, as `parley approvals approve` does."""
    approval_id = str(event.payload.get("approval_id", ""))
    print(
        f"  (the demo, as you: parley approvals approve {approval_id} --session "
        f"{event.session_id})",
        file=out,
        flush=True,
    )
    control = Control(
        id=new_id(),
        created_at=utc_now(),
        action="approve",
        session_id=event.session_id,
        target="tools",
        approval_id=approval_id,
        reason="approved by the tools demo, as the person",
    )
    await submit_as(nc, ns, PERSON, control)


async def _git(repository: Path, *arguments: str) -> tuple[int, str]:
    """`git` read-only on the repository the agent wrote, as the person: no config but the
    repository's own, no hooks, pager or external diff; killed if it outlives `_GIT_S`."""
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "LC_ALL": "C",
        "HOME": str(repository),
        "GIT_DIR": str(repository / ".git"),
        "GIT_WORK_TREE": str(repository),
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": "/dev/null",
        "GIT_PAGER": "cat",
    }
    options = ("--no-pager", "-c", "core.hooksPath=/dev/null", "-c", "core.fsmonitor=false")
    process = await asyncio.create_subprocess_exec(
        *owned_argv(["git", *options, *arguments]),  # dies with the demo, however it ends
        cwd=repository,
        env=env,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    try:
        async with asyncio.timeout(_GIT_S):
            said, _ = await process.communicate()
    except BaseException:
        with contextlib.suppress(ProcessLookupError):
            process.kill()
        await process.wait()
        raise
    return process.returncode or 0, said.decode(errors="replace")


async def _print_commit(repository: Path, out: TextIO) -> str | None:
    """The builder's last commit, as the person sees it in the workspace; its subject."""
    print(
        f"\n── The commit on top of {REPOSITORY}'s main (git show, in the workspace) ──", file=out
    )
    if not (repository / ".git").is_dir():
        print(f"no repository at {repository}", file=out)
        return None
    log_code, log = await _git(repository, "log", "--format=%h %an: %s", "main")
    show_code, shown = await _git(
        repository, "show", "--no-ext-diff", "--no-textconv", "--format=%H%n%an <%ae>%n%s%n", "main"
    )
    print(log.rstrip() + "\n", file=out)
    print(shown.rstrip(), file=out, flush=True)
    if log_code != 0 or show_code != 0:
        return None
    lines = shown.splitlines()
    return lines[2] if len(lines) > 2 else None


async def _print_audit(broker: Path, url: str, ns: Namespace, session: str, out: TextIO) -> None:
    """The session's tool steps, read as `parley audit` reads them (the audit reader's
    credentials), once the auditor has recorded the session's end."""
    nc = await _connect_as(broker, url, AUDIT_READER)
    try:
        js = jetstream(nc, load_settings(broker / "actors" / f"{AUDIT_READER}.toml"))
        records: list[AuditRecord] = []
        loop = asyncio.get_running_loop()
        deadline = loop.time() + _AUDIT_S
        while not _ended(records) and loop.time() < deadline:
            records = await query_records(js, ns, tenant=TENANT, session=session)
            if not _ended(records):
                await asyncio.sleep(0.2)  # the auditor appends as it reads: read again
    finally:
        await nc.close()
    print(f"\n── Audit: the tool steps of session {session} ──", file=out)
    for line in tool_steps(records):
        print(line, file=out)
    if not _ended(records):
        print(f"(the auditor had not recorded the session's end within {_AUDIT_S:.0f} s)", file=out)


def _ended(records: Sequence[AuditRecord]) -> bool:
    return any(r.fact == "session_event" and r.status == "session_completed" for r in records)


def tool_steps(records: Sequence[AuditRecord]) -> list[str]:
    """One line per tool request and per result, from the sender's copy of each decision."""
    lines = []
    for record in records:
        if record.fact != "decision" or record.profile != record.requester:
            continue
        if record.task == "tool_request":
            what = record.objective if len(record.objective) <= 90 else record.objective[:89] + "…"
            verdict = record.decision_code or record.status
            lines.append(
                f"#{record.chain_index:<4} {record.requester} → {record.target}  {what}  {verdict}"
            )
        elif record.task == "control":
            verdict = record.decision_code or record.status
            route = f"{record.requester} → {record.target}"
            lines.append(f"#{record.chain_index:<4} {route}  control (approve)  {verdict}")
        elif record.task == "tool_result":
            preview = " ⏎ ".join(record.output_preview.splitlines())
            preview = preview or record.failure_reason or "(succeeded, no output)"
            lines.append(
                f"#{record.chain_index:<4} {record.requester} → {record.target}  {preview[:150]}"
            )
    return lines
