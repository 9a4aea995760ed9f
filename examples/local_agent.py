"""An example local agent program: seed 000's prompt channel in its smallest honest form.

Run by a profile with the `subprocess` backend (see `deploy/agents/local.toml`):

    [brain]
    backend = "subprocess"
    command = ["{python}", "../../examples/local_agent.py"]  # relative to the profile

It reads one `desktop.local_prompt.request` frame per line on stdin and writes exactly one
`desktop.local_prompt.response` frame per request on stdout, carrying seed 001's JSON reply
in `draft_message`. Logs go to stderr, never stdout: stdout is the channel, and any other line
there is a protocol violation. A real agent would call its model where `draft()` is.

In an orchestrated session each request asks for the next message to the shared agent, and
the reply's `message` is sent to it unless the reply says `final: true` (the objective is met,
nothing is sent). So this agent writes a message from the objective and the shared agent's
last answer, and ends only for a reason it can name (`draft()`):

- the shared agent's answer says it is done (one of `DONE_PHRASES`, in any case, in its own
  words: a quote of this agent's earlier messages does not count), or
- the shared agent has answered `ENOUGH_ANSWERS` (3) times: turn N's request follows N-1
  answers (`turn_index`), so the fourth request ends the run with a summary.

Otherwise it asks: on the first turn, for help with the objective; after an answer, quoting
it, for what is still missing. When its owner rejected the last draft, the reason (the last
history item, role `user`) is taken into the new one.
"""

from __future__ import annotations

import json
import os
import sys
import time

from schemas import (
    DecodeError,
    LocalPromptMetrics,
    LocalPromptRequest,
    LocalPromptResponse,
    decode_frame,
    encode,
)

__all__ = ("DONE_PHRASES", "ENOUGH_ANSWERS", "draft", "main")

ENOUGH_ANSWERS = 3
"""Answers from the shared agent after which the objective counts as met."""
DONE_PHRASES = ("nothing more", "that is all", "that's all", "all done", "objective met")
"""What in the shared agent's answer says it has nothing to add."""
_QUOTE_CHARS = 300


def _reply(message: str, *, final: bool) -> str:
    return json.dumps({"message": message, "final": final})


def draft(request: LocalPromptRequest) -> str:
    """The agent's turn as seed 001's reply JSON: the next message, or the end and why."""
    objective = request.objective.strip()
    remote = request.remote_message.strip()
    if remote == objective:
        remote = ""  # a first turn may carry the objective as the message to answer
    answers = max(request.turn_index - 1, 0)
    own_words = remote  # an answer may quote what it was asked: only its own words count
    for turn in request.history:
        if turn.role == "local_agent":
            own_words = own_words.replace(turn.text, "")
    said_done = next((p for p in DONE_PHRASES if p in own_words.lower()), None)
    if said_done is not None or (remote and answers >= ENOUGH_ANSWERS):
        why = f"it said {said_done!r}" if said_done else f"it answered {answers} times"
        return _reply(
            f"Objective met ({objective!r}): the shared agent has given what I asked for ({why}). "
            f"Its last answer: {remote[:_QUOTE_CHARS]}",
            final=True,
        )
    owner = (
        request.history[-1].text if request.history and request.history[-1].role == "user" else ""
    )
    note = f" (Revised after my owner's note: {owner})" if owner else ""
    if not remote:
        return _reply(
            f"Hello, I am {request.profile_id}, a local agent working on: {objective}. "
            f"What would you look at first, and why?{note}",
            final=False,
        )
    return _reply(
        f"Thank you. You said: {remote[:_QUOTE_CHARS]!r}. For {objective!r}, what is still "
        f"missing or worth checking next?{note}",
        final=False,
    )


def _log(text: str) -> None:
    print(f"local_agent[{os.getpid()}]: {text}", file=sys.stderr, flush=True)


def main() -> int:
    """Serve requests until stdin closes."""
    _log("ready")
    for line in sys.stdin.buffer:
        if not line.strip():
            continue
        started = time.monotonic()
        try:
            frame = decode_frame(line)
        except DecodeError as exc:
            _log(f"ignored a line that is not a frame: {exc}")
            continue
        if not isinstance(frame, LocalPromptRequest):
            _log("ignored a frame that is not a request")
            continue
        response = LocalPromptResponse(
            request_id=frame.request_id,
            status="ok",
            draft_message=draft(frame)[: frame.constraints.max_output_chars],
            metrics=LocalPromptMetrics(latency_ms=int((time.monotonic() - started) * 1000)),
        )
        sys.stdout.buffer.write(encode(response) + b"\n")
        sys.stdout.buffer.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
