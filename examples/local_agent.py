"""An example local agent program: seed 000's prompt channel in its smallest honest form.

Run by a profile with the `subprocess` backend (see `deploy/agents/local.toml`):

    [brain]
    backend = "subprocess"
    command = ["{python}", "../../examples/local_agent.py"]  # relative to the profile

It reads one `desktop.local_prompt.request` frame per line on stdin and writes exactly one
`desktop.local_prompt.response` frame per request on stdout, carrying seed 001's JSON reply
in `draft_message`. Logs go to stderr, never stdout: stdout is the channel, and any other line
there is a protocol violation. A real agent would call its model where `draft()` is.
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

__all__ = ("draft", "main")


def draft(request: LocalPromptRequest) -> str:
    """The agent's turn as seed 001's reply JSON: it restates the objective and ends."""
    about = request.remote_message or request.objective
    message = (
        f"{request.profile_id} (local agent), turn {request.turn_index}: "
        f"on {request.objective!r}, after {len(request.history)} earlier turn(s), "
        f"my answer to {about[:200]!r} is that this is done."
    )
    return json.dumps({"message": message, "final": True})


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
