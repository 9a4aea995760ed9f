"""The artifact store's shares as `[quotas]` sets them (bus/_quotas.py): an agent's share is
at least a person's, so one person cannot use an agent up for everyone else (an attack
review's alice filled the agent's share, a quarter of the store like hers, and bob's upload
through the same agent was refused for a week)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from bus import Quotas

MIB = 1 << 20


def test_by_default_a_person_has_an_eighth_of_the_store_and_an_agent_half() -> None:
    quotas = Quotas(bucket_bytes={"artifacts": 64 * MIB})
    assert quotas.artifact_share("person") == 8 * MIB
    assert quotas.artifact_share("agent") == 32 * MIB
    bigger = Quotas(bucket_bytes={"artifacts": 64 * MIB}, artifact_bytes_per_person=48 * MIB)
    assert bigger.artifact_share("agent") == 48 * MIB  # never below a person's


def test_an_agent_share_below_a_persons_or_a_share_over_the_store_is_refused() -> None:
    with pytest.raises(ValidationError, match="below a person's share"):
        Quotas(artifact_bytes_per_person=8 * MIB, artifact_bytes_per_agent=4 * MIB)
    with pytest.raises(ValidationError, match="larger than the artifact store"):
        Quotas(bucket_bytes={"artifacts": 4 * MIB}, artifact_bytes_per_agent=8 * MIB)


def test_the_step_records_shares_are_drawn_from_the_tool_runs_bucket_alike() -> None:
    """The step records' shares (actors/tools/_runs.py) follow the same rules, of their own
    bucket: an attack review's agent filled it for every person."""
    quotas = Quotas()
    assert quotas.step_record_share("person") == 8 * MIB  # of the default 64 MiB
    assert quotas.step_record_share("agent") == 32 * MIB
    with pytest.raises(ValidationError, match=r"step_record_bytes_per_agent .* below a person"):
        Quotas(step_record_bytes_per_person=8 * MIB, step_record_bytes_per_agent=4 * MIB)
    with pytest.raises(ValidationError, match="larger than the tool_runs bucket"):
        Quotas(bucket_bytes={"tool_runs": 4 * MIB}, step_record_bytes_per_person=8 * MIB)
