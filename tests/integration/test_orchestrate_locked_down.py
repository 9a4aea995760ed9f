"""Orchestrated sessions under least privilege: every process is its own nkey user.

The server runs `parley nats-config`'s generated authorization for the default actors plus
`local` and `byte-doc`; the person connects as `cli`. An orchestrated session's new fields
(`orchestration`, `Control.text`), its session events and its `maxDurationMs` reminder all
use subjects the router, the agents and the person already hold: a full_auto run reaches
its turn limit and a manual draft is approved after an edit.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from bus import EmbeddedServer
from schemas import Namespace
from tests.integration.test_orchestrate_e2e import Person, agents, orchestration_policy
from tests.support.lockdown import LOCKED_ACTORS, LockedDown
from tests.support.system import running_locked_system
from tools.natsconf import write_nats_config


@pytest.fixture
def locked(tmp_path: Path, namespace: Namespace) -> Iterator[LockedDown]:
    config_dir = tmp_path / "nats-config"
    write_nats_config(config_dir, (*LOCKED_ACTORS, "local", "byte-doc"), namespace)
    server = EmbeddedServer(tmp_path / "nats", authorization=config_dir / "authorization.conf")
    server.start()
    yield LockedDown(server, config_dir, namespace)
    server.close()


async def test_an_orchestrated_session_runs_with_every_process_as_its_own_user(
    locked: LockedDown, tmp_path: Path
) -> None:
    async with running_locked_system(
        locked, tmp_path / "keys", agents(tmp_path), policy=orchestration_policy(tmp_path)
    ):
        nc = await locked.connect("cli")
        try:
            person = Person(nc, locked.ns, js=locked.js(nc, "cli"))
            await person.open(mode="full_auto", max_turns=2)
            end = await person.until("session_completed")
            assert end.stop_reason == "max_turns" and len(person.outbound()) == 2

            person = Person(nc, locked.ns, js=locked.js(nc, "cli"))
            await person.open(max_turns=1)
            asked = await person.until("approval_requested")
            approval = asked.payload["approval_id"]
            await person.control("approve", approval_id=approval, text="Edited by me.")
            sent = await person.until("step_started", role="outbound")
            assert sent.payload["message"] == "Edited by me."
            assert (await person.until("session_completed")).stop_reason == "max_turns"
        finally:
            await nc.close()
