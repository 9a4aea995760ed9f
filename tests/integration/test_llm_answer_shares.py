"""One agent's model calls cannot fill the store every model call's answer is kept in.

The LLM gateway keeps each answer (`llm_runs`, actors/llm/_answers.py) so that a redelivered
request is answered from it, never asked of the provider twice; the bucket is shared by every
person's calls, the same shape an attack review filled in the tool runtime's step records.
Each kept answer is charged to its person and agent (bus/_shares.py): past a share the call is
refused `RATE_LIMITED` before the provider is asked, and nothing is kept. The shares are one
byte here, so the first answer uses the person's up. Real processes (gate, gateway, agent
host) on a real nats-server; the provider is the local OpenAI wire-format server.
"""

from __future__ import annotations

import json
from pathlib import Path

from nats.aio.client import Client as NATS

from bus import EmbeddedServer
from schemas import DelegationResponse, LlmPolicy, Namespace
from tests.integration.test_llm_gateway import FINAL, System, _system, closing
from tests.support.llm_server import openai_completion

__all__ = ("closing",)  # the fixture, used by name

_ONE_BYTE = json.dumps({"model_answer_bytes_per_person": 1, "model_answer_bytes_per_agent": 1})


async def test_past_a_share_a_model_call_is_refused_before_the_provider(
    nc: NATS,
    nats_server: EmbeddedServer,
    namespace: Namespace,
    tmp_path: Path,
    closing: list[System],
) -> None:
    system = await _system(
        nc,
        nats_server,
        namespace,
        tmp_path,
        LlmPolicy(allowed_models=("model-x",)),
        llm_settings={"quotas": _ONE_BYTE},
    )
    closing.append(system)
    system.server.queue(openai_completion(FINAL, prompt_tokens=40, completion_tokens=9))
    first = await system.delegate("Write the parser")
    assert isinstance(first, DelegationResponse) and first.status == "success", first

    system.server.queue(openai_completion(FINAL, prompt_tokens=40, completion_tokens=9))
    second = await system.delegate("Write the tests")
    assert not (isinstance(second, DelegationResponse) and second.status == "success"), second
    assert "RATE_LIMITED" in repr(second), second
    assert len(system.server.requests) == 1  # the provider was asked once: the first call
    gateway = system.processes[1]
    _, refused = await gateway.wait_line("model call refused: a share is full")
    assert "RATE_LIMITED" not in refused  # the log says why, the answer says the code
    assert "the LLM gateway's answers keeps" in refused and "person cli" in refused, refused
