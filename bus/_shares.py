"""Each person's and each agent's share of a store one actor writes for everyone.

The artifact store (actors/tools/_artifacts.py), the tool runtime's step records (`tool_runs`,
actors/tools/_runs.py) and the LLM gateway's answers (`llm_runs`, actors/llm/_answers.py) are
each written by one actor alone for every person's work: the broker can bound each whole, not
per person. So the actor that writes charges what it stores to the two principals it is stored
for, the person the trace works for (`Parley-Origin`) and the agent whose step or model call
stored it, within their shares (the quotas' `artifact_bytes_per_person` and `_per_agent`,
`step_record_bytes_…`, `model_answer_bytes_…`): an agent's large diffs, or its stream of large
results, fill its own share and its person's, never the store for everyone. `ShareTerms`
names a store's counts and settings.

A share's count lives at `<prefix>.person.<name>` or `<prefix>.agent.<name>` in the writer's
own bucket (`usage.` and `records.` in `tool_runs` for the artifacts and the step records,
`shares.` in `llm_runs` for the answers), as bytes per window of time stored. The store drops
what it holds its retention after it was stored, so a window's bytes stop counting once the
last thing it could hold has expired, a window later still (a write that ran past its window's
end, the server's expiry sweeps), and the share comes back as the store forgets. A count that
cannot be read is not taken for zero: the write is refused until it can be. Every change is a
compare-and-set, retried on conflict, so two steps (or two replicas) charging one person count
both.

An artifact is charged before its chunks are published and given back only when nothing of
the write is left in the store (actors/tools/_artifacts.py decides: every chunk it published
deleted, none unanswered, no metadata sent), or when another replica stored the same object
first. A runtime that dies in between leaves a charge with no object: the count says more than
is stored until that window expires, never less (the safe side of a bound). A step's record or
a model's answer is charged once written (`charge_anyway`: what ran keeps its result whatever
its share), and new work starts only while both shares have room (`check_room`); there a charge
that cannot be written (the broker down a moment, the writer killed between the write and its
charge) is lost, and the count says less than is stored until that window expires.
"""

from __future__ import annotations

import asyncio
import hashlib
import random
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Final, Literal

import msgspec
from nats.js.errors import KeyNotFoundError, KeyWrongLastSequenceError
from nats.js.kv import KeyValue

__all__ = (
    "ANSWER_TERMS",
    "ARTIFACT_TERMS",
    "RECORD_TERMS",
    "SESSION_TERMS",
    "SHARE_WINDOWS",
    "Charge",
    "Payer",
    "ShareExceeded",
    "ShareTerms",
    "Shares",
    "usage_key",
)

_SAFE_NAME: Final = re.compile(r"[A-Za-z0-9_-]{1,64}")
_RETRIES: Final = 32
SHARE_WINDOWS: Final = 64
"""Windows a retention is cut into: a record holds at most this many (and one more)."""


class ShareExceeded(RuntimeError):
    """Storing it would pass a person's or an agent's share; nothing was stored."""


@dataclass(frozen=True, slots=True)
class ShareTerms:
    """What a store's shares are called where a person reads of them."""

    store: str
    """The store, as a refusal names it ("the artifact store")."""
    prefix: str
    """The counts' keys: `<prefix>.<kind>.<name>` in the writer's bucket."""
    setting: str
    """The quotas' settings, `<setting>_per_person` and `<setting>_per_agent`."""
    retention: str
    """What says how long the store keeps what it holds."""


ARTIFACT_TERMS: Final = ShareTerms(
    "the artifact store", "usage", "artifact_bytes", "retention.artifacts_s"
)
ANSWER_TERMS: Final = ShareTerms(
    "the LLM gateway's answers",
    "shares",
    "model_answer_bytes",
    "the llm_runs bucket's age limit",
)
SESSION_TERMS: Final = ShareTerms(
    "the sessions bucket",
    "shares",
    "session_bytes",
    "retention.ended_sessions_s",
)
RECORD_TERMS: Final = ShareTerms(
    "the tool runtime's step records",
    "records",
    "step_record_bytes",
    "the tool_runs bucket's age limit",
)


