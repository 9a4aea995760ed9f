"""Helpers for agent host tests: calls, test profiles, and reading what a host submits."""

from __future__ import annotations

import sys
from pathlib import Path

from nats.js import JetStreamContext

from bus import MSG_ID, SENDER
from schemas import (
    AgentCall,
    AnyEnvelope,
    Namespace,
    TranscriptItem,
    decode_envelope,
    encode,
    new_id,
    utc_now,
)
from tests.support.processes import ProcessOutput

__all__ = ("FAIRY_TALE", "Submitted", "agent_call", "send", "start_agent", "write_profile")

FAIRY_TALE = (
    "Write a 2\u2011paragraph fairy tale\u2014Claude drafts, GPT edits, alternate until done "
    "(\u22644 rounds)."
)
"""Seed 001 §11 test prompt 2, exactly."""


def agent_call(
    target: str,
    goal: str,
    *,
    round: int = 1,
    max_rounds: int = 6,
    session_id: str = "s-1",
    transcript: tuple[TranscriptItem, ...] = (),
    text: str = "",
) -> AgentCall:
    return AgentCall(
        id=new_id(),
        created_at=utc_now(),
        target=target,
        call_id=new_id(),
        session_id=session_id,
        round=round,
        max_rounds=max_rounds,
        goal=goal,
        transcript=transcript,
        text=text,
    )


async def send(
    js: JetStreamContext,
    ns: Namespace,
    receiver: str,
    envelope: AnyEnvelope,
    sender: str = "router",
) -> None:
    """Deliver `envelope` to `receiver` as the gate would, from `sender`."""
    await js.publish(
        ns.deliver(receiver), encode(envelope), headers={SENDER: sender, MSG_ID: envelope.id}
    )


class Submitted:
    """Reads, in order, every envelope an actor submits (any kind)."""

    def __init__(self, js: JetStreamContext, ns: Namespace, actor: str) -> None:
        self._js, self._ns, self._actor = js, ns, actor

    async def open(self) -> Submitted:
        self._sub = await self._js.pull_subscribe(
            self._ns.submit(self._actor),
            durable=f"test-{self._actor}",
            stream=self._ns.stream("submit"),
        )
        return self

    async def next(self, timeout: float = 20.0) -> tuple[dict[str, str], AnyEnvelope]:
        (msg,) = await self._sub.fetch(1, timeout=timeout)
        await msg.ack_sync()
        return dict(msg.headers or {}), decode_envelope(msg.data)

    async def none_left(self, timeout: float = 0.5) -> bool:
        try:
            await self._sub.fetch(1, timeout=timeout)
        except TimeoutError:
            return True
        return False


def write_profile(
    directory: Path, name: str, brain: str, *, script: str = "", extra: str = ""
) -> Path:
    """Write a profile (and its script, if given) under `directory`; return the profile path."""
    directory.mkdir(parents=True, exist_ok=True)
    if script:
        (directory / f"{name}-script.toml").write_text(script)
    path = directory / f"{name}.toml"
    path.write_text(f'name = "{name}"\n{extra}\n[brain]\n{brain}\n')
    return path


def start_agent(profile: str, env: dict[str, str], actor_id: str | None = None) -> ProcessOutput:
    """Start `parley run agent --profile PROFILE` as a real process."""
    extra = ("--id", actor_id) if actor_id else ()
    argv = [sys.executable, "-m", "tools", "run", "agent", "--profile", profile, *extra]
    return ProcessOutput(argv, env, name=actor_id or Path(profile).stem)
