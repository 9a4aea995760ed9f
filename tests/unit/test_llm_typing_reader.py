"""The agent's `message` read out of its reply JSON as it is written (actors/llm/_typing.py)."""

from __future__ import annotations

import json

import pytest

from actors.llm._typing import MessageReader
from tests.support.llm_stream import pieces_of


def shown(pieces: list[str]) -> list[str]:
    reader = MessageReader()
    return [reader.feed(piece) for piece in pieces]


def test_the_message_is_shown_as_its_characters_come_and_nothing_else() -> None:
    pieces = ['{"mess', 'age": "The ', "plan is ", 'ready", "hand', 'off": {"to": "claude"}', "}"]
    assert shown(pieces) == ["", "The ", "plan is ", "ready", "", ""]


def test_other_fields_before_the_message_and_text_around_the_object_are_skipped() -> None:
    reply = (
        '```json\n{"final": true, "handoff": {"message": "not this", "x": [1, {"a": "}"}]},'
        ' "note": "a \\"message\\": trap", "message": "only this"}\n```\n{"message": "nor this"}'
    )
    assert "".join(shown(pieces_of(reply, 17))) == "only this"


@pytest.mark.parametrize("count", [1, 3, 7, 40])
def test_escapes_cut_anywhere_between_pieces_are_decoded(count: int) -> None:
    message = 'line one\nline "two"\t\\ caf\u00e9 \U0001f600 \u2603 / end'
    reply = json.dumps({"message": message, "final": True})  # ensure_ascii: \u escapes
    assert "\\ud83d\\ude00" in reply
    text = "".join(shown(pieces_of(reply, count)))
    assert text == message


def test_an_answer_that_is_not_a_json_object_with_a_message_shows_nothing() -> None:
    assert shown(["Just prose, ", "no JSON at all."]) == ["", ""]
    assert "".join(shown(['{"message": 42, "final": true}'])) == ""
    assert "".join(shown(['{"text": "hello"}'])) == ""


def test_only_the_first_message_of_the_object_is_shown() -> None:
    assert "".join(shown(['{"message": "one", "message": "two"}'])) == "one"
