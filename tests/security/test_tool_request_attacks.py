"""Tool requests against the gate's own records (issue 31's attack list), through its pure core.

Each attack is made by a principal holding only what its profile gives it; each must be
refused before the tool runtime sees it, with the code a caller is told. The runtime checks
the same again (tests/security/test_tool_path_attacks.py, test_tool_approvals.py).
"""

from __future__ import annotations

from typing import Any, cast

import msgspec

from actors.gate._decide import Allow
from actors.gate._plan import Deny
from actors.gate._roles import told_to_receiver
from actors.gate._tool_checks import approval_summary
from bus import SESSION, BundleStore
from schemas import Capability, Control, ErrorCode, ToolRequest, ToolResult, new_id, utc_now
from tests.support.gatesim import GateSim, bundle, call, delegation, human, sub_agent

ROUTER = {"start_traces": True, "allowed_targets": ("a", "b"), "max_hop_count": 5}
CLI = {"start_traces": True, "speaks_for_person": True, "allowed_targets": ("router", "tools")}
WRITES = Capability(name="File.Write", allowed_paths=("src",))
READS = Capability(name="File.Read", allowed_paths=(".",), blocked_paths=("secrets",))


def _sim(**profiles: dict[str, Any]) -> GateSim:
    policy = bundle(router=ROUTER, cli=CLI, tools={}, **profiles)
    return GateSim(policy)


def _request(capability: str, **arguments: Any) -> ToolRequest:
    return ToolRequest(
        id=new_id(),
        created_at=utc_now(),
        tool_name=capability,
        arguments=arguments,
        session_id="s-1",
        task_id="t-1",
        step_id=new_id(),
    )


def _in_session(sim: GateSim, agent: str) -> str:
    root = human()
    assert isinstance(sim.submit("cli", root), Allow)
    turn = call(agent)
    assert isinstance(sim.submit("router", turn, cause=root.id), Allow)
    return turn.id


def _denied(outcome: Allow | Deny, code: ErrorCode, rule: str) -> Deny:
    assert isinstance(outcome, Deny), outcome
    assert (outcome.code, outcome.rule) == (code, rule), outcome
    return outcome


AGENT = {"allowed_targets": ("router", "tools", "b"), "capabilities": ("File.Read", "File.Write")}


def test_a_capability_the_profile_does_not_name_is_refused() -> None:
    sim = _sim(a={"allowed_targets": ("router", "tools")})
    turn = _in_session(sim, "a")
    _denied(sim.submit("a", _request("Shell.Exec", argv=["ls"]), cause=turn),
            ErrorCode.TOOL_NOT_ALLOWED, "tools_allowed")  # fmt: skip


def test_paths_outside_the_scope_are_refused_before_delivery() -> None:
    sim = _sim(a={**AGENT, "scopes": (READS, WRITES)})
    turn = _in_session(sim, "a")
    for path in ("/etc/passwd", "../outside.txt", "src/../../x", "docs/x"):
        refused = sim.submit("a", _request("File.Write", path=path, content="x"), cause=turn)
        assert isinstance(refused, Deny) and refused.code == ErrorCode.CAPABILITY_DENIED, path
    refused = sim.submit("a", _request("File.Read", path="secrets/key"), cause=turn)
    _denied(refused, ErrorCode.CAPABILITY_DENIED, "blocked_paths")
    assert isinstance(sim.submit("a", _request("File.Write", path="src/ok.py", content=""),
                                 cause=turn), Allow)  # fmt: skip


def test_a_delegated_agent_works_within_its_callers_capabilities_and_scopes() -> None:
    """`b` may write anywhere in `src` and delete; `a` may write only in `src/a`. Called by a
    person's router, `b` writes `src/b`; delegated to by `a`, it works within `a`'s powers: it
    may not delete at all, and may write only where both may (the scopes' intersection)."""
    mine = Capability(name="File.Write", allowed_paths=("src/a",))
    sim = _sim(
        a={"allowed_targets": ("router", "tools", "b"), "capabilities": ("File.Write",),
           "scopes": (mine,)},
        b={"allowed_targets": ("router", "tools"),
           "capabilities": ("File.Write", "File.Delete"),
           "scopes": (WRITES, Capability(name="File.Delete", allowed_paths=("src",)))},
    )  # fmt: skip
    elsewhere = {"path": "src/b.py", "content": "x"}
    direct = _in_session(sim, "b")
    assert isinstance(sim.submit("b", _request("File.Write", **elsewhere), cause=direct), Allow)
    turn = _in_session(sim, "a")
    to_b = delegation("a", "b", user_id="")
    assert isinstance(sim.submit("a", to_b, cause=turn), Allow)
    _denied(sim.submit("b", _request("File.Write", **elsewhere), cause=to_b.id),
            ErrorCode.CAPABILITY_DENIED, "allowed_paths")  # fmt: skip
    _denied(sim.submit("b", _request("File.Delete", path="src/a/x"), cause=to_b.id),
            ErrorCode.TOOL_NOT_ALLOWED, "tools_allowed")  # fmt: skip
    inside = _request("File.Write", path="src/a/x.py", content="x")
    assert isinstance(sim.submit("b", inside, cause=to_b.id), Allow)


