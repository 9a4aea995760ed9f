"""`semi_auto`'s review rules: when a draft waits for its owner instead of leaving at once.

A draft is held for review when any rule names it: it is longer than `review_over_chars`, the
redactor (schemas `find_secrets`, the same patterns that keep secrets out of the audit) finds
a credential or, with `review_pii`, personal data in it, or, with `review_tool_use`, the local
agent called tools while writing it (its answer's `tools_used`): tool results are text the
owner never saw, carried into a message that leaves their deployment. The rules only ever hold a
draft back; the owner still approves, edits or rejects it as in `manual` mode.
"""

from __future__ import annotations

from actors.orchestrator._options import OrchestrationOptions
from schemas import SECRET_KINDS, find_secrets

__all__ = ("review_reasons",)


def review_reasons(
    draft: str, options: OrchestrationOptions, tools_used: tuple[str, ...] = ()
) -> tuple[str, ...]:
    """Why `draft` needs its owner's review in `semi_auto` (empty: it may go unreviewed);
    `tools_used` are the tools the local agent called while writing it."""
    reasons: list[str] = []
    limit = options.review_over_chars
    if limit is not None and len(draft) > limit:
        reasons.append(f"the draft is {len(draft)} characters, over the {limit} sent unreviewed")
    if options.review_secrets or options.review_pii:
        kinds = sorted({hit.kind for hit in find_secrets(draft, pii=options.review_pii)})
        secrets = [kind for kind in kinds if kind in SECRET_KINDS]
        personal = [kind for kind in kinds if kind not in SECRET_KINDS]
        if secrets and options.review_secrets:
            reasons.append(f"the redactor found a secret in the draft ({', '.join(secrets)})")
        if personal and options.review_pii:
            reasons.append(f"the redactor found personal data in the draft ({', '.join(personal)})")
    if tools_used and options.review_tool_use:
        reasons.append(f"the local agent used tools to write it ({', '.join(tools_used)})")
    return tuple(reasons)
