"""Where what a brain is shown came from (actors/agent/_provenance.py): each successful
result's source, as the tool runtime labelled it or as the host knows another agent."""

from __future__ import annotations

from actors.agent._provenance import MAX_SOURCES, sources_of
from actors.delegation import Delegate, RequestResult, ToolRound, UseTool
from schemas import SourceProvenance


def _read(rid: str, path: str, status: str = "success") -> tuple[UseTool, RequestResult]:
    request = UseTool(request_id=rid, capability="File.Read", arguments={"path": path})
    provenance = {"source": "File.Read", "locator": path, "trust": "workspace"}
    result = RequestResult(
        request_id=rid,
        status=status,  # type: ignore[arg-type]
        content="...",
        data={"provenance": provenance},
    )
    return request, result


def _round(*pairs: tuple[object, RequestResult]) -> ToolRound:
    return ToolRound(
        requests=tuple(p[0] for p in pairs),  # type: ignore[misc]
        results=tuple(p[1] for p in pairs),
    )


def test_each_source_once_where_it_was_last_seen_failed_results_too() -> None:
    asked = Delegate(request_id="d1", target_employee="coder", objective="o")
    answered = RequestResult(request_id="d1", status="failed", content="coder's error")
    rounds = [
        _round(_read("r1", "src/a.py"), (asked, answered)),
        _round(_read("r2", "notes.txt", status="failed"), _read("r3", "src/a.py")),
    ]
    assert sources_of(rounds) == (
        SourceProvenance(source_type="agent", path="coder", trust_level="untrusted"),
        SourceProvenance(source_type="File.Read", path="notes.txt", trust_level="workspace"),
        SourceProvenance(source_type="File.Read", path="src/a.py", trust_level="workspace"),
    )


def test_a_result_without_a_label_is_untrusted_and_a_long_loop_is_capped() -> None:
    bare = UseTool(request_id="h", capability="Network.Http")
    got = RequestResult(request_id="h", status="success", content="page")
    assert sources_of([_round((bare, got))]) == (
        SourceProvenance(source_type="Network.Http", trust_level="untrusted"),
    )
    many = [_round(_read(f"r{n}", f"f{n}.txt")) for n in range(MAX_SOURCES + 10)]
    kept = sources_of(many)
    assert len(kept) == MAX_SOURCES
    assert kept[-1].path == f"f{MAX_SOURCES + 9}.txt"  # the newest are kept
