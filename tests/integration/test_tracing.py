"""`make demo` with the standard OTEL_* variables set: the person (the demo process), the gate,
the router, both agents and the auditor, all real processes, export their spans over OTLP/HTTP
to a receiver in this test, which decodes the real protobuf. The session arrives as one trace:
one root, every other span's parent in it, named after seed 002 §18's boundaries, with the
envelope's kind, sender, target, decision code, session and hop.
"""

from __future__ import annotations

from collections import Counter

from tests.support.otlp import ReceivedSpan, otel_env, otlp_receiver
from tests.support.processes import parley_env
from tests.support.system import finished, parley_cli

_PRODUCER, _CONSUMER = 4, 5  # the protobuf's SpanKind values


def _ancestors(span: ReceivedSpan, by_id: dict[str, ReceivedSpan]) -> list[ReceivedSpan]:
    """`span`'s parents, nearest first, up to the root (a cycle fails the test)."""
    chain: list[ReceivedSpan] = []
    while span.parent_id:
        span = by_id[span.parent_id]
        assert span not in chain, "the parent links form a cycle"
        chain.append(span)
    return chain


async def test_the_demo_session_is_one_trace_tree_at_an_otlp_receiver() -> None:
    with otlp_receiver() as receiver:
        env = parley_env("unused", "unused") | otel_env(receiver.endpoint)
        for name in ("NATS_URL", "PARLEY_NAMESPACE", "OTEL_SERVICE_NAME"):
            env.pop(name, None)
        # Every process flushes its spans before it exits: once the demo is done, all are in.
        code, lines = await finished(parley_cli(env, "demo"), timeout=180)
        spans = list(receiver.spans)
        assert receiver.errors == []
    assert code == 0, "\n".join(lines)

    roots = [span for span in spans if span.attributes.get("parley.kind") == "human_message"]
    root = next(span for span in roots if not span.parent_id)
    assert (root.name, root.service, root.kind) == (
        "Session Coordination publish",
        "parley-person",
        _PRODUCER,
    )
    # A trace Parley starts is named by its Parley trace id.
    assert root.trace_id == str(root.attributes["parley.trace_id"]).replace("-", "")
    session = root.attributes["parley.session"]

    trace = [span for span in spans if span.trace_id == root.trace_id]
    by_id = {span.span_id: span for span in trace}
    assert len(by_id) == len(trace), "span ids repeat"
    assert [span for span in trace if not span.parent_id] == [root]
    assert all(span.parent_id in by_id for span in trace if span is not root)
    assert all(_ancestors(span, by_id)[-1:] in ([root], []) for span in trace)

    services = Counter(span.service for span in trace)
    assert set(services) == {
        "parley-person",
        "parley-gate",
        "parley-router",
        "parley-agent",
        "parley-auditor",
    }, services
    names = {(span.service, span.name) for span in trace}
    assert {
        ("parley-gate", "Policy and Guardrails handle"),
        ("parley-gate", "Policy and Guardrails publish"),
        ("parley-router", "Session Coordination handle"),
        ("parley-router", "Session Coordination publish"),
        ("parley-agent", "Agent Execution handle"),
        ("parley-agent", "Agent Execution publish"),
    } <= names, names

    # Each of the four rounds: person → gate → router → gate → agent, parent by parent.
    calls = [span for span in trace if span.name == "Agent Execution handle"]
    assert Counter(span.instance for span in calls) == {"claude": 2, "gpt": 2}
    for call in calls:
        agent = call.instance
        assert call.kind == _CONSUMER
        assert call.attributes["parley.kind"] == "agent_call"
        assert call.attributes["parley.sender"] == "router"
        assert call.attributes["parley.target"] == agent
        assert call.attributes["parley.hop"] == 1
        assert call.attributes["parley.session"] == session
        chain = _ancestors(call, by_id)
        forwarded, decided, asked = chain[0], chain[1], chain[2]
        assert (forwarded.instance, forwarded.name) == ("gate", "Policy and Guardrails publish")
        assert forwarded.attributes["parley.target"] == agent
        assert (decided.instance, decided.name) == ("gate", "Policy and Guardrails handle")
        assert decided.attributes["parley.decision_code"] == "ALLOW"
        assert decided.attributes["parley.sender"] == "router"
        assert (asked.instance, asked.name) == ("router", "Session Coordination publish")
        assert chain[-1] is root
        assert ("router", "Session Coordination handle") in {(s.instance, s.name) for s in chain}
        answers = [span for span in trace if span.parent_id == call.span_id]
        assert [(s.name, s.attributes["parley.kind"]) for s in answers] == [
            ("Agent Execution publish", "agent_response")
        ]
    decisions = [span for span in trace if span.attributes.get("parley.kind") == "decision"]
    published = [span for span in decisions if span.kind == _PRODUCER]
    assert len(published) == 9  # the gate's nine decisions the demo prints
    assert {span.attributes["parley.decision_code"] for span in published} == {"ALLOW"}
    # The auditor handles each decision under the span that published it (the demo may stop
    # it before it has read the last ones: it reads them on its next start).
    audited = [span for span in decisions if span.service == "parley-auditor"]
    assert audited
    assert {span.parent_id for span in audited} <= {span.span_id for span in published}
