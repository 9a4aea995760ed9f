"""The one line a failing command prints (tools/_errors.py, tools/_refused.py): what it says
for each cause. The commands themselves run in tests/integration/test_cli_errors.py."""

from __future__ import annotations

import errno
import subprocess
import sys
from pathlib import Path

import msgspec
import nats.errors
import pytest

from bus import ConfigError, load_settings
from tests.support.processes import REPO
from tools._errors import explain, wants_debug
from tools._local_owner import record_local_system
from tools._refused import Refusal, Refusals, refusal_line


def test_a_refused_jetstream_call_is_named_as_one() -> None:
    refusal = Refusal(
        "cli",
        "cli",
        'nats: permissions violation for publish to "$js.parley.api.consumer.create.parley_x"',
    )
    assert refusal.lacks() == (
        'call the JetStream API CONSUMER.CREATE ("$js.parley.api.consumer.create.parley_x")'
    )
    plain = Refusal("gpt", "gpt", 'nats: permissions violation for publish to "parley.submit.x"')
    assert plain.lacks() == 'publish to "parley.submit.x"'
    inbox = Refusal("cli", "audit-cli", 'Permissions Violation for Subscription to "_inbox_a.1"')
    assert inbox.lacks() == 'receive replies on "_inbox_a.1"'


def test_a_refusal_says_whose_credentials_the_command_needs() -> None:
    borrowed = Refusal("cli", "audit-cli", 'permissions violation for publish to "a.b"')
    assert "this command acts as `audit-cli`, not `cli`" in refusal_line(borrowed)
    own = Refusal("cli", "cli", 'permissions violation for publish to "a.b"')
    assert "does not grant it to `cli`" in refusal_line(own, more=2)
    assert "(and 2 more refusal(s))" in refusal_line(own, more=2)
    # A mistyped stream or namespace is refused as a grant lacking (an operator's walk).
    assert "check that the names it uses are this system's (a `--stream`, the namespace" in (
        refusal_line(own)
    )
    rejected = Refusal("cli", "cli", "nats: 'Authorization Violation'")
    assert refusal_line(rejected).startswith("the server rejected the credentials of `cli`")


def test_a_timeout_after_a_refusal_is_the_refusal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # no `parley up` here
    monkeypatch.delenv("NATS_URL", raising=False)
    refusals = Refusals()
    refusals.seen.append(Refusal("cli", "cli", 'permissions violation for publish to "a.b"'))
    line, code = explain("calls", nats.errors.TimeoutError(), refusals)
    assert line.startswith('the broker refused `cli` to publish to "a.b"'), line
    assert code == 2
    line, code = explain("calls", nats.errors.TimeoutError(), Refusals())
    assert line.startswith("the server did not answer in time: is `parley up` running"), line
    assert code == 3
    # `parley up` does run here (this process plays it): a newcomer's walk, its cluster
    # down to one node, was asked whether `parley up` ran.
    record_local_system("nats://127.0.0.1:40001")
    line, code = explain("calls", nats.errors.TimeoutError(), Refusals())
    assert line.startswith("the server did not answer in time: `parley up` runs in this"), line
    assert "a cluster that lost most of its nodes" in line and code == 3


def test_each_cause_gets_its_advice() -> None:
    missing = FileNotFoundError(errno.ENOENT, "No such file", ".parley/broker/seeds/cli.nk")
    assert explain("collab", missing)[0].startswith(
        "no such file: .parley/broker/seeds/cli.nk; an nkey seed: `parley up` writes"
    )
    with pytest.raises(ConfigError) as invalid_setting:
        load_settings(None, max_payload="lots")
    line, code = explain("run", invalid_setting.value)
    assert line.startswith("invalid configuration: max_payload: "), line
    assert "\n" not in line and code == 2, line
    invalid = msgspec.ValidationError("Expected `int`, got `str` - at `$.max_rounds`")
    assert explain("collab", invalid) == (
        "invalid input: Expected `int`, got `str` - at `$.max_rounds`; fix that field and try "
        "again",
        2,
    )
    group = ExceptionGroup("unhandled errors in a TaskGroup", [nats.errors.NoServersError()])
    assert explain("collab", group)[0].startswith("no NATS server answers: is `parley up`")


def test_an_error_that_is_not_the_network_is_not_blamed_on_it() -> None:
    """Registering /dev/null with epoll raises a PermissionError with no file name."""
    line, code = explain("orchestrate", PermissionError(errno.EPERM, "Operation not permitted"))
    assert line == (
        "PermissionError: [Errno 1] Operation not permitted; run `parley --debug orchestrate …` "
        "for the traceback"
    )
    assert code == 1


def test_debug_is_asked_before_the_command(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PARLEY_DEBUG", raising=False)
    assert wants_debug(["--debug", "collab", "x"]) == (True, ["collab", "x"])
    assert wants_debug(["collab", "--debug"])[1] == ["collab", "--debug"]  # the command's own


def test_a_reader_that_left_inside_a_task_group_is_no_network_error() -> None:
    """`parley collab … | head -1`: the printing task's BrokenPipeError reaches the guard
    inside a TaskGroup's group; it is the reader leaving, not a lost server (it said "network
    error (Broken pipe): is `parley up` running?")."""
    program = (
        "from tools._errors import run_guarded\n"
        "def run():\n"
        "    raise ExceptionGroup('a task failed', [BrokenPipeError(32, 'Broken pipe')])\n"
        "raise SystemExit(run_guarded('collab', run))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, timeout=60, cwd=REPO
    )
    assert done.returncode == 1, done
    assert done.stderr == "", done.stderr


def test_a_reader_that_left_a_waiting_command_is_no_network_error() -> None:
    """`parley delegate … | head -3`: a waiting command (tools/_waiting.py `run_command`) met
    the reader's leaving as an OSError and said "network error (Broken pipe): is `parley up`
    running?", exit 3. The reader left; nothing is said to it."""
    program = (
        "from tools._errors import run_guarded\n"
        "from tools._waiting import run_command\n"
        "async def command() -> int:\n"
        "    raise BrokenPipeError(32, 'Broken pipe')\n"
        "raise SystemExit(run_guarded('delegate', lambda: run_command('delegate', command)))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, timeout=60, cwd=REPO
    )
    assert done.returncode == 1, done
    assert done.stderr == "", done.stderr
