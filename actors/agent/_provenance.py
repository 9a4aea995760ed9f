"""Where what a brain is shown came from, for its model calls' `context_metadata` (seed 002
§12.2 `sourceProvenance`; §19.4, prompt injection from local content).

A brain asked again after a round of requests is shown their results: files a tool read,
a command's output, a page fetched, another agent's answer. The gateway brain's next model
call says where each came from, as the tool runtime labelled it (its result's `provenance`:
the capability, the path or URL, the trust) or as the host knows it (another agent's answer
is untrusted data from that agent). The gate shows the person these sources on their
timeline with the call (`llm_request_started`), never the words.

The host redacts nothing itself (the gateway's request guardrails do, and report it), so
`redaction_applied` stays false.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from actors.delegation import AgentRequest, RequestResult, ToolRound, UseTool, target_of
from schemas import SourceProvenance

__all__ = ("MAX_SOURCES", "sources_of")

MAX_SOURCES: Final = 64
"""Sources a model call names at most (the newest ones): a long tool loop's request stays
far below a message's size."""
_TEXT_MAX: Final = 512


def sources_of(rounds: Sequence[ToolRound]) -> tuple[SourceProvenance, ...]:
    """Each distinct source of the results of `rounds`, in the order they came, the newest
    `MAX_SOURCES` of a longer loop. A failed result counts too: its text may be a command's
    or a server's words (git's error output, another agent's error)."""
    found: dict[SourceProvenance, None] = {}
    for round_ in rounds:
        for request, result in zip(round_.requests, round_.results, strict=False):
            source = _source(request, result)
            found.pop(source, None)  # seen again: it moves to the newest
            found[source] = None
    return tuple(found)[-MAX_SOURCES:]


def _source(request: AgentRequest, result: RequestResult) -> SourceProvenance:
    if isinstance(request, UseTool):
        given = result.data.get("provenance")
        labelled = given if isinstance(given, dict) else {}
        return SourceProvenance(
            source_type=str(labelled.get("source") or request.capability)[:_TEXT_MAX],
            path=str(labelled.get("locator") or "")[:_TEXT_MAX],
            trust_level=str(labelled.get("trust") or "untrusted")[:_TEXT_MAX],
        )
    name = target_of(request)
    return SourceProvenance(source_type="agent", path=name[:_TEXT_MAX], trust_level="untrusted")
