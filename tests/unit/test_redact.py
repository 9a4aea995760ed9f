"""Redaction corpus: real-looking secrets are all caught, ordinary text all survives.

The secrets are generated at test time in each provider's published format (so no
credential-shaped string is committed) and embedded in the places they turn up in practice:
log lines, JSON, env files, HTTP headers, prose. Near-misses are the identifiers an audit log
is full of (commit hashes, UUIDs, dates, hosts with ports) and words that merely sit next to
secrets in text ("the password is required").
"""

from __future__ import annotations

import base64
import itertools
import json
import random
import re
import string
from collections.abc import Callable

import pytest
from hypothesis import given
from hypothesis import strategies as st

from schemas import PII_KINDS, SECRET_KINDS, find_secrets, redact

ALNUM = string.ascii_letters + string.digits
UPPER_NUM = string.ascii_uppercase + string.digits
B32 = string.ascii_uppercase + "234567"
URLSAFE = ALNUM + "-_"
MARKER = re.compile(r"\[REDACTED:([a-z_]+):[0-9a-f]{6}\]")


def _seeded(seed: int) -> random.Random:
    # A reproducible corpus, not key material: the values only have to look like keys.
    return random.Random(seed)  # noqa: S311


def _r(rng: random.Random, alphabet: str, n: int) -> str:
    # Force one digit and one letter: a real key of this length has both with certainty.
    chars = [rng.choice(alphabet) for _ in range(n)]
    chars[rng.randrange(n)] = rng.choice([c for c in alphabet if c.isdigit()])
    letters = [c for c in alphabet if c.isalpha()]
    chars[rng.randrange(n)] = rng.choice(letters)
    return "".join(chars)


def _b64url(data: dict[str, object]) -> str:
    return base64.urlsafe_b64encode(json.dumps(data).encode()).rstrip(b"=").decode()


def _jwt(rng: random.Random) -> str:
    header = _b64url({"alg": "HS256", "typ": "JWT"})
    payload = _b64url({"sub": _r(rng, ALNUM, 10), "iat": rng.randrange(10**9, 2 * 10**9)})
    return f"{header}.{payload}.{_r(rng, URLSAFE, 43)}"


def _luhn_complete(prefix: str, length: int, rng: random.Random) -> str:
    body = prefix + "".join(rng.choice(string.digits) for _ in range(length - len(prefix) - 1))
    for check in string.digits:
        candidate = body + check
        digits = [int(c) for c in candidate]
        total = sum(
            d if i % 2 == 0 else (d * 2 - 9 if d * 2 > 9 else d * 2)
            for i, d in enumerate(reversed(digits))
        )
        if total % 10 == 0:
            return candidate
    raise AssertionError("unreachable")


def _pem(rng: random.Random, label: str) -> str:
    body = "\n".join(_r(rng, ALNUM + "+/", 64) for _ in range(rng.randrange(2, 6)))
    return f"-----BEGIN {label}-----\n{body}\n-----END {label}-----"


