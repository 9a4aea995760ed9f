"""The gateway's reading of streamed answers (actors/llm/_stream.py): the providers' event
sequences, tool calls written in pieces included, become the answer in the non-streamed
shape the rest of the gateway reads (actors/llm/_wire.py `read_answer`)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from actors.llm._stream import StreamError, StreamReader
from actors.llm._wire import read_answer


def _feed(reader: StreamReader, events: list[Any]) -> str:
    return "".join(reader.feed(e if isinstance(e, str) else json.dumps(e)) for e in events)


def test_openai_tool_calls_written_in_pieces_are_one_call_each() -> None:
    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {
            "id": "c",
            "model": "m",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
            "usage": None,
        }

    calls = [
        {
            "index": 0,
            "id": "call_1",
            "type": "function",
            "function": {"name": "File_Read", "arguments": ""},
        },
    ]
    reader = StreamReader("openai")
    said = _feed(
        reader,
        [
            chunk({"role": "assistant", "content": None, "tool_calls": calls}),
            chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"path":'}}]}),
            chunk({"tool_calls": [{"index": 0, "function": {"arguments": ' "a.txt"}'}}]}),
            chunk({}, "tool_calls"),
            {"id": "c", "choices": [], "usage": {"prompt_tokens": 9, "completion_tokens": 4}},
            "[DONE]",
        ],
    )
    assert said == ""
    read = read_answer("openai", reader.answer())
    assert [(c.id, c.name, json.loads(c.arguments)) for c in read.tool_calls] == [
        ("call_1", "File_Read", {"path": "a.txt"})
    ]
    assert read.finish_reason == "tool_calls"
    assert (read.usage.prompt_tokens, read.usage.completion_tokens) == (9, 4)


def test_anthropic_text_and_a_tool_input_in_pieces_become_the_message() -> None:
    reader = StreamReader("anthropic")
    said = _feed(
        reader,
        [
            {
                "type": "message_start",
                "message": {
                    "id": "msg",
                    "content": [],
                    "usage": {"input_tokens": 20, "output_tokens": 1},
                },
            },
            {
                "type": "content_block_start",
                "index": 0,
                "content_block": {"type": "text", "text": ""},
            },
            {
                "type": "content_block_delta",
                "index": 0,
                "delta": {"type": "text_delta", "text": "Reading "},
            },
            {
                "type": "content_block_delta",
                "index": 0,
                "delta": {"type": "text_delta", "text": "it."},
            },
            {"type": "content_block_stop", "index": 0},
            {
                "type": "content_block_start",
                "index": 1,
                "content_block": {
                    "type": "tool_use",
                    "id": "tu_1",
                    "name": "File_Read",
                    "input": {},
                },
            },
            {
                "type": "content_block_delta",
                "index": 1,
                "delta": {"type": "input_json_delta", "partial_json": '{"path": "a'},
            },
            {
                "type": "content_block_delta",
                "index": 1,
                "delta": {"type": "input_json_delta", "partial_json": '.txt"}'},
            },
            {"type": "content_block_stop", "index": 1},
            {
                "type": "message_delta",
                "delta": {"stop_reason": "tool_use"},
                "usage": {"output_tokens": 15},
            },
            {"type": "message_stop"},
        ],
    )
    assert said == "Reading it."
    read = read_answer("anthropic", reader.answer())
    assert read.text == "Reading it." and read.finish_reason == "tool_use"
    assert [(c.id, c.name) for c in read.tool_calls] == [("tu_1", "File_Read")]
    assert reader.answer()["content"][1]["input"] == {"path": "a.txt"}
    assert (read.usage.prompt_tokens, read.usage.completion_tokens) == (20, 15)


def test_an_error_event_or_a_stream_cut_short_is_a_stream_error() -> None:
    reader = StreamReader("anthropic")
    reader.feed(json.dumps({"type": "message_start", "message": {"content": []}}))
    with pytest.raises(StreamError, match="overloaded_error: Overloaded"):
        reader.feed(
            json.dumps(
                {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
            )
        )
    with pytest.raises(StreamError, match="ended before"):
        reader.answer()
    with pytest.raises(StreamError, match="not JSON"):
        StreamReader("openai").feed("{half")
