"""`parley bench --only context`: seed 004's context bloat stays under 20% (issue 15)."""

from __future__ import annotations

from tools.bench._context import context_row


def test_planner_coder_reviewer_sends_under_1_2_times_one_agents_tokens() -> None:
    row = context_row()
    assert row["ratio"] < 1.2, row
    # The sub-agents see their filtered context only: each far less than the planner.
    assert row["parts"]["coder"] < row["parts"]["planner"] / 2, row
    assert row["parts"]["reviewer"] < row["parts"]["coder"], row
