"""Redaction of secrets and personal data in free text, before it is stored or logged.

Audit records and log lines outlive the conversations they describe and are read by people
who must not see credentials, so every free-text field passes through `redact` first. Each
hit is replaced by a typed marker with a short keyed hash, `[REDACTED:openai_key:3f9a1c]`:
the kind tells a reader what was there, and equal secrets get equal markers, so "the same
key was used in both calls" can still be seen without the key being revealed.

The hash is an HMAC under a deployment key (`key=`), not a bare digest: a 24-bit digest of
a low-entropy value (a phone number, a password from a dictionary) would let anyone holding
the audit log confirm a guess. Callers that store markers pass their deployment's secret;
without one the key is random per process (log lines), never a constant anyone could know.

Secrets are always redacted; personal data (emails, phone numbers, card numbers that pass
the Luhn check) only when asked, because a profile names which of them it handles. Patterns
are anchored on the published formats of each provider's credentials rather than on
entropy, so ordinary identifiers (commit hashes, UUIDs, dates) survive untouched.

Pure: no I/O, no global state beyond compiled patterns and the per-process key.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from collections.abc import Callable, Collection
from dataclasses import dataclass

__all__ = ("PII_KINDS", "SECRET_KINDS", "Hit", "find_secrets", "redact")

_PROCESS_KEY = secrets.token_bytes(32)
"""The key when a caller names none: secret, and different in every process."""
_MARKER_HASH_CHARS = 6


@dataclass(frozen=True, slots=True)
class Hit:
    """One span of `text` to redact. Holds no copy of the secret, so it is safe to log."""

    kind: str
    start: int
    end: int
    digest: str

    @property
    def marker(self) -> str:
        """The text that replaces the span."""
        return f"[REDACTED:{self.kind}:{self.digest}]"


def _has_digit_and_letter(value: str) -> bool:
    """Random credentials of 20+ characters practically always mix both; slugs and words don't."""
    return any(c.isdigit() for c in value) and any(c.isalpha() for c in value)


def _luhn_ok(value: str) -> bool:
    digits = [int(c) for c in value if c.isdigit()]
    if not 13 <= len(digits) <= 19:
        return False
    total = 0
    for index, digit in enumerate(reversed(digits)):
        if index % 2 == 1:
            digit *= 2
            if digit > 9:
                digit -= 9
        total += digit
    return total % 10 == 0


def _phone_ok(value: str) -> bool:
    return 9 <= sum(c.isdigit() for c in value) <= 15


@dataclass(frozen=True, slots=True)
class _Pattern:
    """A compiled pattern; `group` names the part to replace (0 = the whole match)."""

    kind: str
    regex: re.Pattern[str]
    group: int = 0
    check: Callable[[str], bool] | None = None


def _p(
    kind: str,
    pattern: str,
    *,
    group: int = 0,
    flags: int = 0,
    check: Callable[[str], bool] | None = None,
) -> _Pattern:
    return _Pattern(kind, re.compile(pattern, flags), group, check)


# Token boundaries: a key embedded in a longer word is not that key (`task-...` is not `sk-`).
_B = r"(?<![A-Za-z0-9_\-])"
_E = r"(?![A-Za-z0-9_\-])"
_ASSIGNED_KEYS = (
    r"password|passwd|passphrase|pwd|secret|client[_-]?secret|secret[_-]?key|api[_-]?key"
    r"|apikey|access[_-]?key|account[_-]?key|auth[_-]?token|access[_-]?token"
    r"|refresh[_-]?token|private[_-]?key|token|credentials?"
)

