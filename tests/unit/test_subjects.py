"""Subject tokens: nothing a caller passes can widen or redirect a subject."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from schemas import Namespace, SubjectTokenError, check_token

NS = Namespace()
BUILDERS = (NS.submit, NS.deliver, NS.decisions, NS.timelines, NS.dead)


@pytest.mark.parametrize(
    "bad", ["", "*", ">", "a.b", "a*", "gpt>", "UPPER", "sp ace", "x" * 65, "ü"]
)
@pytest.mark.parametrize("build", BUILDERS, ids=lambda b: b.__name__)
def test_injection_refused(build: object, bad: str) -> None:
    with pytest.raises(SubjectTokenError):
        build(bad)  # type: ignore[operator]


def test_audit_checks_both_tokens() -> None:
    assert NS.audit("tenant_abc", "gpt") == "parley.audit.tenant_abc.gpt"
    with pytest.raises(SubjectTokenError):
        NS.audit("tenant.*", "gpt")
    with pytest.raises(SubjectTokenError):
        NS.audit("tenant", ">")


def test_a_timeline_checks_its_owner_and_its_session() -> None:
    assert NS.events("person-alice", "s1") == "parley.events.person-alice.s1"
    assert NS.timelines("person-alice") == "parley.events.person-alice.*"
    assert NS.wildcard("events") == "parley.events.*.*"
    with pytest.raises(SubjectTokenError):
        NS.events("*", "s1")  # every owner's timeline of s1
    with pytest.raises(SubjectTokenError):
        NS.events("cli", ">")


def test_namespace_itself_is_a_token() -> None:
    with pytest.raises(SubjectTokenError):
        Namespace("a.b")


def test_names() -> None:
    assert NS.submit("gpt") == "parley.submit.gpt"
    assert NS.deliver("byte-doc") == "parley.deliver.byte-doc"
    assert NS.stream("submit") == "PARLEY_SUBMIT"
    assert NS.bucket("sessions") == "parley_sessions"
    assert NS.agent_bucket("waits", "byte-doc") == "parley_waits_byte-doc"
    assert NS.wildcard("audit") == "parley.audit.*.*"
    assert NS.inbox_prefix("gpt") == "_INBOX_gpt"


def test_an_agents_bucket_takes_only_a_token_as_its_owner() -> None:
    """An owner with a `.` would make a bucket name JetStream refuses, or another's."""
    for owner in ("a.b", "*", "", "x" * 65):
        with pytest.raises(SubjectTokenError):
            NS.agent_bucket("waits", owner)


@given(st.text(max_size=80))
def test_any_accepted_token_is_exactly_one_literal_token(token: str) -> None:
    try:
        check_token(token)
    except SubjectTokenError:
        assert any(c not in "abcdefghijklmnopqrstuvwxyz0123456789_-" for c in token) or not (
            1 <= len(token) <= 64
        )
        return
    subject = NS.deliver(token)
    assert subject.split(".") == ["parley", "deliver", token]
    assert "*" not in subject and ">" not in subject