# kind -> generator of one secret value, exactly the text that must disappear.
GENERATORS: dict[str, Callable[[random.Random], str]] = {
    "openai_key": lambda r: r.choice(
        [
            f"sk-{_r(r, ALNUM, 48)}",
            f"sk-proj-{_r(r, URLSAFE, 156)}",
            f"sk-svcacct-{_r(r, URLSAFE, 74)}",
            f"sk-admin-{_r(r, URLSAFE, 60)}",
        ]
    ),
    "anthropic_key": lambda r: f"sk-ant-api03-{_r(r, URLSAFE, 93)}AA",
    "aws_access_key": lambda r: r.choice(["AKIA", "ASIA"]) + _r(r, UPPER_NUM, 16),
    "github_token": lambda r: r.choice(
        [
            f"{r.choice(['ghp', 'gho', 'ghu', 'ghs', 'ghr'])}_{_r(r, ALNUM, 36)}",
            f"github_pat_{_r(r, ALNUM, 22)}_{_r(r, ALNUM, 59)}",
        ]
    ),
    "gitlab_token": lambda r: f"glpat-{_r(r, URLSAFE, 20)}",
    "slack_token": lambda r: (
        f"xox{r.choice('bpa')}-{r.randrange(10**11, 10**12)}-{r.randrange(10**11, 10**12)}"
        f"-{_r(r, ALNUM, 24)}"
    ),
    "slack_webhook": lambda r: (
        f"https://hooks.slack.com/services/T{_r(r, UPPER_NUM, 8)}/B{_r(r, UPPER_NUM, 8)}/"
        f"{_r(r, ALNUM, 24)}"
    ),
    "stripe_key": lambda r: (
        f"{r.choice(['sk', 'rk'])}_{r.choice(['live', 'test'])}_"
        + _r(r, ALNUM, 24 + r.randrange(0, 76))
    ),
    "google_api_key": lambda r: f"AIza{_r(r, URLSAFE, 35)}",
    "huggingface_token": lambda r: f"hf_{_r(r, ALNUM, 34)}",
    "groq_key": lambda r: f"gsk_{_r(r, ALNUM, 52)}",
    "npm_token": lambda r: f"npm_{_r(r, ALNUM, 36)}",
    "sendgrid_key": lambda r: f"SG.{_r(r, URLSAFE, 22)}.{_r(r, URLSAFE, 43)}",
    "nats_seed": lambda r: "S" + r.choice("UAO") + _r(r, B32, 56),
    "jwt": _jwt,
    "private_key": lambda r: _pem(
        r,
        r.choice(
            [
                "PRIVATE KEY",
                "RSA PRIVATE KEY",
                "EC PRIVATE KEY",
                "OPENSSH PRIVATE KEY",
                "ENCRYPTED PRIVATE KEY",
            ]
        ),
    ),
}

# kind -> (template with {s} where the secret goes, generator of the part that must vanish).
CONTEXT_SECRETS: dict[str, tuple[list[str], Callable[[random.Random], str]]] = {
    "bearer_token": (
        [
            "Authorization: Bearer {s}",
            "curl -H 'authorization: bearer {s}' https://api.x",
            '{{"headers": {{"Authorization": "Bearer {s}"}}}}',
        ],
        lambda r: _r(r, URLSAFE + ".~", 32 + r.randrange(0, 32)),
    ),
    "basic_auth": (
        ["Authorization: Basic {s}", "authorization:basic {s}"],
        lambda r: base64.b64encode(f"{_r(r, ALNUM, 8)}:{_r(r, ALNUM, 14)}".encode()).decode(),
    ),
    "url_password": (
        [
            "DATABASE_URL=postgres://app:{s}@db.internal:5432/app",
            "connecting to redis://:{s}@cache:6379/0",
            "nats://parley:{s}@127.0.0.1:4222",
            "fetch https://deploy:{s}@git.example.org/repo.git failed",
        ],
        lambda r: _r(r, ALNUM + "!$*~", 8 + r.randrange(0, 20)),
    ),
    "password": (
        [
            "password={s}",
            "PASSWORD: {s}",
            '{{"password": "{s}"}}',
            "login with passwd={s} now",
            "DB_PASSWORD='{s}'",
        ],
        lambda r: _r(r, ALNUM + "!#%", 8 + r.randrange(0, 12)),
    ),
    "credential": (
        [
            "api_key={s}",
            'client_secret: "{s}"',
            "X_AUTH_TOKEN={s}",
            "secret_key = {s}",
            '{{"access_token": "{s}", "expires_in": 3600}}',
        ],
        lambda r: _r(r, ALNUM, 24 + r.randrange(0, 20)),
    ),
    "aws_secret_key": (
        ["aws_secret_access_key = {s}", "AWS_SECRET_ACCESS_KEY={s}"],
        lambda r: _r(r, ALNUM + "/+", 40),
    ),
}

TEMPLATES = (
    "{s}",
    "export TOKEN_VALUE={s}",
    "2026-11-22T20:07:02Z INFO calling provider with key {s} (attempt 2)",
    '{{"config": {{"key": "{s}"}}, "ok": true}}',
    "Here is my key: {s}. Please don't share it.",
    "key='{s}'",
    "- name: deploy\n  env:\n    KEY: {s}\n",
    "<{s}>",
)

