"""Every nats CLI command docs/nats-cli.md lists for the operator works under lockdown.

The server runs `parley nats-config`'s least-privilege config for namespace `parley` (so the
documented names are the real ones); the operator connects from the context file `parley up`
writes, and each documented line makes the requests the nats CLI makes for it
(tests/support/natscli.py). Traffic is put there first by the principals that write it.
"""

from __future__ import annotations

import json
import os
import shlex
import stat
from pathlib import Path

import pytest
from nats.aio.subscription import Subscription

from schemas import Namespace, encode, new_id
from tests.support.lockdown import LockedDown
from tests.support.natscli import NatsCli, operator_lines
from tests.support.processes import REPO
from tests.support.wire import human
from tools._nats_contexts import write_nats_contexts

DOC = REPO / "docs" / "nats-cli.md"
INTEROP = REPO / "docs" / "interop.md"
CONTEXT = ".parley/nats-contexts/operator.json"


@pytest.fixture
def namespace() -> Namespace:
    """The documented names: the locked-down server is this test's own."""
    return Namespace("parley")


async def test_every_documented_operator_command_works_under_lockdown(
    locked_down: LockedDown, tmp_path: Path
) -> None:
    locked, ns = locked_down, locked_down.ns
    await locked.provision()
    session = new_id()
    submitted = encode(human("what the operator watches"))
    event, record = b'{"kind":"session_event"}', b'{"record":1}'
    cli, router, auditor, gpt = [
        await locked.connect(actor) for actor in ("cli", "router", "auditor", "gpt")
    ]
    await locked.js(cli, "cli").publish(ns.submit("cli"), submitted)
    await router.jetstream().publish(ns.events("cli", session), event)
    await auditor.jetstream().publish(ns.audit("demo", "gpt"), record)
    sessions = await router.jetstream().key_value(ns.bucket("sessions"))
    await sessions.put(f"session.{session}", b'{"state":"open"}')
    registry = await locked.js(gpt, "gpt").key_value(ns.bucket("registry"))
    await registry.put("heartbeat.gpt", b'{"beat":1}')

    contexts = tmp_path / ".parley" / "nats-contexts"
    write_nats_contexts(locked.config_dir, contexts, locked.server.url, ns)
    assert stat.S_IMODE(contexts.stat().st_mode) == 0o700
    export, *commands = operator_lines(DOC)
    assert export == f"export NATS_CONTEXT=$PWD/{CONTEXT}"
    operator = await NatsCli.from_context(json.loads((tmp_path / CONTEXT).read_text()))
    expected: dict[str, str | bytes] = {
        "stream ls": ns.stream("deliver"),
        f"stream info {ns.stream('submit')}": '"messages": 1,',  # waiting for the gate
        f"stream get {ns.stream('submit')} 1": submitted,
        f"stream get {ns.stream('events')} --last-for {ns.events('cli', session)}": event,
        f"stream get {ns.stream('audit')} 1": record,
        f"consumer ls {ns.stream('deliver')}": '"name": "gpt"',
        f"consumer info {ns.stream('deliver')} gpt": ns.deliver("gpt"),
        "kv ls": f"KV_{ns.bucket('sessions')}",
        f"kv get {ns.bucket('sessions')} session.{session}": b'{"state":"open"}',
        f"kv get {ns.bucket('registry')} heartbeat.gpt": b'{"beat":1}',
    }
    subscriptions: list[Subscription] = []
    try:
        for line in commands:
            argv = shlex.split(line.replace("$SESSION", session))
            assert argv[0] == "nats", line
            answer = await operator.run(argv[1:])
            if isinstance(answer, Subscription):
                subscriptions.append(answer)
                continue
            want = expected.pop(shlex.join(argv[1:]), "")
            assert (want.encode() if isinstance(want, str) else want) in (
                answer.encode() if isinstance(answer, str) else answer
            ), (line, answer)
        assert not expected, f"documented no more: {list(expected)}"
        # Every subscription sees the next submission live, before any gate reads it.
        assert len(subscriptions) == 2
        await operator.nc.flush()
        live = encode(human("seen live"))
        await locked.js(cli, "cli").publish(ns.submit("cli"), live)
        for subscription in subscriptions:
            message = await subscription.next_msg(timeout=10)
            assert (message.subject, message.data) == (ns.submit("cli"), live)
    finally:
        for nc in (operator.nc, cli, router, auditor, gpt):
            await nc.close()


def test_the_interop_page_shows_only_commands_this_test_runs() -> None:
    """docs/interop.md's nats CLI example is a few of nats-cli.md's lines, each run above."""
    shown = operator_lines(INTEROP)
    assert shown and set(shown) <= set(operator_lines(DOC)), shown


def test_contexts_name_a_private_seed_and_the_prefixes_each_role_needs(
    locked_down: LockedDown, tmp_path: Path
) -> None:
    ns, out = locked_down.ns, tmp_path / "contexts"
    written = write_nats_contexts(locked_down.config_dir, out, "nats://127.0.0.1:4222", ns)
    roles = [path.stem for path in written]
    assert roles == ["operator", "audit-cli", "cli", "policy-signer"]  # no system user asked
    for path in written:
        context = json.loads(path.read_text())
        seed = Path(context["nkey"])
        assert seed.parent == out.resolve()
        assert seed.read_bytes() == (locked_down.config_dir / "seeds" / seed.name).read_bytes()
        for private in (path, seed):
            assert stat.S_IMODE(os.stat(private).st_mode) == 0o600, private
        assert context["inbox_prefix"] == f"_INBOX_{path.stem}"
        assert context["jetstream_api_prefix"] == "$JS.PARLEY.API"
        assert context["url"] == "nats://127.0.0.1:4222"
