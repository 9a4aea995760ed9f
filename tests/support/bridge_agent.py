"""A local agent that breaks seed 000's channel rules on demand, for the bridge's contract tests.

Markers in a request's objective choose the misbehaviour: `[slow]` answers after a short
piece of simulated work, `[unknown-id]` first sends a frame for a request that does not exist,
`[garbage]` first sends a line that is not a frame, `[twice]` sends its terminal frame twice,
`[hang]` never answers, `[exit]` exits without answering, `[error]` answers status "error".
Requests are handled on threads, so if a bridge ever sent two at once they would overlap and
the answer's `outstanding` count would say so.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time

from schemas import LocalPromptRequest, LocalPromptResponse, decode_frame, encode

_write_lock = threading.Lock()
_count_lock = threading.Lock()
_outstanding = 0


def _send(data: bytes) -> None:
    with _write_lock:
        sys.stdout.buffer.write(data + b"\n")
        sys.stdout.buffer.flush()


def _log(text: str) -> None:
    sys.stderr.write(f"bridge_agent[{os.getpid()}]: {text}\n")
    sys.stderr.flush()


def _terminal(data: bytes, *, twice: bool = False) -> None:
    """Send a request's terminal frame: from here on it no longer counts as outstanding.

    The count drops before the frame goes out, because the bridge may send the next request
    the moment it reads this one's answer. `twice` writes the frame a second time in the same
    write: sent after it, the copy could follow the next request's answer, which another
    thread writes as soon as the bridge asks (the test would read its count too early).
    """
    global _outstanding
    with _count_lock:
        _outstanding -= 1
    _send(data + b"\n" + data if twice else data)


def _handle(request: LocalPromptRequest, outstanding: int) -> None:
    objective = request.objective
    if "[exit]" in objective:
        _log(f"exiting during {request.request_id}")
        os._exit(3)
    if "[hang]" in objective:
        _log(f"working on {request.request_id}")
        threading.Event().wait()
    if "[slow]" in objective:
        time.sleep(0.3)  # simulated work, so overlapping requests would be seen
    if "[unknown-id]" in objective:
        _send(encode(LocalPromptResponse(request_id="req_bogus", status="ok", draft_message="x")))
    if "[garbage]" in objective:
        _send(b"this line is not a frame")
    if "[error]" in objective:
        _terminal(
            encode(
                LocalPromptResponse(
                    request_id=request.request_id, status="error", reason="asked to fail"
                )
            )
        )
        return
    reply = {
        "message": json.dumps(
            {
                "outstanding": outstanding,
                "objective": objective,
                "remote": request.remote_message,
                "turns": [turn.role for turn in request.history],
                "summary": request.history_summary,
                "tools": request.constraints.allow_tool_use,
                "timeout_ms": request.constraints.local_turn_timeout_ms,
                "profile": request.profile_id,
                "turn_index": request.turn_index,
                "pid": os.getpid(),
            }
        ),
        "final": True,
    }
    frame = encode(
        LocalPromptResponse(
            request_id=request.request_id, status="ok", draft_message=json.dumps(reply)
        )
    )
    _terminal(frame, twice="[twice]" in objective)


def main() -> None:
    global _outstanding
    _log("ready")
    for line in sys.stdin.buffer:
        frame = decode_frame(line)
        assert isinstance(frame, LocalPromptRequest)
        with _count_lock:
            _outstanding += 1
            outstanding = _outstanding
        threading.Thread(target=_handle, args=(frame, outstanding), daemon=True).start()


if __name__ == "__main__":
    main()
