"""Rate leases (actors/gate/_rate_leases.py): a replica spends leased tokens without a round trip,
and replicas with leases still never admit more than the token bucket allows.

The property test runs several replicas over one shared bucket the way the gate does (cover
from the lease, or load the shared bucket; decide; take a lease; commit; keep what is left),
with random batches, clock steps and replica crashes (a restarted replica has lost its
leases), and checks the token bucket's promise over every window: admissions between two
moments never exceed the capacity plus what refills in between.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hypothesis import given, settings
from hypothesis import strategies as st

from actors.gate._decide import Allow, Ledger, decide
from actors.gate._plan import Route, Submission, plan
from actors.gate._rate_leases import LEASE_MS, MARGIN_MS, RateLeases, lease_size
from actors.gate._records import Lease, RateBucket, rate_key
from tests.support.gatesim import NOW_MS, bundle, human

RATE = 640  # a minute: leases of 10
POLICY = bundle(
    cli={
        "start_traces": True,
        "speaks_for_person": True,
        "allowed_targets": ("router",),
        "rate_per_minute": RATE,
    },
    router={},
)
KEY = rate_key("cli", "router")


def _routes(count: int, now_ms: int) -> list[Route]:
    routes = []
    for _ in range(count):
        route = plan(Submission(human(), "cli", "", {}, now_ms), None, POLICY, "")
        assert isinstance(route, Route)
        routes.append(route)
    return routes


@dataclass
class Replica:
    """One gate replica's rate handling, against a shared store of buckets."""

    name: str
    leases: RateLeases = field(init=False)
    round_trips: int = 0

    def __post_init__(self) -> None:
        self.leases = RateLeases(self.name)

    def batch(self, store: dict[str, RateBucket], count: int, now_ms: int) -> int:
        """Decide `count` roots as the gate does; return how many were admitted."""
        routes = _routes(count, now_ms)
        local = self.leases.covered(routes, now_ms)
        ledger = Ledger(dict(local) if local else {KEY: store.get(KEY)})
        returned = self.leases.fold(ledger, now_ms)
        admitted = sum(isinstance(decide(r, ledger, POLICY), Allow) for r in routes)
        taken = self.leases.grants(ledger, routes, local, now_ms)
        if KEY not in local and KEY in ledger.dirty:
            value = ledger.values[KEY]
            assert isinstance(value, RateBucket)
            store[KEY] = value  # the compare-and-set commit (one writer at a time here)
            self.round_trips += 1
        self.leases.spent(ledger, local)
        self.leases.granted(taken, frozenset(), returned)
        return admitted


def test_lease_sizes() -> None:
    assert [lease_size(r) for r in (20, 63, 64, 640, 6400, 10**9)] == [0, 0, 1, 10, 100, 256]


def test_a_small_limit_is_never_leased() -> None:
    small = bundle(
        cli={"start_traces": True, "speaks_for_person": True, "allowed_targets": ("router",)},
        router={},
    )
    route = plan(Submission(human(), "cli", "", {}, NOW_MS), None, small, "")
    assert isinstance(route, Route) and route.profile.rate_per_minute < 64
    ledger = Ledger({KEY: None})
    assert isinstance(decide(route, ledger, small), Allow)
    assert RateLeases("g1").grants(ledger, [route], (), NOW_MS) == {}


def test_batches_after_the_first_are_decided_from_the_lease() -> None:
    store: dict[str, RateBucket] = {}
    replica = Replica("g1")
    assert replica.batch(store, 1, NOW_MS) == 1
    assert replica.round_trips == 1
    assert store[KEY].leases["g1"] == Lease(tokens=10.0, expires_ms=NOW_MS + LEASE_MS)
    assert store[KEY].tokens == RATE - 1 - 10
    for n in range(5):  # 2 + 2 + 2 + 2 + 2 of the 10 leased: no round trip
        assert replica.batch(store, 2, NOW_MS + n) == 2
    assert replica.round_trips == 1
    assert replica.batch(store, 2, NOW_MS + 10) == 2  # the lease is spent: back to the bucket
    assert replica.round_trips == 2