def test_a_tool_its_caller_has_but_not_in_the_chains_scope_is_refused() -> None:
    """Narrowing by names is not enough: `a` names File.Write yet its bundle scope allows
    no path at all, so a callee of `a` may not write anywhere."""
    sim = _sim(
        a={"allowed_targets": ("router", "tools", "b"), "capabilities": ("File.Write",)},
        b={"allowed_targets": ("router", "tools"), "capabilities": ("File.Write",),
           "scopes": (WRITES,)},
    )  # fmt: skip
    turn = _in_session(sim, "a")
    to_b = delegation("a", "b", user_id="")
    assert isinstance(sim.submit("a", to_b, cause=turn), Allow)
    _denied(sim.submit("b", _request("File.Write", path="src/x", content=""), cause=to_b.id),
            ErrorCode.CAPABILITY_DENIED, "allowed_paths")  # fmt: skip


def test_a_sub_agent_is_held_to_the_tools_its_caller_allowed_it() -> None:
    sim = _sim(
        a={**AGENT, "allow_sub_agent_calls": True, "scopes": (READS, WRITES)},
        b={**AGENT, "scopes": (READS, WRITES)},
    )
    turn = _in_session(sim, "a")
    narrowed = sub_agent("a", "b", tools=("File.Read",))
    assert isinstance(sim.submit("a", narrowed, cause=turn), Allow)
    _denied(sim.submit("b", _request("File.Write", path="src/y", content=""), cause=narrowed.id),
            ErrorCode.TOOL_NOT_ALLOWED, "tools_allowed")  # fmt: skip


def test_a_request_naming_another_capability_than_its_tool_is_refused() -> None:
    sim = _sim(a={**AGENT, "scopes": (READS, WRITES)})
    turn = _in_session(sim, "a")
    forged = _request("File.Read", path="notes")
    forged = ToolRequest(**{**{f: getattr(forged, f) for f in forged.__struct_fields__},
                            "capability": "Shell.Exec"})  # fmt: skip
    _denied(sim.submit("a", forged, cause=turn), ErrorCode.INVALID_REQUEST, "capability_name")


def test_an_agent_cannot_approve_and_a_forged_approved_flag_approves_nothing() -> None:
    """Only a principal that speaks for a person may send a decision; a request that says
    it is approved is checked, and held, like any other (the runtime holds it)."""
    held = Capability(name="File.Write", allowed_paths=("src",), requires_approval=True)
    sim = _sim(a={**AGENT, "scopes": (READS, held)})
    turn = _in_session(sim, "a")
    request = _request("File.Write", path="src/z", content="", approved=True)
    _denied(sim.submit("a", request, cause=turn), ErrorCode.INVALID_REQUEST, "arguments")
    approve = Control(id=new_id(), created_at=utc_now(), action="approve", session_id="s-1",
                      target="tools", approval_id=request.id)  # fmt: skip
    _denied(sim.submit("a", approve, cause=turn), ErrorCode.UNAUTHORIZED, "speaks_for_person")


def test_the_runtime_cannot_answer_a_step_it_was_not_asked() -> None:
    """A result names the step of the request it answers: another step's id is a forgery."""
    sim = _sim(a={**AGENT, "scopes": (READS, WRITES)})
    turn = _in_session(sim, "a")
    asked = _request("File.Read", path="notes")
    assert isinstance(sim.submit("a", asked, cause=turn), Allow)
    other = ToolResult(
        id=new_id(),
        created_at=utc_now(),
        tool_name="File.Read",
        session_id="s-1",
        task_id="t-1",
        step_id="another",
        status="succeeded",
    )
    _denied(sim.submit("tools", other, cause=asked.id, as_is=True),
            ErrorCode.FORGED_HEADER, "answer_names_another_call")  # fmt: skip


def test_the_runtime_is_told_the_traces_session_not_the_one_a_request_names() -> None:
    """An agent working in one person's session names another's in its request: the gate
    tells the runtime its trace's session, whose workspace alone it works in."""
    sim = _sim(a={**AGENT, "scopes": (READS, WRITES)})
    root = msgspec.structs.replace(human(), session_id="s-mine")  # a person's session
    assert isinstance(sim.submit("cli", root), Allow)
    turn = call("a")
    assert isinstance(sim.submit("router", turn, cause=root.id), Allow)
    request = _request("File.Write", path="src/x", content="")
    request = msgspec.structs.replace(request, session_id="s-someone-elses")
    admitted = sim.submit("a", request, cause=turn.id)
    assert isinstance(admitted, Allow)
    bundles = BundleStore(cast(Any, None), {}, "t")
    told = told_to_receiver(bundles, request, admitted.route.position)
    assert told[SESSION] == "s-mine"


def test_a_held_requests_summary_shows_what_it_does_first_and_says_a_cut() -> None:
    padded = _request("Shell.Exec", stdin="x" * 5000, cwd="././" * 200, argv=["rm", "-rf", "src"])
    summary = approval_summary(padded)
    assert summary.startswith("Shell.Exec rm -rf src"), summary
    assert "stdin=<5000 characters>" in summary and "cwd=<800 characters>" in summary
    long = approval_summary(_request("Shell.Exec", argv=["echo", *["word"] * 200]))
    assert "(cut: 1015 characters in all" in long and len(long) < 500, long
    write = _request("File.Write", content="y" * 900, path="src/app.py")
    assert approval_summary(write).startswith('File.Write path="src/app.py"')
