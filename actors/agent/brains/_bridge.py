"""Seed 000's local agent bridge: NDJSON prompt frames over a child process's stdin/stdout.

The channel rules of seed 000, each enforced here:

- exactly one request in flight per profile: requests queue on a lock;
- a timeout per request (the caller's: 60 s, or 120 s with tool use); a child that misses it
  is killed, because a child still busy with an abandoned request would break the one-in-flight
  rule for the next one;
- one terminal frame per request: the first `desktop.local_prompt.response` with the
  in-flight `request_id` answers it, or (Parley's optional pair, schemas/_frames.py) the first
  `parley.agent_calls.request` with that id, when the request offered agents to call;
- an agent-calls frame for the in-flight request that offered no agents, or that cannot be
  read, is a violation that fails the request at once with `INVALID_REQUEST` (not retryable:
  the child would answer the same again), rather than leaving it to time out;
- frames with an unknown `request_id` (a second terminal frame, a late answer, a made-up id),
  lines that are not frames, and oversize lines are ignored and counted as protocol violations;
- a child that exits or closes stdout mid-request fails that request at once with
  `AGENT_UNAVAILABLE` (retryable), never a hang; the next request starts a fresh child.

The child's stderr is passed through to the host's, so its logs land in the host's log. The child
dies with the host however the host ends (a parent-death signal, bus/_lifeline.py).
"""

from __future__ import annotations

import asyncio
import logging
import shutil
from collections.abc import Sequence
from dataclasses import dataclass

import msgspec

from actors.agent.brains._protocol import BrainError
from bus import owned_argv
from schemas import (
    AgentCallsRequest,
    DecodeError,
    ErrorCode,
    LocalPromptRequest,
    LocalPromptResponse,
    decode_frame,
    encode,
)

__all__ = ("LocalAgentBridge", "TerminalFrame")

TerminalFrame = LocalPromptResponse | AgentCallsRequest
"""What answers a request: the child's response, or the agents it wants called first."""

log = logging.getLogger("parley.actors.bridge")

_STOP_GRACE_S = 2.0
_AGENT_CALLS = str(AgentCallsRequest.__struct_config__.tag)


def _unavailable(message: str) -> BrainError:
    return BrainError(ErrorCode.AGENT_UNAVAILABLE, message, retryable=True)


def _invalid(message: str) -> BrainError:
    return BrainError(ErrorCode.INVALID_REQUEST, message, retryable=False)


class _Addressed(msgspec.Struct):
    """Just enough of a line to tell which request an unreadable frame was meant for."""

    type: str = ""
    request_id: str = ""


@dataclass(frozen=True, slots=True)
class _InFlight:
    request_id: str
    answer: asyncio.Future[TerminalFrame]
    offers_agents: bool