# Documentation examples that the providers themselves publish.
KNOWN = {
    "aws_access_key": "AKIAIOSFODNN7EXAMPLE",
    "jwt": "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkpvaG4g"
    "RG9lIiwiaWF0IjoxNTE2MjM5MDIyfQ.SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c",
}


def _corpus() -> list[tuple[str, str, str]]:
    """(kind, text, secret) triples: a few hundred, deterministic."""
    rng = _seeded(20261122)
    corpus: list[tuple[str, str, str]] = []
    for kind, generate in GENERATORS.items():
        for template in TEMPLATES:
            for _ in range(2):
                secret = generate(rng)
                corpus.append((kind, template.format(s=secret), secret))
    for kind, (templates, generate) in CONTEXT_SECRETS.items():
        for template in templates:
            for _ in range(6):
                secret = generate(rng)
                corpus.append((kind, template.format(s=secret), secret))
    for kind, secret in KNOWN.items():
        corpus.append((kind, f"example: {secret}", secret))
    return corpus


CORPUS = _corpus()


def test_corpus_is_a_few_hundred() -> None:
    assert len(CORPUS) >= 300
    assert {kind for kind, _, _ in CORPUS} == SECRET_KINDS - {"truncated_secret"}


@pytest.mark.parametrize(("kind", "text", "secret"), CORPUS, ids=lambda v: str(v)[:20])
def test_every_secret_is_redacted_with_its_kind(kind: str, text: str, secret: str) -> None:
    out = redact(text)
    assert secret not in out
    # No long piece of it survives either (a partly redacted key is a leaked key).
    for i in range(0, max(1, len(secret) - 12), 4):
        assert secret[i : i + 12] not in out, (kind, out)
    assert kind in MARKER.findall(out), out


def test_recall_is_total() -> None:
    leaked = [(kind, text) for kind, text, secret in CORPUS if secret in redact(text)]
    assert leaked == []


NEAR_MISSES = (
    "The password is required and must be at least 12 characters long.",
    "Rotate your API key every 90 days; tokens expire after 3600 s.",
    "bearer of bad news: the build failed on commit 9fceb02d0ae598e95dc970b74767f19372d61af8",
    "sk-learn and scikit-learn are the same package; see task-manager-service-configuration",
    "trace 0190f8e2-7a3c-7b4e-9d2a-5c6e8f0a1b2c hop 3 at 2026-11-22T20:07:02.123456Z",
    "served from https://example.com:8443/path?q=1 and http://127.0.0.1:4222",
    "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
    "version 3.11.4, build 20261122, port 4222, pid 48213",
    "order 4111111111111112 is not a card (checksum fails)",
    "IP 192.168.100.254 and 10.0.0.1 answered in 12.5 ms",
    "3000-message run with 1000 records per checkpoint",
    "Call me maybe: the meeting is in room 4-201 at 14:30.",
    "@pytest.fixture decorators and user@localhost are not addresses here",
    "the token budget was 128000 and the response used 1534 tokens",
    "AKIA is the prefix of an access key id; ASIA of a temporary one.",
    "eyJ is how a base64 JSON object starts.",
    "-----BEGIN PUBLIC KEY----- is safe to share",
    "ghp_ prefixes GitHub tokens; gho_ is for OAuth.",
    "secret: false, password_policy: strict, token_count: 42",
    "See RFC 9562 section 5.7 for UUIDv7 and 2026-11-22 for the date.",
    "[REDACTED:openai_key:3f9a1c] is already a marker.",
    "Über naïve café — unicode survives — 東京",
    "parley.audit.demo.gpt parley.decisions.gpt PARLEY_AUDIT seq 12345",
)


@pytest.mark.parametrize("text", NEAR_MISSES)
def test_ordinary_text_survives(text: str) -> None:
    assert redact(text) == text


def test_generated_identifiers_survive() -> None:
    rng = _seeded(7)
    for _ in range(200):
        sha = "".join(rng.choice("0123456789abcdef") for _ in range(40))
        uid = "-".join(
            "".join(rng.choice("0123456789abcdef") for _ in range(n)) for n in (8, 4, 4, 4, 12)
        )
        when = f"20{rng.randrange(10, 40)}-{rng.randrange(1, 13):02d}-{rng.randrange(1, 29):02d}"
        text = f"commit {sha} id {uid} on {when} seq {rng.randrange(10**9)}"
        assert redact(text, pii=True) == text