# Order matters only for equal spans: the first, more specific, kind names the hit.
_SECRET_PATTERNS: tuple[_Pattern, ...] = (
    _p(
        "private_key",
        r"-----BEGIN[A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----"
        # Never across a double quote, so redacting a JSON line keeps it JSON; a block cut
        # short (no END line) is redacted to the end of its string.
        r'(?:[^"]*?-----END[A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----|[^"]*)',
    ),
    _p("anthropic_key", _B + r"sk-ant-[A-Za-z0-9]{2,8}-[A-Za-z0-9_\-]{20,}" + _E),
    _p(
        "openai_key",
        _B + r"sk-(?:proj-|svcacct-|admin-|None-)?[A-Za-z0-9_\-]{20,}" + _E,
        check=_has_digit_and_letter,
    ),
    _p(
        "aws_access_key",
        r"(?<![A-Z0-9])(?:AKIA|ASIA|ABIA|ACCA|AGPA|AIDA|AROA)[A-Z0-9]{16}(?![A-Z0-9])",
    ),
    _p(
        "aws_secret_key",
        r"(?i)aws_?secret_?(?:access_?)?key[\"']?\s*[:=]\s*[\"']?([A-Za-z0-9/+=]{40})(?![A-Za-z0-9/+=])",
        group=1,
    ),
    _p("github_token", _B + r"(?:gh[pousr]_[A-Za-z0-9]{36,}|github_pat_[A-Za-z0-9_]{50,})" + _E),
    _p("gitlab_token", _B + r"glpat-[A-Za-z0-9_\-]{20,}" + _E),
    _p("slack_token", _B + r"xox[abposr]-[A-Za-z0-9\-]{10,}" + _E),
    _p(
        "slack_webhook",
        r"https://hooks\.slack\.com/services/[A-Za-z0-9]+/[A-Za-z0-9]+/[A-Za-z0-9]+",
    ),
    _p("stripe_key", _B + r"(?:sk|rk)_(?:live|test)_[A-Za-z0-9]{20,}" + _E),
    _p("google_api_key", _B + r"AIza[0-9A-Za-z_\-]{35}" + _E),
    _p("huggingface_token", _B + r"hf_[A-Za-z0-9]{30,}" + _E),
    _p("groq_key", _B + r"gsk_[A-Za-z0-9]{40,}" + _E),
    _p("npm_token", _B + r"npm_[A-Za-z0-9]{36}" + _E),
    _p("sendgrid_key", _B + r"SG\.[A-Za-z0-9_\-]{16,32}\.[A-Za-z0-9_\-]{30,50}" + _E),
    _p("nats_seed", r"(?<![A-Z0-9])S[ANOUACPX][A-Z2-7]{56}(?![A-Z2-7])"),
    _p(
        "jwt",
        _B + r"eyJ[A-Za-z0-9_\-]{8,}\.eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]*" + _E,
    ),
    _p(
        "bearer_token",
        r"(?i)\bbearer\s+([A-Za-z0-9._~+/\-]{16,}=*)",
        group=1,
        check=_has_digit_and_letter,
    ),
    _p("basic_auth", r"(?i)\bauthorization\s*:\s*basic\s+([A-Za-z0-9+/]{8,}={0,2})", group=1),
    _p(
        "url_password",
        r'\b[A-Za-z][A-Za-z0-9+.\-]*://[^\s:/@"]*:([^\s@/"]+)@',
        group=1,
    ),
    _p(
        "password",
        r"(?i)(?<![A-Za-z0-9])[\"']?(?:password|passwd|passphrase|pwd)[\"']?\s*[:=]\s*[\"']?"
        r"(?!\[REDACTED:)([^\s\"',;&]{6,})",
        group=1,
    ),
    _p(
        "credential",
        r"(?i)(?<![A-Za-z0-9])[\"']?(?:" + _ASSIGNED_KEYS + r")[\"']?\s*[:=]\s*[\"']?"
        r"(?!\[REDACTED:)([^\s\"',;&]{8,})",
        group=1,
        check=_has_digit_and_letter,
    ),
)

_PII_PATTERNS: tuple[_Pattern, ...] = (
    _p(
        "email",
        r"(?<![A-Za-z0-9._%+\-])[A-Za-z0-9._%+\-]+@[A-Za-z0-9\-]+(?:\.[A-Za-z0-9\-]+)*\.[A-Za-z]{2,}\b",
    ),
    _p(
        "card_number",
        r"(?<![\d\-.])[2-6]\d{3}(?:[ \-]?\d){9,15}(?![\d\-])",
        check=_luhn_ok,
    ),
    _p(
        "phone",
        # Not a run of digit groups that goes on either side (a card, an account number).
        r"(?<![\w+.\-/:])(?<!\d[ .\-])(?:\+\d{1,3}[ .\-]?)?(?:\(\d{1,4}\)[ .\-]?|\d{2,4}[ .\-])"
        r"\d{3,4}[ .\-]\d{3,4}(?![\w\-/:]|[ .\-]\d)"
        r"|(?<![\w+])\+[1-9]\d{7,14}(?!\w)",
        check=_phone_ok,
    ),
)

