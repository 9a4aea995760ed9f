"""Each agent's own buckets (issue 30): the quota is per agent, and it adds up per agent."""

from __future__ import annotations

import re
from typing import Any

import pytest
from pydantic import ValidationError

from bus import AGENT_BUCKETS, ARTIFACTS, BUCKETS, STREAM_FAMILIES, AccountLimits, Quotas
from bus._quotas import (
    AGENT_BUCKET_NAMES,
    AGENT_STREAM_NAMES,
    DEFAULT_BUCKET_BYTES,
    DEFAULT_STREAM_BYTES,
    MIB,
)


def test_the_agents_buckets_are_no_shared_bucket() -> None:
    assert tuple(spec.name for spec in AGENT_BUCKETS) == AGENT_BUCKET_NAMES
    assert not {spec.name for spec in BUCKETS} & set(AGENT_BUCKET_NAMES)
    waits, marks = AGENT_BUCKETS
    assert (waits.history, waits.ttl_s, waits.direct) == (1, 2 * 24 * 3600.0, True)
    # An agent's quarantine marks: its own, so filling them stops no other actor's guard.
    assert (marks.history, marks.ttl_s, marks.direct, marks.marks) == (
        1,
        8 * 24 * 3600.0,
        True,
        True,
    )


def test_each_agents_waits_count_once_per_agent() -> None:
    quotas = Quotas(bucket_bytes={"waits": 4 * MIB})
    assert quotas.bucket_max_bytes("waits") == 4 * MIB
    shared = sum(v for k, v in DEFAULT_BUCKET_BYTES.items() if k not in AGENT_BUCKET_NAMES)
    streams = sum(v for k, v in DEFAULT_STREAM_BYTES.items() if k not in AGENT_STREAM_NAMES)
    assert quotas.total_bytes(agents=0) == streams + shared
    own = 4 * MIB + 1 * MIB + 8 * MIB  # its waits, its marks, its reminders
    assert quotas.total_bytes(agents=10) == streams + shared + 10 * own


def test_the_defaults_leave_room_for_fifty_agents_in_the_account() -> None:
    """docs/quotas.md: the default account limits hold the default quotas with 50 agents at
    three replicas, bytes and streams alike."""
    limits, quotas = AccountLimits(), Quotas()
    assert quotas.bucket_max_bytes("waits") == 16 * MIB
    assert 3 * quotas.total_bytes(agents=50) <= limits.max_file
    shared_streams = len(DEFAULT_STREAM_BYTES) - len(AGENT_STREAM_NAMES)
    own = len(AGENT_BUCKETS) + len(AGENT_STREAM_NAMES)
    streams = shared_streams + len(BUCKETS) + 1 + 50 * own  # 1: the artifacts' object store
    assert streams <= limits.max_streams


@pytest.mark.parametrize(
    ("table", "named"),
    [
        ({"stream_bytes": {"audti": 4 << 30}}, "no stream is named audti"),
        ({"bucket_bytes": {"wait": 64 * MIB}}, "no bucket is named wait"),
        ({"stream_bytes": {"audit": 1024}}, "at least 1 MiB each (too small: audit)"),
    ],
)
def test_a_quota_names_a_stream_or_bucket_there_is(table: dict[str, Any], named: str) -> None:
    """A newcomer's walk set `PARLEY_QUOTAS='{"stream_bytes": {"audti": …}}'`: merged in,
    ignored, and the audit stream kept its default, with nothing said."""
    with pytest.raises(ValidationError, match=re.escape(named)):
        Quotas(**table)
    assert Quotas(stream_bytes={"agent_timers": 16 * MIB}).stream_max_bytes("agent_timers") == (
        16 * MIB
    )


def test_the_quotas_name_every_stream_and_bucket_there_is() -> None:
    """A quota table refuses names it does not know: every stream and bucket must be one
    (`tool_runs` and `llm_runs` were missing, so their quotas were refused and left out of
    the account's sizing)."""
    streams = {*STREAM_FAMILIES, *AGENT_STREAM_NAMES}
    buckets = {spec.name for spec in (*BUCKETS, *AGENT_BUCKETS)} | {ARTIFACTS}
    assert set(DEFAULT_STREAM_BYTES) == streams
    assert set(DEFAULT_BUCKET_BYTES) == buckets
