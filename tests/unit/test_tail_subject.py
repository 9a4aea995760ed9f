"""`parley tail SUBJECT` refuses a subject no subscription can have before it connects, with
what a subject looks like (it was an unexpected error from deep in nats-py, exit 1)."""

from __future__ import annotations

import pytest

from tools.tail import NotASubject, check_subject


@pytest.mark.parametrize("subject", ["parley.>", "parley.events.*", "a.b.c", ">"])
def test_a_subject_passes(subject: str) -> None:
    check_subject(subject)


@pytest.mark.parametrize("subject", ["bad subject", "a..b", ".a", "a.", "", "a.\tb", "a.>.b"])
def test_a_string_that_is_no_subject_is_refused_saying_what_one_is(subject: str) -> None:
    with pytest.raises(NotASubject, match="is not a subject: dot-separated tokens"):
        check_subject(subject)