@dataclass(frozen=True, slots=True)
class Payer:
    """A principal something is stored for: the person its trace works for, or the agent
    whose step or model call stored it."""

    kind: Literal["person", "agent"]
    name: str


@dataclass(frozen=True, slots=True)
class Charge:
    """Bytes charged to payers in one window: what `Shares.give_back` returns."""

    payers: tuple[Payer, ...]
    window: int
    size: int


class _Usage(msgspec.Struct, frozen=True):
    window_ms: int
    bytes_by_window: dict[int, int]
    """Bytes charged in each window, by the window's index (its start / `window_ms`)."""


_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder(_Usage)


def usage_key(payer: Payer, terms: ShareTerms = ARTIFACT_TERMS) -> str:
    """The payer's count in the writer's bucket: its name when a key may hold it, else a
    digest of it, under `h.` (no name holds a dot, so no name is taken for a digest)."""
    name = payer.name
    if not _SAFE_NAME.fullmatch(name):
        name = "h." + hashlib.sha256(name.encode()).hexdigest()[:40]
    return f"{terms.prefix}.{payer.kind}.{name}"


class Shares:
    """Counts of what each person and agent has stored in one store, within their shares."""

    def __init__(
        self,
        kv: KeyValue,
        *,
        per_person: int,
        per_agent: int,
        retention_s: float,
        terms: ShareTerms = ARTIFACT_TERMS,
        clock: Callable[[], float] = time.time,
    ) -> None:
        """`clock`: the time in seconds, which a test may move on instead of waiting."""
        self._kv = kv
        self._terms = terms
        self._limits = {"person": per_person, "agent": per_agent}
        self._retention_ms = round(retention_s * 1000)
        self._window_ms = max(1000, self._retention_ms // SHARE_WINDOWS)
        self._clock = clock

    def limit(self, payer: Payer) -> int:
        return self._limits[payer.kind]

    async def charge(self, payers: Sequence[Payer], size: int) -> Charge:
        """Charge `size` bytes to each payer, or to none.

        Raises:
            ShareExceeded: one of them would pass their share (what was charged to the
                others first is given back).
        """
        now_ms = self._now_ms()
        window = now_ms // self._window_ms
        charged: list[Payer] = []
        try:
            for payer in dict.fromkeys(payers):  # a payer named twice pays once
                await self._change(payer, window, size, now_ms)
                charged.append(payer)
        except BaseException:
            try:
                await self.give_back(Charge(tuple(charged), window, size))
            except Exception:  # noqa: S110 - kept, it overstates a share until it expires
                pass  # and the refusal (whose share) is what the caller must see
            raise
        return Charge(tuple(charged), window, size)

    async def charge_anyway(self, payers: Sequence[Payer], size: int) -> dict[Payer, int]:
        """Count `size` bytes stored for each payer, past their shares if need be: what was
        written already (a step's record, once it ran) is counted, never refused. Returns
        what each payer has used since, as counted then."""
        now_ms, window = self._now_ms(), self._now_ms() // self._window_ms
        named = list(dict.fromkeys(payers))
        totals = await asyncio.gather(  # one round trip's time for both payers, not two
            *(self._change(payer, window, size, now_ms, bounded=False) for payer in named)
        )
        return dict(zip(named, totals, strict=True))

    async def check_room(self, payers: Sequence[Payer], *, allowance: int = 0) -> None:
        """Whether each payer has used less than its share (and `allowance` bytes more) now.

        Raises:
            ShareExceeded: one of them has used that much.
        """
        now_ms = self._now_ms()
        named = list(dict.fromkeys(payers))
        counts = await asyncio.gather(*(self._read(payer) for payer in named))  # at once
        for payer, (usage, _) in zip(named, counts, strict=True):
            live = self._live(usage, now_ms)
            used, limit = sum(live.values()), self._limits[payer.kind]
            if used >= limit + allowance:
                raise ShareExceeded(self._refusal(payer, used, 0, limit, live))

    async def give_back(self, charge: Charge) -> None:
        """Take back a charge whose object was not stored (or was stored by another first)."""
        for payer in charge.payers:
            await self._change(payer, charge.window, -charge.size, self._now_ms())

    async def used(self, payer: Payer) -> int:
        """Bytes counted against the payer's share now."""
        usage, _ = await self._read(payer)
        return sum(self._live(usage, self._now_ms()).values())

    def _now_ms(self) -> int:
        return int(self._clock() * 1000)

    async def _read(self, payer: Payer) -> tuple[_Usage | None, int | None]:
        try:
            entry = await self._kv.get(usage_key(payer, self._terms))
        except KeyNotFoundError:
            return None, None
        if not entry.value:
            return None, entry.revision
        try:
            return _decoder.decode(entry.value), entry.revision
        except msgspec.DecodeError:  # never taken for zero: that would free the whole share
            key = usage_key(payer, self._terms)
            raise RuntimeError(f"the count {key} cannot be read") from None

    def _live(self, usage: _Usage | None, now_ms: int) -> dict[int, int]:
        """The windows whose objects may still be stored: an object charged in window `i` is
        gone `retention` after the window's end, and one window more covers chunks published
        after that end and the server's sweeps."""
        if usage is None:
            return {}
        width = usage.window_ms
        return {
            index: size
            for index, size in usage.bytes_by_window.items()
            if (index + 2) * width + self._retention_ms > now_ms and size > 0
        }

    async def _change(
        self, payer: Payer, window: int, size: int, now_ms: int, *, bounded: bool = True
    ) -> int:
        """Add `size` to the payer's count in `window`; returns its total since."""
        key = usage_key(payer, self._terms)
        for attempt in range(_RETRIES):
            usage, revision = await self._read(payer)
            live = self._live(usage, now_ms)
            if usage is not None and usage.window_ms != self._window_ms and live:
                # Counted in windows of another width (the retention changed): the total
                # moves to the current window, so the count never says less than it did.
                live = {now_ms // self._window_ms: sum(live.values())}
            if size > 0 and bounded:
                used, limit = sum(live.values()), self._limits[payer.kind]
                if used + size > limit:
                    raise ShareExceeded(self._refusal(payer, used, size, limit, live))
            left = live.get(window, 0) + size
            if left > 0:
                live[window] = left
            else:
                live.pop(window, None)
            value = _encoder.encode(_Usage(self._window_ms, live))
            try:
                if revision is None:
                    await self._kv.create(key, value)
                else:
                    await self._kv.update(key, value, last=revision)
                return sum(live.values())
            except KeyWrongLastSequenceError:
                # Another step charged or gave back first: count again, after a moment that
                # grows with the tries, so many steps of one person do not collide in step.
                await asyncio.sleep(random.uniform(0, 0.002 * attempt))  # noqa: S311
                continue
        raise RuntimeError(
            f"the share of {self._terms.store} of {payer.kind} {payer.name} kept changing"
        )

    def _refusal(self, payer: Payer, used: int, size: int, limit: int, live: dict[int, int]) -> str:
        """Why a write was refused, for the person whose step it was: their own share's
        figures, and of an agent's share (which others' steps fill too) only that it is full.
        `size` 0: a step refused before it wrote anything."""
        terms = self._terms
        setting = f"{terms.setting}_per_{payer.kind}"
        more = f"for {size} more bytes" if size else "left"
        if payer.kind == "agent":
            return (
                f"agent {payer.name}'s share of {terms.store} ({setting}) has no room {more} "
                f"now; its oldest bytes expire within {self._retention_ms // 1000} s "
                f"({terms.retention})"
            )
        oldest = min((i for i, s in live.items() if s > 0), default=None)
        frees = ""
        if oldest is not None:
            at_s = ((oldest + 2) * self._window_ms + self._retention_ms) / 1000
            when = datetime.fromtimestamp(at_s, UTC).isoformat(timespec="seconds")
            frees = f"; the oldest of them expire by {when} ({terms.retention})"
        passed = f"{size} more would pass it" if size else "it is used up"
        return (
            f"{terms.store} keeps {used} bytes for {payer.kind} {payer.name}, whose share "
            f"is {limit} ({setting}): {passed}{frees}"
        )
