"""Seed 004's filtered context: the part of a caller's conversation a sub-agent may see.

A sub-agent gets its own small context window, never the caller's whole history: this module
picks the messages, the summary and the workspace view it is given, and fits them into the
call's token budget. It is pure so the host can build the same context again after a restart
and get the same answer: the clock is an argument, nothing is fetched from the bus or a store,
and the only I/O is looking at the workspace root (whether a requested file exists, and the
root's top-level entries), never past it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import datetime, timedelta
from pathlib import Path, PurePath

from schemas import ContextFilter, ContextMessage, FilteredContext

__all__ = ("SUMMARY_HEADING", "WorkspacePathError", "build_filtered_context")

SUMMARY_HEADING = "[Conversation Summary]"
"""Seed 004's heading of the summary in a filtered context."""

LISTED_ENTRIES_AT_MOST = 20
"""Seed 004 lists at most twenty top-level entries, so a large workspace cannot bloat a call."""


class WorkspacePathError(ValueError):
    """A requested workspace path would leave the workspace root, so it is refused unread.

    The caller (a brain, so possibly steered by untrusted text) names the files; a path that
    escapes the root could reveal what else lives on the machine, so the whole request fails
    rather than silently dropping the path.
    """

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"workspace path {path!r} {reason}")
        self.path = path


def build_filtered_context(
    conversation: Sequence[ContextMessage],
    context_filter: ContextFilter | None,
    max_tokens: int,
    *,
    now: datetime,
    summary: str | None = None,
    workspace_root: Path | None = None,
) -> FilteredContext:
    """The context a sub-agent receives: seed 004's seven steps, in the seed's order.

    1. Max age: a message whose `created_at` is not after `now - max_age_seconds` is dropped
       (the seed keeps `created_at > cutoff`); a message with no `created_at` is kept.
    2. Roles: only messages whose role is listed.
    3. Keywords: messages containing any keyword, ignoring case on BOTH sides by casefolding
       them (the seed lowers only the content, so a keyword with a capital never matched).
    4. Last N: the newest N of what is left, so it applies after the filters above (0: none).
    5. Summary: the seed's "\\n[Conversation Summary]\\n{summary}\\n", only when
       `include_summary` is set and a non-empty `summary` is given.
    6. Workspace: only when `include_workspace` is set and a `workspace_root` is configured.
       It names the root by its directory name, not by its absolute path as the seed does
       (the callee must not learn the machine's paths), then under "Relevant files:" the
       requested `workspace_files` that exist as files under the root, or without them, under
       the seed's "Workspace structure:", the root's top-level entries. A requested path that
       is absolute or leaves the root (through `..` or a symlink) raises `WorkspacePathError`.
       The seed's project info has no source here and is left out.
    7. Token fit: the summary and workspace are paid for first, then messages newest first,
       each costing ceil(len(content) / 4) tokens, stopping at the first that does not fit
       (as the seed does), restored to oldest-first order.

    Unlike the seed, the result never exceeds `max_tokens`: when the summary and workspace
    alone are over budget, the seed sends them anyway; here the workspace is cut (whole
    lines) and then the summary, until they fit. `total_tokens` is what was kept: messages
    plus summary plus workspace.

    `context_filter=None` filters nothing and adds nothing: only the token fit applies.
    """
    if max_tokens < 0:
        raise ValueError(f"max_tokens must not be negative, got {max_tokens}")
    if now.tzinfo is None:
        raise ValueError("now must be timezone-aware, as every message's created_at is")
    wanted = ContextFilter() if context_filter is None else context_filter
    selected = _select_messages(conversation, wanted, now)
    summary_text = _summary_text(summary) if wanted.include_summary and summary else ""
    workspace_text = ""
    if wanted.include_workspace and workspace_root is not None:
        workspace_text = _workspace_text(workspace_root, wanted.workspace_files)
    summary_text, workspace_text = _fit_additional(summary_text, workspace_text, max_tokens)
    additional = _estimate_tokens(summary_text) + _estimate_tokens(workspace_text)
    messages, message_tokens = _newest_that_fit(selected, max_tokens - additional)
    return FilteredContext(
        messages=messages,
        summary=summary_text or None,
        workspace=workspace_text or None,
        total_tokens=message_tokens + additional,
    )


def _estimate_tokens(text: str) -> int:
    """About four characters a token, rounded up, as the agent host's brains estimate."""
    return math.ceil(len(text) / 4)


