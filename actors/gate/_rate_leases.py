"""Rate tokens a gate replica holds, so a busy (profile, target) costs no round trip each.

Without leases every admission spends a token of the shared bucket, and the gate must commit
that spend with compare-and-set before it delivers anything: one more fsync'd round per batch,
which is most of what the gate adds to a message's latency. With a lease, a replica takes a
handful of tokens in the same commit that spends the batch's, records them in the bucket
(`RateBucket.leases`, which holds back its refill), and spends them locally on the batches
that follow until they run out or expire. A batch the lease cannot cover gives its leftover
back to the bucket before being decided against it, so no token is stranded. Only buckets
large enough to share are leased (a lease is at most 1/64 of the capacity), so a limit of 20
a minute is still spent token by token, and no replica can starve another.

Exactness: a lease's tokens leave the bucket when granted, and the bucket refills only to its
capacity minus live leases, so bucket and leases together never exceed the capacity. A replica
stops spending a lease `MARGIN_MS` before it expires (clocks of replicas differ a little); a
lease that dies with its replica only lowers the rate until it expires.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import Final

from msgspec import structs

from actors.gate._decide import Ledger, spends_rate
from actors.gate._plan import Route
from actors.gate._records import Lease, RateBucket, rate_key

__all__ = ("LEASE_MS", "MARGIN_MS", "RateLeases", "lease_size")

LEASE_MS: Final = 2_000
"""How long a lease may be spent."""
MARGIN_MS: Final = 250
"""A replica stops spending a lease this long before its expiry."""
_MAX_LEASE: Final = 256


def lease_size(rate_per_minute: int) -> int:
    """Tokens one lease takes: none below 64 a minute, at most 1/64 of the capacity."""
    return min(_MAX_LEASE, rate_per_minute // 64)


class RateLeases:
    """The leases this replica holds, by rate key: tokens left and when they stop counting."""

    def __init__(self, holder: str) -> None:
        self.holder = holder
        self._held: dict[str, tuple[float, int]] = {}

    def covered(self, routes: Iterable[Route], now_ms: int) -> dict[str, RateBucket]:
        """Buckets to decide a batch against locally: the rate keys whose lease covers every
        message of the batch that would spend from them. Each is a bucket holding the lease's
        tokens and nothing to refill, so `decide()` spends them like any other."""
        wanted: Counter[str] = Counter()
        allowed: dict[str, int] = {}
        for route in routes:
            if not spends_rate(route):
                continue
            key = rate_key(route.sub.sender, route.target)
            wanted[key] += 1
            size = lease_size(route.profile.rate_per_minute)  # the bundle in force now
            allowed[key] = min(allowed.get(key, size), size)
        local: dict[str, RateBucket] = {}
        for key, count in wanted.items():
            tokens, expires_ms = self._held.get(key, (0.0, 0))
            # A lease larger than the bundle now allows (its limit was lowered) is given back.
            fits = 0 < tokens <= allowed[key]
            if fits and now_ms < expires_ms - MARGIN_MS and tokens >= count:
                local[key] = RateBucket(tokens=tokens, at_ms=now_ms)
        return local

    def fold(self, ledger: Ledger, now_ms: int) -> dict[str, tuple[float, int]]:
        """Give back what is left of this replica's leases on the shared buckets a batch is
        about to be decided against (the lease did not cover it), so no token is stranded:
        the leftover goes back into the bucket and the lease leaves it. Returns what was
        given back, to restore if the commit does not go through."""
        returned: dict[str, tuple[float, int]] = {}
        for key, held in list(self._held.items()):
            bucket = ledger.values.get(key)
            if not isinstance(bucket, RateBucket) or self.holder not in bucket.leases:
                continue
            tokens, expires_ms = held
            leases = {k: v for k, v in bucket.live_leases(now_ms).items() if k != self.holder}
            back = tokens if now_ms < expires_ms else 0.0
            ledger.put(key, structs.replace(bucket, tokens=bucket.tokens + back, leases=leases))
            returned[key] = self._held.pop(key)
        return returned

    def spent(self, ledger: Ledger, local: Iterable[str]) -> None:
        """Keep what the batch left of the leases it was decided against."""
        for key in local:
            bucket = ledger.values.get(key)
            if isinstance(bucket, RateBucket) and key in self._held:
                self._held[key] = (bucket.tokens, self._held[key][1])

    def grants(
        self, ledger: Ledger, routes: Iterable[Route], local: Iterable[str], now_ms: int
    ) -> dict[str, Lease]:
        """Leases to take from the shared buckets this batch spent from, writing each into
        the ledger's bucket (this replica's earlier lease, if any, is replaced)."""
        skip = set(local)
        sizes: dict[str, int] = {}
        for route in routes:
            if not spends_rate(route):
                continue
            key = rate_key(route.sub.sender, route.target)
            if key not in skip and key in ledger.dirty:
                sizes[key] = lease_size(route.profile.rate_per_minute)
        taken: dict[str, Lease] = {}
        for key, size in sizes.items():
            bucket = ledger.values.get(key)
            if not isinstance(bucket, RateBucket):
                continue
            tokens = float(min(size, int(bucket.tokens)))
            if tokens < 1:
                continue
            lease = Lease(tokens=tokens, expires_ms=now_ms + LEASE_MS)
            leases = {**bucket.live_leases(now_ms), self.holder: lease}
            ledger.put(key, structs.replace(bucket, tokens=bucket.tokens - tokens, leases=leases))
            taken[key] = lease
        return taken

    def granted(
        self,
        taken: dict[str, Lease],
        stale: frozenset[str],
        returned: dict[str, tuple[float, int]] | None = None,
    ) -> None:
        """The commit stored these leases and returns (except on `stale` keys, where the
        bucket is as it was: the lease given back is this replica's again)."""
        for key, held in (returned or {}).items():
            if key in stale:
                self._held[key] = held
        for key, lease in taken.items():
            if key not in stale:
                self._held[key] = (lease.tokens, lease.expires_ms)
