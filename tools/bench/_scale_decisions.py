"""The `decisions` figure of `parley bench`'s scale row: whether a gate decision costs the same
in a long trace as in a short one.

A decision here is what the gate does for one submission once the records it needs are at
hand (its cache holds them; actors/gate/_store.py): `plan()`, `decide()`, and encoding the
records the decision writes, as its commit sends them to KV. Two traces are grown on the same
session shape (the router calls gpt, gpt answers, again and again, on one trace), one to
`short` envelopes and one to `long`; then a call and its answer are decided on each, starting
every sample from the same grown records (so each is decided at that very size), the two
sizes interleaved so that whatever else the machine does falls on both alike. p50 and p99
at each size and their ratio, long over short, against the aim (at most 1.5x).

The bytes of the records each decision reads and writes are printed too: they are what a
decision costs the gate's KV, and what a replica without them in its cache decodes. Their
ratio is judged against the same aim; unlike the times it is exact, so it fails for a
record that grows with its trace however fast the machine.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import msgspec
from msgspec import Struct

from actors.gate import Allow, Ledger, Position, Route, Submission, decide, plan, required_keys
from schemas import (
    AgentCall,
    AgentResponse,
    AnyEnvelope,
    HumanMessage,
    PolicyBundle,
    ProfilePolicy,
    Reply,
    new_id,
    utc_now,
)
from tools.bench._kit import percentile_us

__all__ = ("AIM_RATIO", "decision_scale", "print_decisions", "summarise_decisions")

AIM_RATIO = 1.5
"""A decision in the long trace costs at most this many times one in the short trace."""

_encoder = msgspec.json.Encoder()
_REPLY = Reply(message="ok")


def _profile(**fields: Any) -> ProfilePolicy:
    """A profile no counted limit stops within the benchmark's traces."""
    return ProfilePolicy(
        trace_message_budget=10_000_000,
        rate_per_minute=10_000_000,
        max_concurrent_calls=1_000,
        **fields,
    )


def _bundle() -> PolicyBundle:
    return PolicyBundle(
        schema_version="1.0",
        version=1,
        tenant_id="bench",
        expires_at=utc_now() + timedelta(days=1),
        profiles={
            "cli": _profile(start_traces=True, speaks_for_person=True, allowed_targets=("router",)),
            "router": _profile(allowed_targets=("gpt",)),
            "gpt": _profile(allowed_targets=("router",)),
        },
    )


class _KeepingLedger(Ledger):
    """A ledger that keeps what each record held before the decision wrote it, so the
    bytes a decision read can be counted after it is timed."""

    __slots__ = ("before",)

    def __init__(self, values: dict[str, Struct | None] | None = None) -> None:
        super().__init__(values)
        self.before: dict[str, Struct | None] = {}

    def put(self, key: str, value: Struct) -> None:
        self.before.setdefault(key, self.values.get(key))
        super().put(key, value)

    def read(self, key: str) -> Struct | None:
        """What `key` held before the decision since `dirty` was last emptied."""
        return self.before[key] if key in self.before else self.values.get(key)


@dataclass
class _Trace:
    """A session's trace grown to some size: its records, and the position the next
    envelope is caused by."""

    ledger: _KeepingLedger
    cause: Position
    call_id: str
    now_ms: int
    envelopes: int


@dataclass(frozen=True, slots=True)
class _Sample:
    """One decision: its time, and the bytes of the records it read and wrote."""

    seconds: float
    read_bytes: int
    written_bytes: int


def _next(trace: _Trace) -> tuple[AnyEnvelope, str]:
    """The session's next envelope and its sender: a call to gpt, or gpt's answer to it."""
    if trace.envelopes % 2 == 1:  # the root counts as one: calls are odd, answers even
        trace.call_id = new_id()
        call = AgentCall(
            id=new_id(), created_at=utc_now(), target="gpt", call_id=trace.call_id, goal="g"
        )
        return call, "router"
    answer = AgentResponse(
        id=new_id(), created_at=utc_now(), sender="gpt", text="ok", call_id=trace.call_id,
        reply=_REPLY,
    )  # fmt: skip
    return answer, "gpt"


def _step(trace: _Trace, bundle: PolicyBundle) -> _Sample:
    """Decide the trace's next envelope as the gate does from its cache; timed."""
    envelope, sender = _next(trace)
    sub = Submission(envelope, sender, trace.cause.envelope_id, {}, trace.now_ms)
    ledger = trace.ledger
    ledger.dirty = set()
    ledger.before = {}
    started = time.perf_counter_ns()
    route = plan(sub, trace.cause, bundle, "")
    outcome = decide(route, ledger, bundle) if isinstance(route, Route) else route
    written = sum(len(_encoder.encode(ledger.values[key])) for key in ledger.dirty)
    seconds = (time.perf_counter_ns() - started) / 1e9
    if not isinstance(outcome, Allow):
        raise RuntimeError(f"the benchmark's session was refused: {outcome}")
    read = len(_encoder.encode(trace.cause)) + sum(
        len(_encoder.encode(value))
        for key in required_keys(outcome.route)
        if (value := ledger.read(key)) is not None
    )
    trace.cause = outcome.route.position
    trace.envelopes += 1
    trace.now_ms += 1
    return _Sample(seconds, read, written)