def _select_messages(
    conversation: Sequence[ContextMessage], wanted: ContextFilter, now: datetime
) -> list[ContextMessage]:
    """Steps 1 to 4; each narrows what the one before left, so their order is the seed's."""
    selected = list(conversation)
    if wanted.max_age_seconds is not None:
        cutoff = _cutoff(now, wanted.max_age_seconds)
        if cutoff is not None:
            selected = [m for m in selected if m.created_at is None or m.created_at > cutoff]
    if wanted.roles is not None:
        roles = set(wanted.roles)
        selected = [m for m in selected if m.role in roles]
    if wanted.keywords is not None:
        keywords = [keyword.casefold() for keyword in wanted.keywords]
        selected = [m for m in selected if any(k in m.content.casefold() for k in keywords)]
    if wanted.last_messages is not None:
        # Not `selected[-n:]`: with n == 0 that slice is the whole list, not none of it.
        selected = selected[max(0, len(selected) - wanted.last_messages) :]
    return selected


def _cutoff(now: datetime, max_age_seconds: int) -> datetime | None:
    """The oldest moment still kept, or None when the age reaches before any datetime."""
    try:
        return now - timedelta(seconds=max_age_seconds)
    except OverflowError:
        return None


def _summary_text(summary: str) -> str:
    return f"\n{SUMMARY_HEADING}\n{summary}\n"


def _workspace_text(workspace_root: Path, requested: tuple[str, ...] | None) -> str:
    """Step 6: what the callee learns of the workspace, all of it relative to the root."""
    root = _resolved_root(workspace_root)
    lines = [f"Workspace: {root.name}\n"]
    if requested is not None:
        inside = [(path, _inside_root(root, path)) for path in requested]
        lines.append("\nRelevant files:\n")
        lines += [f"  - {path}\n" for path, resolved in inside if resolved.is_file()]
    else:
        lines.append("\nWorkspace structure:\n")
        lines += _top_level_entries(root)
    return "".join(lines)


def _resolved_root(workspace_root: Path) -> Path:
    root = workspace_root.resolve()
    if not root.is_dir():
        raise WorkspacePathError(root.name, "is not a directory: the workspace root must be one")
    return root


def _inside_root(root: Path, requested: str) -> Path:
    """The requested path resolved under the root, or `WorkspacePathError` if it leaves it.

    The `..` check is lexical and comes first, so a path like `../x` is refused before the
    file system is asked anything about it; resolving then catches symlinks pointing out.
    """
    relative = PurePath(requested)
    if relative.is_absolute():
        raise WorkspacePathError(requested, "is absolute: name files relative to the workspace")
    depth = 0
    for part in relative.parts:
        depth += -1 if part == ".." else 1
        if depth < 0:
            raise WorkspacePathError(requested, "leaves the workspace through '..'")
    try:
        resolved = (root / relative).resolve()
    except (OSError, RuntimeError, ValueError) as error:  # a symlink loop, a NUL byte
        raise WorkspacePathError(requested, "cannot be resolved") from error
    if not resolved.is_relative_to(root):
        raise WorkspacePathError(requested, "resolves outside the workspace")
    return resolved


def _top_level_entries(root: Path) -> list[str]:
    """The root's directories and files by name; a symlink leading out of the root is skipped."""
    lines: list[str] = []
    for entry in sorted(root.iterdir(), key=lambda path: path.name):
        if len(lines) == LISTED_ENTRIES_AT_MOST:
            break
        try:
            resolved = entry.resolve()
        except (OSError, RuntimeError):
            continue
        if not resolved.is_relative_to(root):
            continue
        if resolved.is_dir():
            lines.append(f"  [DIR] {entry.name}\n")
        elif resolved.is_file():
            lines.append(f"  [FILE] {entry.name}\n")
    return lines


def _fit_additional(summary_text: str, workspace_text: str, max_tokens: int) -> tuple[str, str]:
    """Cut the workspace, then the summary, so that together they never exceed the budget.

    The workspace goes first: a shorter file listing is the cheaper loss, while the summary
    carries what was said. It is cut at whole lines so no file name is halved.
    """
    workspace_budget = max(0, max_tokens - _estimate_tokens(summary_text))
    return summary_text[: max_tokens * 4], _whole_lines_within(workspace_text, workspace_budget)


def _whole_lines_within(text: str, budget: int) -> str:
    limit = budget * 4
    if len(text) <= limit:
        return text
    return text[: text.rfind("\n", 0, limit) + 1]


def _newest_that_fit(
    selected: Sequence[ContextMessage], budget: int
) -> tuple[tuple[ContextMessage, ...], int]:
    """Step 7: the newest messages that fit, oldest first, and the tokens they cost."""
    kept: list[ContextMessage] = []
    spent = 0
    for message in reversed(selected):
        cost = _estimate_tokens(message.content)
        if spent + cost > budget:
            break
        kept.append(message)
        spent += cost
    kept.reverse()
    return tuple(kept), spent