def test_a_lease_that_cannot_cover_a_batch_gives_its_leftover_back() -> None:
    store: dict[str, RateBucket] = {}
    replica = Replica("g1")
    replica.batch(store, 1, NOW_MS)  # bucket 629, lease 10
    replica.batch(store, 4, NOW_MS)  # from the lease: 6 left
    assert replica.round_trips == 1
    replica.batch(store, 8, NOW_MS)  # 6 go back: 635 - 8 = 627, then a new lease of 10
    assert store[KEY].tokens == 617
    assert store[KEY].leases["g1"].tokens == 10
    assert replica.round_trips == 2


def test_a_lease_larger_than_a_lowered_limit_allows_is_given_back() -> None:
    store: dict[str, RateBucket] = {}
    replica = Replica("g1")
    replica.batch(store, 1, NOW_MS)  # a lease of 10 under 640 a minute
    lowered = bundle(
        cli={
            "start_traces": True,
            "speaks_for_person": True,
            "allowed_targets": ("router",),
            "rate_per_minute": 320,
        },
        router={},
    )
    route = plan(Submission(human(), "cli", "", {}, NOW_MS), None, lowered, "")
    assert isinstance(route, Route)
    assert replica.leases.covered([route], NOW_MS) == {}  # 320 allows leases of 5, not 10


def test_a_lease_is_not_spent_in_its_last_margin() -> None:
    store: dict[str, RateBucket] = {}
    replica = Replica("g1")
    replica.batch(store, 1, NOW_MS)
    replica.batch(store, 1, NOW_MS + LEASE_MS - MARGIN_MS)
    assert replica.round_trips == 2


def test_live_leases_hold_back_the_refill() -> None:
    """A full bucket with 10 tokens leased out refills to 630, not 640."""
    bucket = RateBucket(
        tokens=0.0, at_ms=NOW_MS, leases={"g2": Lease(tokens=10.0, expires_ms=NOW_MS + 10**6)}
    )
    ledger = Ledger({KEY: bucket})
    later = NOW_MS + 120_000  # two minutes: the bucket would be full twice over
    (route,) = _routes(1, later)
    assert isinstance(decide(route, ledger, POLICY), Allow)
    spent = ledger.values[KEY]
    assert isinstance(spent, RateBucket)
    assert spent.tokens == RATE - 10 - 1
    assert spent.leases == bucket.leases  # other replicas' leases survive a spend


def test_a_lease_and_a_refilled_bucket_never_add_up_to_more_than_the_capacity() -> None:
    """The burst a lease could add: g1 holds 10 tokens while the bucket refills, then g1
    spends its lease and g2 the whole bucket at the same moment. Together: 640, not 650."""
    store: dict[str, RateBucket] = {}
    g1, g2 = Replica("g1"), Replica("g2")
    assert g1.batch(store, 1, NOW_MS) == 1  # takes a lease of 10; the bucket holds 629
    later = NOW_MS + 1500  # 16 tokens of refill: enough to fill it, were the lease forgotten
    assert g2.batch(store, RATE, later) == RATE - 10
    assert g1.batch(store, 10, later) == 10


steps = st.lists(
    st.tuples(
        st.integers(0, 2),  # which replica
        st.integers(1, 64),  # batch size
        st.integers(0, 1500),  # ms since the previous batch
        st.booleans(),  # the replica crashed and restarted just before (its leases lost)
    ),
    min_size=1,
    max_size=60,
)


@settings(max_examples=200, deadline=None)
@given(steps)
def test_replicas_with_leases_never_exceed_the_bucket(
    plan_: list[tuple[int, int, int, bool]],
) -> None:
    store: dict[str, RateBucket] = {}
    replicas = [Replica(f"g{n}") for n in range(3)]
    now = NOW_MS
    admitted: list[tuple[int, int]] = []  # (time, admitted) per batch, in time order
    for which, count, step_ms, crashed in plan_:
        now += step_ms
        if crashed:
            replicas[which] = Replica(f"g{which}-{now}")
        admitted.append((now, replicas[which].batch(store, count, now)))
    for i, (start, _) in enumerate(admitted):
        total = 0
        for end, count in admitted[i:]:
            total += count
            allowed = RATE + (end - start) * RATE / 60_000
            assert total <= allowed + 1e-6, (start, end, total, allowed)