def test_equal_secrets_correlate_and_different_ones_do_not() -> None:
    a, b = f"sk-{'a1' * 24}", f"sk-{'b2' * 24}"
    out = redact(f"first {a} then {b} then {a}")
    markers = MARKER.finditer(out)
    first, second, third = (m.group(0) for m in markers)
    assert first == third != second


def test_the_key_changes_the_hash() -> None:
    secret = f"ghp_{'x9' * 18}"
    assert redact(secret, key=b"one") != redact(secret, key=b"two")
    assert redact(secret, key=b"one") == redact(secret, key=b"one")


PII_CASES = (
    (
        "email",
        "write to jane.doe+audit@mail.example.co.uk today",
        "jane.doe+audit@mail.example.co.uk",
    ),
    ("email", "CC: ops@example.com", "ops@example.com"),
    ("phone", "call +1 (415) 555-2671 after 5", "+1 (415) 555-2671"),
    ("phone", "phone: 415-555-2671", "415-555-2671"),
    ("phone", "mobile +447911123456", "+447911123456"),
    ("phone", "office +44 20 7946 0958", "+44 20 7946 0958"),
    ("card_number", "card 4111 1111 1111 1111 exp 12/29", "4111 1111 1111 1111"),
    ("card_number", "paid with 5500-0000-0000-0004", "5500-0000-0000-0004"),
    ("card_number", "amex 378282246310005", "378282246310005"),
)


@pytest.mark.parametrize(("kind", "text", "value"), PII_CASES)
def test_pii_is_redacted_only_when_asked(kind: str, text: str, value: str) -> None:
    assert redact(text) == text
    out = redact(text, pii=True)
    assert value not in out and f"[REDACTED:{kind}:" in out
    other = sorted(PII_KINDS - {kind})
    assert redact(text, pii=True, pii_kinds=other) == text
    assert value not in redact(text, pii=True, pii_kinds=[kind])


def test_generated_cards_pass_luhn_and_are_caught() -> None:
    rng = _seeded(3)
    for prefix, length in (("4", 16), ("51", 16), ("37", 15), ("6011", 16)):
        number = _luhn_complete(prefix, length, rng)
        assert number not in redact(f"number {number}.", pii=True)
        broken = number[:-1] + str((int(number[-1]) + 1) % 10)
        assert redact(f"number {broken}.", pii=True) == f"number {broken}."


def test_unknown_pii_kind_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown PII kinds"):
        redact("x", pii=True, pii_kinds=["ssn"])


def test_hits_carry_no_secret() -> None:
    secret = f"sk-{'q7' * 24}"
    (hit,) = find_secrets(f"key {secret}")
    assert secret not in repr(hit)
    assert (hit.kind, hit.start, hit.end) == ("openai_key", 4, 4 + len(secret))


def test_a_key_cut_by_a_length_limit_is_redacted_when_the_caller_says_so() -> None:
    preview = ("x" * 180 + " key sk-proj-a1b2c3d4e5")[:200]
    assert "sk-proj-a1b2" in redact(preview)  # too short for the full pattern...
    assert "sk-proj" not in redact(preview, truncated=True)  # ...but the caller knows it's cut
    assert "hunter" not in redact("db postgres://u:hunter", truncated=True)
    cut_pem = "-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAA"
    assert "MIIE" not in redact(cut_pem)


@given(st.text(max_size=300))
def test_redaction_is_idempotent(text: str) -> None:
    once = redact(text, pii=True)
    assert redact(once, pii=True) == once


@given(st.text(alphabet=string.ascii_letters + string.digits + " .,:;-_/@+=", max_size=200))
def test_hits_are_ordered_and_disjoint(text: str) -> None:
    hits = find_secrets(text, pii=True, truncated=True)
    for before, after in itertools.pairwise(hits):
        assert before.end <= after.start
    for hit in hits:
        assert 0 <= hit.start < hit.end <= len(text)