def _grown(size: int, bundle: PolicyBundle) -> _Trace:
    """A trace of `size` envelopes: a person's message to the router, then calls and answers."""
    now = int(time.time() * 1000)
    root = HumanMessage(
        id=new_id(), created_at=utc_now(), text="go", call_id=new_id(), target="router"
    )
    first = plan(Submission(root, "cli", "", {}, now), None, bundle, "")
    ledger = _KeepingLedger()
    if not isinstance(first, Route) or not isinstance(decide(first, ledger, bundle), Allow):
        raise RuntimeError(f"the benchmark's bundle refused its first envelope: {first}")
    trace = _Trace(ledger, first.position, "", now, 1)
    while trace.envelopes < size:
        _step(trace, bundle)
    if trace.envelopes % 2 == 0:  # end on an answer: the samples start with a call
        _step(trace, bundle)
    return trace


def _pair(grown: _Trace, bundle: PolicyBundle) -> Iterator[_Sample]:
    """A call and its answer decided on `grown`, which is left as it was."""
    ledger = _KeepingLedger(dict(grown.ledger.values))
    trace = _Trace(ledger, grown.cause, grown.call_id, grown.now_ms, grown.envelopes)
    for _ in range(2):
        yield _step(trace, bundle)


def decision_scale(short: int, long: int, pairs: int) -> dict[str, Any]:
    """Decide `pairs` calls and answers on a trace of `short` envelopes and on one of `long`,
    interleaved; the figures and their verdicts (`summarise_decisions`)."""
    bundle = _bundle()
    traces = {short: _grown(short, bundle), long: _grown(long, bundle)}
    samples: dict[int, list[_Sample]] = {short: [], long: []}
    gc.collect()
    for _ in range(pairs):
        for size, trace in traces.items():
            samples[size].extend(_pair(trace, bundle))
    return summarise_decisions(
        short, long, samples[short], samples[long], built_envelopes=traces[long].envelopes
    )


def summarise_decisions(
    short: int,
    long: int,
    short_samples: Sequence[_Sample],
    long_samples: Sequence[_Sample],
    *,
    built_envelopes: int,
) -> dict[str, Any]:
    """p50, p99 and bytes per decision at both sizes, the ratios long/short, and each ratio's
    verdict against `AIM_RATIO` (no samples: every verdict fails)."""

    def figures(samples: Sequence[_Sample]) -> dict[str, float]:
        times = [sample.seconds for sample in samples]
        count = max(len(samples), 1)
        return {
            "p50_us": percentile_us(times, 0.5) if times else 0.0,
            "p99_us": percentile_us(times, 0.99) if times else 0.0,
            "read_bytes": sum(sample.read_bytes for sample in samples) / count,
            "written_bytes": sum(sample.written_bytes for sample in samples) / count,
        }

    at_short, at_long = figures(short_samples), figures(long_samples)
    ratios = {
        name: at_long[name] / at_short[name] if at_short[name] else float("inf")
        for name in ("p50_us", "p99_us", "read_bytes", "written_bytes")
    }
    measured = bool(short_samples) and bool(long_samples)
    return {
        "sizes": {"short": short, "long": long, "long_built": built_envelopes},
        "decisions": {"short": len(short_samples), "long": len(long_samples)},
        "short": at_short,
        "long": at_long,
        "ratios": ratios,
        "aim_ratio": AIM_RATIO,
        "pass": {name: measured and ratio <= AIM_RATIO for name, ratio in ratios.items()},
    }


def print_decisions(result: dict[str, Any], verdict: Callable[[str, str, str, bool], None]) -> None:
    """Print the figure: both sizes' times and bytes, each ratio with its aim and verdict."""
    sizes, short, long = result["sizes"], result["short"], result["long"]
    print(
        f"\nscale: a gate decision (plan, decide, encode its writes) in a trace of "
        f"{sizes['short']:,} envelopes and of {sizes['long']:,}; "
        f"{result['decisions']['long']:,} decisions at each, interleaved"
    )
    for name, at in ((f"{sizes['short']:,}", short), (f"{sizes['long']:,}", long)):
        print(
            f"  at {name:>7}: p50 {at['p50_us']:7.1f} µs, p99 {at['p99_us']:8.1f} µs; "
            f"reads {at['read_bytes']:,.0f} B, writes {at['written_bytes']:,.0f} B a decision"
        )
    aim = f"<= {result['aim_ratio']:g}x"
    for name, what in (
        ("p50_us", "p50"),
        ("p99_us", "p99"),
        ("read_bytes", "bytes of records read"),
        ("written_bytes", "bytes of records written"),
    ):
        verdict(
            f"{what}, long trace / short",
            f"{result['ratios'][name]:.2f}x",
            aim,
            result["pass"][name],
        )
