"""A command line `parley` cannot parse gets one line naming the command, as every other
failure does (docs/cli.md), not the whole usage of `parley`: a newcomer's `parley collab
--bogus-flag x` printed four lines about `parley` and never named `collab`."""

from __future__ import annotations

from pathlib import Path

import pytest

from tools import cli
from tools.chaos._cli import _verdict_or_interrupted
from tools.cli import main


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["collab", "--bogus-flag", "x"], "parley collab: unrecognized arguments: --bogus-flag"),
        (["audit", "query", "--since"], "parley audit query: argument --since: expected one"),
        (
            ["orchestrate", "--agent", "a", "--shared", "b", "--mode", "x", "go"],
            "parley orchestrate: argument --mode: invalid choice",
        ),
        ([], "parley: the following arguments are required: command"),
        (["up", "--cluster", "1"], "parley up: argument --cluster: invalid choice: 1"),
        (["--bogus", "policy", "show", "x"], "parley: unrecognized arguments: --bogus"),
    ],
)
def test_a_line_it_cannot_parse_is_one_line_naming_the_command(
    argv: list[str], said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(said), err
    assert "--help` lists what it takes" in err


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["task", "@gpt", " "], "parley task: invalid arguments: say what the agent should"),
        (
            ["approvals", "approve", "a1", "--session", "s1", "--wait", "-1"],
            "parley approvals: --wait must be more than 0 seconds, got -1",
        ),
        (["mcp", "--http", "99999"], "parley mcp: --http 99999 is no port: 0 (any free one)"),
        (["mcp", "--host", "0.0.0.0"], "parley mcp: --host applies only with --http"),
        (["chaos", "--duration", "0"], "parley chaos: --duration 0 must be more than 0"),
        (["chaos", "--sessions", "0", "--plan"], "parley chaos: --sessions 0 must be more than"),
        (["chaos", "--llm", "-1", "--plan"], "parley chaos: --llm -1 must be 0 or more"),
        (["chaos", "--shared", "--ack-wait", "0"], "parley chaos: --ack-wait 0 must be more"),
        (["nats-config", "--out", "x", "--actors", " ,"], "parley nats-config: --actors names no"),
    ],
)
def test_a_command_line_that_cannot_work_is_refused_before_anything_is_sent(
    argv: list[str], said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A newcomer's walk: `task @gpt ""` was sent, `--wait -1` waited "-1 s", and `mcp --http
    99999` ended in Python's `OverflowError` (exit 1); an operator's: `chaos --duration 0`
    started the whole topology to fail, `--sessions 0` ran four, `--llm -1` was planned."""
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(said), err


def test_limits_out_of_range_are_said_as_every_invalid_setting_is(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`nats-config --max-file -1` printed pydantic's own text and its web address."""
    assert main(["nats-config", "--out", str(tmp_path / "c"), "--max-file", "-1"]) == 2
    assert capsys.readouterr().err.splitlines() == [
        "parley nats-config: invalid limits:",
        "  max_file: Input should be greater than or equal to 1048576 (got -1)",
    ]
    assert not (tmp_path / "c").exists()


def test_a_chaos_run_stopped_before_its_verdict_says_so(capsys: pytest.CaptureFixture[str]) -> None:
    """SIGINT, SIGTERM or SIGHUP ended `parley chaos` with 130 and no word (an operator's
    walk): a person reading the terminal could not tell a stop from a crash."""

    def stopped() -> int:
        raise KeyboardInterrupt  # how a stop signal reaches the run (stop_like_interrupt)

    assert _verdict_or_interrupted(stopped) == 130
    assert capsys.readouterr().err == (
        "parley chaos: interrupted before its verdict; everything it started is stopped\n"
    )
    assert _verdict_or_interrupted(lambda: 1) == 1


@pytest.mark.parametrize(
    ("argv", "parsed"),
    [
        (
            ["delegate", "@coder", "--max-tokens", "10", "Assess the parser"],
            {"words": ["@coder", "Assess the parser"], "max_tokens": 10},
        ),
        (
            ["say", "@gpt", "--timeout", "5", "hello", "there"],
            {"agent": "@gpt", "text": ["hello", "there"], "timeout": 5.0},
        ),
        (
            ["collab", "write", "--max-rounds", "2", "a tale"],
            {"goal": ["write", "a tale"], "max_rounds": 2},
        ),
        (  # after `--`, words that look like options are words (a review)
            ["collab", "--", "--agents", "explained"],
            {"goal": ["--agents", "explained"], "agents": "gpt,claude"},
        ),
        (["say", "--", "@gpt", "-h"], {"agent": "@gpt", "text": ["-h"]}),
        (
            ["delegate", "@coder", "--max-tokens", "10", "--", "-x", "y"],
            {"words": ["@coder", "-x", "y"], "max_tokens": 10},
        ),
    ],
)
def test_words_and_options_may_come_in_any_order(
    argv: list[str], parsed: dict[str, object]
) -> None:
    """`parley delegate @coder --max-tokens 10 "…"` said the objective was an unrecognized
    argument, and `parley say @gpt --timeout 5 hello` kept only the words after the option
    (a newcomer's walk): argparse ends a list of words at the first option."""
    parser = cli._parser()
    args, extra = parser.parse_known_args(argv)
    assert cli._intermixed(argv, args, cli._chosen(parser, args), extra) == []
    assert {name: getattr(args, name) for name in parsed} == parsed
