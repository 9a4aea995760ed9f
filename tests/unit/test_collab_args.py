"""`parley collab`, `say` and `orchestrate` refuse a command line that cannot work before
anything is sent: a session that gives up at once, an empty goal, a first speaker who does not
take part, an orchestration limit out of bounds (said by its flag)."""

from __future__ import annotations

import argparse

import msgspec
import pytest

from schemas import HumanMessage, Orchestration, encode, new_id, utc_now
from tools._collab_args import check_arguments
from tools._orchestrate_args import invalid_arguments_line


def _collab(**given: object) -> argparse.Namespace:
    args = {
        "stop": None,
        "follow": None,
        "detach": False,
        "timeout": None,
        "goal": ["plan", "a", "trip"],
        "agents": "gpt,claude",
        "first": None,
        "max_rounds": 6,
        "user": "",
    }
    return argparse.Namespace(**{**args, **given})


def test_a_command_line_that_can_work_is_accepted() -> None:
    assert check_arguments(_collab(), single=False) is None
    assert check_arguments(_collab(first="claude", timeout=0.5), single=False) is None


@pytest.mark.parametrize("timeout", [0.0, -5.0, float("nan")])
def test_a_timeout_that_gives_up_at_once_is_refused(timeout: float) -> None:
    said = check_arguments(_collab(timeout=timeout), single=False)
    assert said is not None and said.startswith("--timeout must be more than 0 seconds"), said
    single = _collab(agent="@gpt", text=["hi"], timeout=timeout)
    assert check_arguments(single, single=True) == said
    stop = _collab(stop="01a2-session", timeout=timeout)  # `--stop S`: waits that long for it
    assert check_arguments(stop, single=False) == said


@pytest.mark.parametrize("goal", [[], [""], ["  ", ""]])
def test_an_empty_goal_is_refused(goal: list[str]) -> None:
    said = check_arguments(_collab(goal=goal), single=False)
    assert said == "invalid arguments: say what the agents should do together (the goal)"


def test_a_first_speaker_who_does_not_take_part_is_refused() -> None:
    said = check_arguments(_collab(agents="gpt", first="claude"), single=False)
    assert said == "--first claude is not one of --agents (gpt)"


@pytest.mark.parametrize(
    ("field", "value", "flag"),
    [
        ("max_turns", 0, "--max-turns"),
        ("max_failures", -1, "--max-failures"),
        ("max_duration_ms", 0, "--max-duration-ms"),
        ("max_tokens_budget", 0, "--max-tokens"),
    ],
)
def test_an_orchestration_out_of_bounds_is_said_by_its_flag(
    field: str, value: int, flag: str
) -> None:
    """`parley orchestrate --max-turns 0` named the envelope's `$.orchestration.max_turns`."""
    orchestration = msgspec.structs.replace(
        Orchestration(local_agent="local", shared_agent="research"), **{field: value}
    )
    message = HumanMessage(
        id=new_id(), created_at=utc_now(), text="x", call_id=new_id(), mode="orchestrate",
        session_id=new_id(), orchestration=orchestration,
    )  # fmt: skip
    with pytest.raises(msgspec.ValidationError) as invalid:
        msgspec.json.decode(encode(message), type=HumanMessage)
    said = invalid_arguments_line(str(invalid.value))
    assert said.startswith(f"{flag} ({field}): Expected `int` >="), said
