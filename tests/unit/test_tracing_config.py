"""Tracing is configured by the standard OTEL_* variables alone and is off without them; on, a
publish outside any span is a trace's root named by its Parley trace id, exported over
OTLP/HTTP to a real receiver in this test."""

from __future__ import annotations

import logging

import pytest

from bus import (
    TRACEPARENT,
    TraceHeaders,
    _tracing,
    configure_tracing,
    shutdown_tracing,
    trace_publish,
    traceparent_for,
)
from bus._otel_sdk import EXPORTER_LOG, CollectorOutage
from bus._tracing import boundary_of, continue_carried
from schemas import HumanMessage, encode, new_id, utc_now
from tests.support.otlp import otel_env, otlp_receiver

_OTEL = (
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    "OTEL_SDK_DISABLED",
    "OTEL_TRACES_EXPORTER",
    "OTEL_SERVICE_NAME",
    "OTEL_RESOURCE_ATTRIBUTES",
)


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in _OTEL:
        monkeypatch.delenv(name, raising=False)
    shutdown_tracing()


@pytest.mark.parametrize(
    "env",
    [
        {},
        {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9", "OTEL_SDK_DISABLED": "true"},
        {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9", "OTEL_TRACES_EXPORTER": "none"},
    ],
)
def test_tracing_is_off_unless_an_endpoint_asks_for_it(
    env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert configure_tracing("gate", "gate") is False
    assert _tracing.tracer is None
    headers = TraceHeaders(trace_id=new_id()).to_headers(new_id())
    before = dict(headers)
    trace_publish("parley.submit.cli", b"{}", headers)
    assert headers == before  # off, the header stays the one derived from the ids


def test_a_root_publish_is_exported_under_the_parley_trace_id(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    message = HumanMessage(
        id=new_id(), created_at=utc_now(), text="hi", call_id=new_id(), session_id=new_id()
    )
    with otlp_receiver() as receiver:
        for name, value in otel_env(receiver.endpoint).items():
            monkeypatch.setenv(name, value)
        assert configure_tracing("person", "alice") is True
        headers = TraceHeaders(trace_id=message.id, origin="alice").to_headers(message.id)
        trace_publish("parley.submit.alice", encode(message), headers)
        shutdown_tracing()  # exports what is batched before it returns
        spans = list(receiver.spans)
    assert _tracing.tracer is None
    [span] = spans
    trace_hex = message.id.replace("-", "")
    assert headers[TRACEPARENT] != traceparent_for(message.id, message.id)
    assert headers[TRACEPARENT] == f"00-{trace_hex}-{span.span_id}-01"
    assert (span.trace_id, span.parent_id, span.name) == (
        trace_hex,
        "",
        "Session Coordination publish",
    )
    assert (span.service, span.instance) == ("parley-person", "alice")
    assert span.attributes["parley.kind"] == "human_message"
    assert span.attributes["parley.target"] == "router"
    assert span.attributes["parley.session"] == message.session_id
    assert span.attributes["parley.hop"] == 0


def test_otel_service_name_wins_over_the_default(monkeypatch: pytest.MonkeyPatch) -> None:
    with otlp_receiver() as receiver:
        for name, value in otel_env(receiver.endpoint).items():
            monkeypatch.setenv(name, value)
        monkeypatch.setenv("OTEL_SERVICE_NAME", "my-parley")
        assert configure_tracing("gate", "gate")
        headers = TraceHeaders(trace_id=new_id()).to_headers(new_id())
        trace_publish("parley.deliver.x", b"not json", headers)
        shutdown_tracing()
        [span] = receiver.spans
    assert (span.service, span.instance, span.name) == (
        "my-parley",
        "gate",
        "Policy and Guardrails publish",
    )


def test_boundaries_follow_seed_002() -> None:
    assert boundary_of("gate") == "Policy and Guardrails"
    assert boundary_of("agent") == "Agent Execution"
    assert boundary_of("llm") == "LLM Gateway"
    assert boundary_of("tools") == "Tool Execution"
    assert boundary_of("tools", "tool_result") == "Workspace and Artifacts"
    assert boundary_of("gate", "approval_request") == "Approval"
    assert boundary_of("router") == "Session Coordination"
    assert boundary_of("some-example-actor") == "Session Coordination"


def test_a_sender_cannot_turn_tracing_off_with_its_traceparent_flags(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The flags of an incoming `traceparent` are the sender's claim: `00` (not sampled)
    still gets the receiving actor's span exported."""
    unsampled = f"00-{'ab' * 16}-{'cd' * 8}-00"
    with otlp_receiver() as receiver:
        for name, value in otel_env(receiver.endpoint).items():
            monkeypatch.setenv(name, value)
        assert configure_tracing("relay", "relay")
        with continue_carried(unsampled, "agent_call", {}):
            pass
        shutdown_tracing()
        spans = list(receiver.spans)
    [span] = spans
    assert (span.trace_id, span.parent_id) == ("ab" * 16, "cd" * 8)


def test_a_collector_that_does_not_answer_is_said_once_and_its_return_once(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The SDK's exporter logs three retries and an error for every batch a collector does
    not take; an outage is one line of Parley's, and its end another."""
    caplog.set_level(logging.INFO)
    with otlp_receiver() as receiver:
        for name, value in otel_env(receiver.endpoint).items():
            monkeypatch.setenv(name, value)
        # A batch is given up within 3 s: one retry at least (its first backoff is at most
        # 1.2 s), so the first complaint is a retry's, which names the collector's answer.
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "3")
        assert configure_tracing("gate", "gate") is True
        provider = _tracing._provider
        assert provider is not None
        receiver.unavailable = True
        trace_publish(  # a batch dropped after its retries, each a complaint of the exporter
            "parley.submit.cli", b"{}", TraceHeaders(trace_id=new_id()).to_headers(new_id())
        )
        provider.force_flush()
        receiver.unavailable = False
        trace_publish(
            "parley.submit.cli", b"{}", TraceHeaders(trace_id=new_id()).to_headers(new_id())
        )
        provider.force_flush()
        shutdown_tracing()
        delivered = len(receiver.spans)
    said_records = [r for r in caplog.records if "OTLP collector" in r.getMessage()]
    said = [(r.name, r.levelname, r.getMessage()) for r in said_records]
    exporter = [r for r in caplog.records if r.name == EXPORTER_LOG]
    assert delivered == 1
    assert said == [
        (
            "parley.bus.tracing",
            "WARNING",
            "spans cannot reach the OTLP collector: they are dropped until it answers, and "
            "the exporter's retries are not logged meanwhile",
        ),
        ("parley.bus.tracing", "INFO", "spans reach the OTLP collector again"),
    ]
    [outage] = [r for r in caplog.records if r.levelno == logging.WARNING and r in said_records]
    assert "Service Unavailable" in outage.__dict__["error"]  # the collector's own answer
    assert exporter == [], [r.getMessage() for r in exporter]


def test_an_exporter_complaint_that_is_no_outage_is_not_held() -> None:
    """A batch too large to send is the exporter's to say, every time: taken for an outage,
    it was told as "cannot reach the collector" and every later complaint held."""
    outage = CollectorOutage()
    too_large = logging.LogRecord(
        EXPORTER_LOG, logging.WARNING, __file__, 1, "Dropping span batch: %d bytes", (9,), None
    )
    retry = logging.LogRecord(
        EXPORTER_LOG, logging.WARNING, __file__, 1, "Transient error %s ...", ("503",), None
    )
    assert outage.filter(too_large) and not outage.down
    assert not outage.filter(retry) and outage.down
    assert outage.filter(too_large)  # still said during an outage
    outage.answered()
    assert not outage.down