# The start of a credential cut off by a length limit (a 200-character preview) is too short
# for its full pattern, yet still part of the secret: when the caller says the text was cut,
# a known prefix running to the very end is redacted as well.
_CUT_TAIL = _p(
    "truncated_secret",
    _B + r"(?:sk-|sk_live_|sk_test_|rk_live_|rk_test_|gh[pousr]_|github_pat_|glpat-"
    r"|xox[abposr]-|AKIA|ASIA|AIza|hf_|gsk_|npm_|SG\.|eyJ|S[ANOUACPX][A-Z2-7]{4})"
    r"[A-Za-z0-9_\-.]*\Z"
    r"|[A-Za-z][A-Za-z0-9+.\-]*://[^\s:/@]*:([^\s@/]*)\Z"
    r"|(?i:bearer|basic)\s+[A-Za-z0-9._~+/\-]+=*\Z",
)

SECRET_KINDS: frozenset[str] = frozenset(p.kind for p in (*_SECRET_PATTERNS, _CUT_TAIL))
PII_KINDS: frozenset[str] = frozenset(p.kind for p in _PII_PATTERNS)
_ORDER = {p.kind: i for i, p in enumerate((*_SECRET_PATTERNS, *_PII_PATTERNS, _CUT_TAIL))}


def _digest(value: str, key: bytes) -> str:
    mac = hmac.new(key, value.encode("utf-8", "surrogatepass"), hashlib.sha256)
    return mac.hexdigest()[:_MARKER_HASH_CHARS]


def _select(pii: bool, pii_kinds: Collection[str] | None) -> tuple[_Pattern, ...]:
    if not pii and pii_kinds is None:
        return _SECRET_PATTERNS
    if pii_kinds is None:
        return _SECRET_PATTERNS + _PII_PATTERNS
    unknown = set(pii_kinds) - PII_KINDS
    if unknown:
        raise ValueError(f"unknown PII kinds {sorted(unknown)}; known: {sorted(PII_KINDS)}")
    if not pii:
        return _SECRET_PATTERNS
    return _SECRET_PATTERNS + tuple(p for p in _PII_PATTERNS if p.kind in pii_kinds)


def find_secrets(
    text: str,
    *,
    pii: bool = False,
    pii_kinds: Collection[str] | None = None,
    key: bytes = _PROCESS_KEY,
    truncated: bool = False,
) -> list[Hit]:
    """Return the non-overlapping spans of `text` that `redact` would replace, in order.

    Args:
        text: Any text.
        pii: Also look for personal data (all of `PII_KINDS`, or only `pii_kinds`).
        pii_kinds: The PII kinds to look for when `pii` is set.
        key: The deployment's HMAC key for the markers' hashes.
        truncated: `text` was cut at a length limit, so a credential's known prefix at its
            very end is redacted too.

    Raises:
        ValueError: `pii_kinds` names a kind this module does not know.
    """
    patterns = _select(pii, pii_kinds)
    if truncated:
        patterns = (*patterns, _CUT_TAIL)
    candidates: list[Hit] = []
    for pattern in patterns:
        for match in pattern.regex.finditer(text):
            value = match.group(pattern.group)
            if not value or (pattern.check is not None and not pattern.check(value)):
                continue
            start, end = match.span(pattern.group)
            candidates.append(Hit(pattern.kind, start, end, _digest(value, key)))
    # Earliest first; of two starting together the longer wins, then the more specific kind.
    candidates.sort(key=lambda h: (h.start, -h.end, _ORDER[h.kind]))
    hits: list[Hit] = []
    for hit in candidates:
        if hits and hit.start < hits[-1].end:
            continue
        hits.append(hit)
    return hits


def redact(
    text: str,
    *,
    pii: bool = False,
    pii_kinds: Collection[str] | None = None,
    key: bytes = _PROCESS_KEY,
    truncated: bool = False,
) -> str:
    """Return `text` with every secret (and, if asked, personal data) replaced by a marker.

    Idempotent: markers match no pattern, so redacting twice changes nothing.

    Args:
        text: Any text.
        pii: Also redact personal data: every kind of `PII_KINDS`, or only `pii_kinds`.
        pii_kinds: The PII kinds a profile names.
        key: The deployment's HMAC key for the markers' hashes.
        truncated: `text` was cut at a length limit (see `find_secrets`).

    Raises:
        ValueError: `pii_kinds` names a kind this module does not know.
    """
    hits = find_secrets(text, pii=pii, pii_kinds=pii_kinds, key=key, truncated=truncated)
    if not hits:
        return text
    parts: list[str] = []
    cursor = 0
    for hit in hits:
        parts.append(text[cursor : hit.start])
        parts.append(hit.marker)
        cursor = hit.end
    parts.append(text[cursor:])
    return "".join(parts)
