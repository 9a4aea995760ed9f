"""Seed 004's filtered context builder: what a sub-agent is allowed to see of its caller's
conversation and workspace, and that it always fits the call's token budget."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from actors.delegation import WorkspacePathError, build_filtered_context
from schemas import ContextFilter, ContextMessage, FilteredContext, SubAgentArgs

NOW = datetime(2026, 2, 11, 12, 0, tzinfo=UTC)
BUDGET = SubAgentArgs(agent_name="coder", task="t").max_context_tokens


def _message(content: str, role: str = "user", age_seconds: int | None = None) -> ContextMessage:
    created_at = None if age_seconds is None else NOW - timedelta(seconds=age_seconds)
    return ContextMessage(role=role, content=content, created_at=created_at)


def _build(
    conversation: list[ContextMessage],
    context_filter: ContextFilter | None,
    max_tokens: int = BUDGET,
    *,
    summary: str | None = None,
    workspace_root: Path | None = None,
) -> FilteredContext:
    return build_filtered_context(
        conversation,
        context_filter,
        max_tokens,
        now=NOW,
        summary=summary,
        workspace_root=workspace_root,
    )


def _contents(context: FilteredContext) -> list[str]:
    return [message.content for message in context.messages]


CONVERSATION = [
    _message("plan the auth module", "user", age_seconds=3600),
    _message("Auth: I will split it in two", "assistant", age_seconds=900),
    _message("read src/auth/user.rs", "tool", age_seconds=500),
    _message("what about the weather", "user", age_seconds=400),
    _message("AUTH needs bcrypt", "user", age_seconds=300),
    _message("the weather is fine", "assistant", age_seconds=200),
    _message("and the auth tests?", "user", age_seconds=100),
    _message("system note without a time", "system"),
]


# Seed 004's test list: "filters correctly", "max_tokens is respected", "workspace context is
# included", "summaries are included when requested"; and each step on its own.


def test_the_default_budget_is_the_seeds() -> None:
    assert BUDGET == 4000


def test_no_filter_keeps_everything_that_fits() -> None:
    context = _build(CONVERSATION, None)
    assert list(context.messages) == CONVERSATION
    assert (context.summary, context.workspace) == (None, None)
    assert context.total_tokens == sum(math.ceil(len(m.content) / 4) for m in CONVERSATION)


def test_an_empty_filter_is_the_same_as_none(tmp_path: Path) -> None:
    assert _build(CONVERSATION, ContextFilter(), summary="s", workspace_root=tmp_path) == _build(
        CONVERSATION, None, summary="s", workspace_root=tmp_path
    )


def test_max_age_drops_older_messages_and_keeps_undated_ones() -> None:
    context = _build(CONVERSATION, ContextFilter(max_age_seconds=450))
    assert _contents(context) == [
        "what about the weather",
        "AUTH needs bcrypt",
        "the weather is fine",
        "and the auth tests?",
        "system note without a time",
    ]


def test_a_message_exactly_max_age_old_is_dropped_as_in_the_seed() -> None:
    conversation = [_message("boundary", age_seconds=300), _message("inside", age_seconds=299)]
    assert _contents(_build(conversation, ContextFilter(max_age_seconds=300))) == ["inside"]


def test_a_max_age_beyond_any_date_keeps_everything() -> None:
    context = _build(CONVERSATION, ContextFilter(max_age_seconds=10**15))
    assert list(context.messages) == CONVERSATION


def test_roles_keep_only_the_listed_roles() -> None:
    context = _build(CONVERSATION, ContextFilter(roles=("assistant", "system")))
    assert _contents(context) == [
        "Auth: I will split it in two",
        "the weather is fine",
        "system note without a time",
    ]


def test_an_empty_role_list_keeps_nothing() -> None:
    assert _build(CONVERSATION, ContextFilter(roles=())).messages == ()


def test_keywords_ignore_case_on_both_sides() -> None:
    """The seed lowers only the content, so its upper-case keyword would match nothing."""
    expected = [
        "plan the auth module",
        "Auth: I will split it in two",
        "read src/auth/user.rs",
        "AUTH needs bcrypt",
        "and the auth tests?",
    ]
    assert _contents(_build(CONVERSATION, ContextFilter(keywords=("auth",)))) == expected
    assert _contents(_build(CONVERSATION, ContextFilter(keywords=("AuTh",)))) == expected


def test_any_keyword_is_enough() -> None:
    context = _build(CONVERSATION, ContextFilter(keywords=("bcrypt", "WEATHER")))
    assert _contents(context) == [
        "what about the weather",
        "AUTH needs bcrypt",
        "the weather is fine",
    ]


def test_last_messages_keeps_the_newest_n() -> None:
    context = _build(CONVERSATION, ContextFilter(last_messages=2))
    assert _contents(context) == ["and the auth tests?", "system note without a time"]


@pytest.mark.parametrize(("count", "kept"), [(0, 0), (8, 8), (100, 8)])
def test_last_messages_at_the_edges(count: int, kept: int) -> None:
    context = _build(CONVERSATION, ContextFilter(last_messages=count))
    assert list(context.messages) == CONVERSATION[len(CONVERSATION) - kept :]


def test_all_filters_apply_in_the_seeds_order() -> None:
    """Last N counts what the other filters left: taken first, it would keep one message."""
    context_filter = ContextFilter(
        max_age_seconds=1000,
        roles=("user", "assistant"),
        keywords=("auth",),
        last_messages=2,
    )
    assert _contents(_build(CONVERSATION, context_filter)) == [
        "AUTH needs bcrypt",
        "and the auth tests?",
    ]
    last_two_first = _build(CONVERSATION, ContextFilter(last_messages=2)).messages
    narrowed = _build(list(last_two_first), ContextFilter(roles=("user",), keywords=("auth",)))
    assert _contents(narrowed) == ["and the auth tests?"]


# The token fit.


def _sized(count: int, tokens: int) -> list[ContextMessage]:
    return [_message(f"{n:04d}" + "x" * (tokens * 4 - 4)) for n in range(count)]


def test_the_fit_keeps_the_newest_within_the_default_budget() -> None:
    conversation = _sized(10, 500)
    context = _build(conversation, None)
    assert list(context.messages) == conversation[2:]
    assert context.total_tokens == 4000


def test_a_message_costs_its_length_over_four_rounded_up() -> None:
    conversation = [_message("x" * 5), _message("y")]
    assert _build(conversation, None, max_tokens=3).total_tokens == 3
    assert _contents(_build(conversation, None, max_tokens=2)) == ["y"]


def test_the_fit_stops_at_the_first_message_that_does_not_fit() -> None:
    """As the seed: an older small message is not taken once a newer one was left out."""
    conversation = [_message("old and small"), _message("x" * 4000), _message("newest")]
    assert _contents(_build(conversation, None, max_tokens=100)) == ["newest"]


def test_a_zero_budget_keeps_nothing() -> None:
    context = _build(CONVERSATION, None, max_tokens=0, summary="s")
    assert context == FilteredContext()


def test_a_negative_budget_is_refused() -> None:
    with pytest.raises(ValueError, match="max_tokens"):
        _build(CONVERSATION, None, max_tokens=-1)


def test_a_naive_now_is_refused() -> None:
    with pytest.raises(ValueError, match="timezone"):
        build_filtered_context(CONVERSATION, None, BUDGET, now=datetime(2026, 2, 11))


# The summary.


def test_the_summary_is_included_when_requested_in_the_seeds_words() -> None:
    context = _build(CONVERSATION, ContextFilter(include_summary=True), summary="We chose bcrypt.")
    assert context.summary == "\n[Conversation Summary]\nWe chose bcrypt.\n"
    assert context.total_tokens == _build(CONVERSATION, None).total_tokens + math.ceil(
        len(context.summary) / 4
    )


@pytest.mark.parametrize(
    ("include", "summary"), [(False, "We chose bcrypt."), (True, None), (True, "")]
)
def test_no_summary_unless_requested_and_given(include: bool, summary: str | None) -> None:
    context = _build(CONVERSATION, ContextFilter(include_summary=include), summary=summary)
    assert context.summary is None


def test_the_summary_is_paid_for_before_the_messages() -> None:
    conversation = _sized(4, 100)
    summary = "s" * (100 * 4 - len("\n[Conversation Summary]\n\n"))
    context = _build(conversation, ContextFilter(include_summary=True), 300, summary=summary)
    assert list(context.messages) == conversation[2:]
    assert context.total_tokens == 300


# The workspace.


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    (root / "src" / "auth").mkdir(parents=True)
    (root / "src" / "auth" / "user.rs").write_text("fn user_auth() {}")
    (root / "src" / "auth" / "types.rs").write_text("struct User;")
    (root / "README.md").write_text("hello")
    (tmp_path / "secret.txt").write_text("not for the callee")
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "key.pem").write_text("key")
    return root


WORKSPACE_FILES = ("src/auth/user.rs", "src/auth/types.rs", "README.md", "missing.rs", "src")


def _workspace(root: Path, files: tuple[str, ...] | None = None) -> str:
    context = _build(
        [], ContextFilter(include_workspace=True, workspace_files=files), workspace_root=root
    )
    assert context.workspace is not None
    assert str(root.parent) not in context.workspace
    return context.workspace


def test_requested_files_that_exist_are_listed(workspace: Path) -> None:
    files = ("src/auth/user.rs", "src/auth/missing.rs", "src/auth", "src/auth/types.rs")
    assert _workspace(workspace, files) == (
        "Workspace: project\n\nRelevant files:\n  - src/auth/user.rs\n  - src/auth/types.rs\n"
    )


def test_without_requested_files_the_top_level_is_listed(workspace: Path) -> None:
    assert _workspace(workspace) == (
        "Workspace: project\n\nWorkspace structure:\n  [FILE] README.md\n  [DIR] src\n"
    )


def test_the_top_level_listing_is_sorted_and_at_most_twenty(tmp_path: Path) -> None:
    for n in reversed(range(25)):
        (tmp_path / f"file{n:02d}").write_text("")
    lines = _workspace(tmp_path).splitlines()[3:]
    assert lines == [f"  [FILE] file{n:02d}" for n in range(20)]


def test_the_workspace_is_counted_in_the_budget(workspace: Path) -> None:
    conversation = _sized(4, 100)
    context_filter = ContextFilter(include_workspace=True, workspace_files=("README.md",))
    context = _build(conversation, context_filter, 400, workspace_root=workspace)
    assert context.workspace is not None
    assert len(context.messages) == 3
    assert context.total_tokens == 300 + math.ceil(len(context.workspace) / 4)


def test_no_workspace_without_a_root_or_without_the_request(workspace: Path) -> None:
    assert _build([], ContextFilter(include_workspace=True)).workspace is None
    assert _build([], ContextFilter(), workspace_root=workspace).workspace is None


def test_a_symlink_inside_the_root_is_followed(workspace: Path) -> None:
    (workspace / "user.rs").symlink_to(workspace / "src" / "auth" / "user.rs")
    assert "  - user.rs\n" in _workspace(workspace, ("user.rs",))


@pytest.mark.parametrize(
    ("requested", "reason"),
    [
        ("../secret.txt", r"through '\.\.'"),
        ("src/../../secret.txt", r"through '\.\.'"),
        ("src/auth/../../../outside/key.pem", r"through '\.\.'"),
        ("leak.txt", "outside"),
        ("linked/key.pem", "outside"),
        ("nul\0byte", "cannot be resolved"),
    ],
)
def test_paths_leaving_the_root_are_refused(workspace: Path, requested: str, reason: str) -> None:
    (workspace / "leak.txt").symlink_to(workspace.parent / "secret.txt")
    (workspace / "linked").symlink_to(workspace.parent / "outside")
    with pytest.raises(WorkspacePathError, match=reason) as refused:
        _workspace(workspace, ("README.md", requested))
    assert refused.value.path == requested
    assert repr(requested) in str(refused.value)


def test_an_absolute_path_is_refused_even_inside_the_root(workspace: Path) -> None:
    inside = str(workspace / "README.md")
    with pytest.raises(WorkspacePathError, match="absolute"):
        _workspace(workspace, (inside,))


def test_a_path_that_leaves_and_comes_back_is_refused_unresolved(workspace: Path) -> None:
    with pytest.raises(WorkspacePathError, match=r"through '\.\.'"):
        _workspace(workspace, ("../project/README.md",))


def test_dot_dot_that_stays_inside_is_allowed(workspace: Path) -> None:
    assert "  - src/auth/../../README.md\n" in _workspace(workspace, ("src/auth/../../README.md",))


def test_the_listing_skips_symlinks_leading_out(workspace: Path) -> None:
    (workspace / "leak.txt").symlink_to(workspace.parent / "secret.txt")
    (workspace / "linked").symlink_to(workspace.parent / "outside")
    (workspace / "loop").symlink_to(workspace / "loop")
    assert _workspace(workspace).endswith(
        "\nWorkspace structure:\n  [FILE] README.md\n  [DIR] src\n"
    )


def test_a_root_that_is_not_a_directory_is_refused(workspace: Path) -> None:
    with pytest.raises(WorkspacePathError, match="not a directory"):
        _workspace(workspace / "README.md")


# Over budget: the seed would send the summary and workspace anyway; we cut them.


def test_the_workspace_is_cut_first_at_whole_lines(workspace: Path) -> None:
    context_filter = ContextFilter(include_summary=True, include_workspace=True)
    summary = "s" * 40
    full = _build([], context_filter, summary=summary, workspace_root=workspace)
    assert full.summary is not None and full.workspace is not None
    budget = math.ceil(len(full.summary) / 4) + 11
    context = _build(
        CONVERSATION, context_filter, budget, summary=summary, workspace_root=workspace
    )
    assert context.summary == full.summary
    assert context.workspace == "Workspace: project\n\nWorkspace structure:\n"
    assert context.messages == ()
    assert context.total_tokens <= budget


def test_the_summary_is_cut_last(workspace: Path) -> None:
    context_filter = ContextFilter(include_summary=True, include_workspace=True)
    context = _build(CONVERSATION, context_filter, 5, summary="s" * 100, workspace_root=workspace)
    assert context.workspace is None
    assert context.summary == ("\n[Conversation Summary]\n" + "s" * 100 + "\n")[:20]
    assert context.total_tokens == 5


# Property: whatever the conversation and filter, the budget holds and the newest are kept.

_messages = st.lists(
    st.builds(
        _message,
        st.text(max_size=80),
        st.sampled_from(("user", "assistant", "tool", "system")),
        st.one_of(st.none(), st.integers(min_value=0, max_value=5000)),
    ),
    max_size=30,
)
_filters = st.one_of(
    st.none(),
    st.builds(
        ContextFilter,
        last_messages=st.one_of(st.none(), st.integers(min_value=0, max_value=40)),
        roles=st.one_of(st.none(), st.lists(st.sampled_from(("user", "tool"))).map(tuple)),
        keywords=st.one_of(st.none(), st.lists(st.text(max_size=3), max_size=3).map(tuple)),
        include_summary=st.booleans(),
        max_age_seconds=st.one_of(st.none(), st.integers(min_value=0, max_value=10**16)),
    ),
)


@given(
    conversation=_messages,
    context_filter=_filters,
    max_tokens=st.integers(min_value=0, max_value=200),
    summary=st.one_of(st.none(), st.text(max_size=400)),
)
def test_the_budget_always_holds(
    conversation: list[ContextMessage],
    context_filter: ContextFilter | None,
    max_tokens: int,
    summary: str | None,
) -> None:
    context = _build(conversation, context_filter, max_tokens, summary=summary)
    spent = [math.ceil(len(m.content) / 4) for m in context.messages]
    extra = math.ceil(len(context.summary or "") / 4)
    assert context.total_tokens == sum(spent) + extra <= max_tokens
    unfitted = _build(conversation, context_filter, 10**9)
    skipped = len(unfitted.messages) - len(context.messages)
    assert context.messages == unfitted.messages[skipped:]
    if skipped:
        next_newest = math.ceil(len(unfitted.messages[skipped - 1].content) / 4)
        assert context.total_tokens + next_newest > max_tokens


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture])  # read, never written
@given(
    files=st.one_of(st.none(), st.lists(st.sampled_from(WORKSPACE_FILES)).map(tuple)),
    max_tokens=st.integers(min_value=0, max_value=60),
    summary=st.one_of(st.none(), st.text(max_size=120)),
)
def test_the_budget_holds_with_a_workspace(
    workspace: Path, files: tuple[str, ...] | None, max_tokens: int, summary: str | None
) -> None:
    context_filter = ContextFilter(
        include_summary=True, include_workspace=True, workspace_files=files
    )
    context = _build(
        CONVERSATION, context_filter, max_tokens, summary=summary, workspace_root=workspace
    )
    texts = [m.content for m in context.messages] + [context.summary or "", context.workspace or ""]
    assert context.total_tokens == sum(math.ceil(len(t) / 4) for t in texts) <= max_tokens
    assert str(workspace.parent) not in (context.workspace or "")
    assert (context.workspace or "\n").endswith("\n")