class LocalAgentBridge:
    """One local agent child process and its prompt channel."""

    def __init__(self, command: Sequence[str], *, max_frame_bytes: int = 1024 * 1024) -> None:
        self._command = tuple(command)
        self._limit = max_frame_bytes
        self._lock = asyncio.Lock()
        self._process: asyncio.subprocess.Process | None = None
        self._reader: asyncio.Task[None] | None = None
        self._in_flight: _InFlight | None = None
        self._closed = False
        self.violations = 0
        """Protocol violations seen so far (seed 000: ignored and logged)."""
        self.starts = 0
        """How many times a child was started (1 + restarts)."""

    @property
    def pid(self) -> int | None:
        """The running child's pid, if one runs."""
        process = self._process
        return process.pid if process is not None and process.returncode is None else None

    async def start(self) -> None:
        """Start the child now, so a broken command fails at start rather than at a call."""
        async with self._lock:
            await self._spawn()

    async def request(self, frame: LocalPromptRequest, timeout: float) -> TerminalFrame:
        """Send one request and wait for its terminal frame.

        Raises:
            BrainError: AGENT_UNAVAILABLE when the child cannot be started, dies, or does not
                answer within `timeout`; INVALID_REQUEST when it asks for agents the request
                did not offer, or in a frame that cannot be read.
        """
        async with self._lock:
            if self._closed:
                raise _unavailable("the local agent bridge is closed")
            process = self._process
            if process is None or process.returncode is not None:
                process = await self._spawn()
            if process.stdin is None:
                raise RuntimeError("local agent started without a stdin pipe")
            answer: asyncio.Future[TerminalFrame] = asyncio.get_running_loop().create_future()
            offers_agents = not isinstance(frame.agents, msgspec.UnsetType)
            self._in_flight = _InFlight(frame.request_id, answer, offers_agents)
            try:
                try:
                    process.stdin.write(encode(frame) + b"\n")
                    await process.stdin.drain()
                except (BrokenPipeError, ConnectionResetError) as exc:
                    raise _unavailable(f"the local agent's stdin is closed: {exc!r}") from None
                try:
                    async with asyncio.timeout(timeout):
                        return await answer
                except TimeoutError:
                    log.warning(
                        "local agent timed out; restarting it",
                        extra={"request_id": frame.request_id, "timeout_s": timeout},
                    )
                    await self._stop_child(process)
                    raise _unavailable(
                        f"the local agent gave no response within {timeout:g} s"
                    ) from None
            finally:
                self._in_flight = None

    async def close(self) -> None:
        """Stop the child (stdin closed, then SIGTERM, then SIGKILL); safe to repeat."""
        self._closed = True
        if self._process is not None:
            await self._stop_child(self._process)
        if self._reader is not None:
            await asyncio.gather(self._reader, return_exceptions=True)

    async def _spawn(self) -> asyncio.subprocess.Process:
        if shutil.which(self._command[0]) is None:  # the shim would only say so on stderr
            raise _unavailable(
                f"cannot start the local agent {self._command[0]!r}: not found or not executable"
            )
        try:
            # Forked by the host's loop thread, its main thread: the child dies with the host,
            # even when the host is SIGKILLed (bus/_lifeline.py).
            process = await asyncio.create_subprocess_exec(
                *owned_argv(self._command),
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                limit=self._limit,
            )
        except OSError as exc:
            raise _unavailable(
                f"cannot start the local agent {self._command[0]!r}: {exc}"
            ) from None
        if self._reader is not None:  # the previous child's reader has seen its EOF by now
            await asyncio.gather(self._reader, return_exceptions=True)
        self._process = process
        self.starts += 1
        self._reader = asyncio.create_task(self._read(process), name=f"bridge-reader-{process.pid}")
        log.info("local agent started", extra={"pid": process.pid, "starts": self.starts})
        return process

    async def _read(self, process: asyncio.subprocess.Process) -> None:
        """Read the child's frames until EOF, answering the in-flight request."""
        if process.stdout is None:
            raise RuntimeError("local agent started without a stdout pipe")
        while True:
            try:
                line = await process.stdout.readline()
            except ValueError:  # longer than the limit; asyncio dropped it
                self._violation("frame over the size limit", f"limit {self._limit} bytes")
                continue
            if not line:
                break
            if line.strip():
                self._on_line(line)
        try:  # stdout closed: the child is exiting, or useless if it is not
            async with asyncio.timeout(_STOP_GRACE_S):
                code: int | None = await process.wait()
        except TimeoutError:
            code = None
            await self._stop_child(process)
        in_flight = self._in_flight
        if in_flight is not None and not in_flight.answer.done():
            in_flight.answer.set_exception(
                _unavailable(
                    f"the local agent exited (code {code}) during request {in_flight.request_id}"
                )
            )
        if not self._closed:
            log.warning("local agent exited", extra={"pid": process.pid, "code": code})

    def _on_line(self, line: bytes) -> None:
        try:
            frame = decode_frame(line, max_bytes=self._limit)
        except DecodeError as exc:
            self._violation("not a frame", str(exc)[:200])
            self._fail_unreadable_agent_calls(line, exc)
            return
        if isinstance(frame, LocalPromptRequest):
            self._violation("a request frame from the agent", frame.request_id)
            return
        in_flight = self._in_flight
        if in_flight is None or in_flight.request_id != frame.request_id or in_flight.answer.done():
            self._violation("unknown request_id", frame.request_id)
            return
        if isinstance(frame, AgentCallsRequest) and not in_flight.offers_agents:
            self._violation("agent calls where no agents were offered", frame.request_id)
            in_flight.answer.set_exception(
                _invalid(
                    f"the local agent sent {_AGENT_CALLS} for request {frame.request_id}, "
                    "which offered no agents to call"
                )
            )
            return
        in_flight.answer.set_result(frame)

    def _fail_unreadable_agent_calls(self, line: bytes, error: DecodeError) -> None:
        """An agent-calls frame for the request in flight that cannot be read ends it now.

        A response that cannot be read stays ignored (seed 000), but this frame is Parley's
        own and a child that sent it is not going to answer otherwise: waiting for the
        timeout would only kill a child that did nothing but make a mistake.
        """
        try:
            addressed = msgspec.json.decode(line, type=_Addressed)
        except (msgspec.DecodeError, UnicodeDecodeError, RecursionError):
            return
        in_flight = self._in_flight
        if (
            addressed.type != _AGENT_CALLS
            or in_flight is None
            or in_flight.request_id != addressed.request_id
            or in_flight.answer.done()
        ):
            return
        in_flight.answer.set_exception(
            _invalid(f"the local agent's {_AGENT_CALLS} frame is malformed: {error.detail[:300]}")
        )

    def _violation(self, reason: str, detail: str) -> None:
        self.violations += 1
        log.warning(
            "local agent protocol violation; frame ignored",
            extra={"reason": reason, "detail": detail, "violations": self.violations},
        )

    async def _stop_child(self, process: asyncio.subprocess.Process) -> None:
        if process.returncode is not None:
            return
        if process.stdin is not None:
            process.stdin.close()
        for send in (process.terminate, process.kill):
            try:
                send()
            except ProcessLookupError:
                return
            try:
                async with asyncio.timeout(_STOP_GRACE_S):
                    await process.wait()
                return
            except TimeoutError:
                continue
