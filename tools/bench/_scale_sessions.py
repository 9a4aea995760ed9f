"""The scale row's sessions figure: many collaborations at once whose agents think for seconds.

The whole system runs as in production (tools/bench/_system.py: gate, router, auditor, two
agent hosts, one `sync_interval: always` server), but the agents' scripted brains wait before
each answer, as a model would: 1.0 to 3.0 s, known in advance for every turn (its session's
think class and its round), so the benchmark can take the agents' own time out of a session's.
What is left, per turn, is Parley's added time: the router's call through the gate, the
answer back through the gate, the router's compare-and-set, and any queueing in between.

It runs a wave of a few sessions, then a wave of many, all submitted at once as `parley
collab` submits them, and judges: every session must end at its cap (`cap_reached`), and the
median added time per turn with many sessions must be within `AIM_RATIO` of that with few.
Each process's resident memory is sampled during both waves; the growth of its peak between
them, per extra session, is printed (no aim: it is what a deployment sizes by).
"""

from __future__ import annotations

import asyncio
import statistics
from collections.abc import Callable
from pathlib import Path
from typing import Any

import nats

from bus import EmbeddedServer, provision, scratch_directory, shipped
from schemas import HumanMessage, Namespace, new_id, utc_now
from tools.bench._collab import _Waiter, submit_sessions
from tools.bench._store_floor import (
    StreamStores,
    floor_sessions_per_s,
    session_stores,
    sessions_per_s_asked,
    stores_since,
    stream_sequences,
)
from tools.bench._system import RunningSystem, demo_system

__all__ = (
    "AIM_RATIO",
    "ROUNDS",
    "judged",
    "print_sessions",
    "sessions_scale",
    "think_s",
)

AIM_RATIO = 2.0
"""Most that many sessions may multiply the added time per turn of few."""
ROUNDS = 3
"""Turns of every session (each the cap: every turn hands over)."""
_CLASSES = 5
_AGENTS = ("gpt", "claude")
_MEASURED = ("gate", "router", *_AGENTS)
_SAMPLE_S = 0.5
_FLOOR_SESSIONS = 200
"""Sessions' worth of stores the floor makes: a few seconds of work at its rate."""


def think_s(think_class: int, round_: int) -> float:
    """How long an agent thinks in `round_` of a session of `think_class`: 1.0 to 3.0 s."""
    return 1.0 + ((think_class + round_) % _CLASSES) * 0.5


def _script(agent: str) -> str:
    other = _AGENTS[1 - _AGENTS.index(agent)]
    turns = [
        f'[[turn]]\ngoal = "think{think_class}x"\nround = {round_}\n'
        f"delay_s = {think_s(think_class, round_)}\n"
        f'message = "{agent} r{round_}"\n'
        f'handoff = {{ to = "{other}", task = "go on" }}\n'
        for think_class in range(_CLASSES)
        for round_ in range(1, ROUNDS + 1)
    ]
    return "\n".join(turns)


def _agents_env(scratch: Path, sessions: int) -> dict[str, dict[str, str]]:
    """Each agent's profile (the shipped one, with the thinking script) and room to think
    about every session's call at once."""
    env: dict[str, dict[str, str]] = {}
    for agent in _AGENTS:
        script = scratch / f"{agent}-script.toml"
        script.write_text(_script(agent))
        base = (shipped("deploy/agents") / f"{agent}.toml").read_text()
        profile = scratch / f"{agent}.toml"
        profile.write_text(base.replace(f'"scripts/{agent}.toml"', f'"{script}"'))
        env[agent] = {
            "PARLEY_OPTIONS": f'{{"profile": "{profile}"}}',
            "PARLEY_MAX_IN_FLIGHT": str(sessions + 64),
        }
    return env


def _session(n: int) -> HumanMessage:
    return HumanMessage(
        id=new_id(),
        created_at=utc_now(),
        text=f"Benchmark think{n % _CLASSES}x session {n}: keep improving the answer.",
        call_id=new_id(),
        mode="collaborate",
        participants=_AGENTS,
        first_speaker="gpt",
        max_rounds=ROUNDS,
        session_id=new_id(),
    )


def _think_total(n: int) -> float:
    """The seconds session `n`'s agents think over all its turns."""
    return sum(think_s(n % _CLASSES, r) for r in range(1, ROUNDS + 1))


def _rss_kb(pid: int | None) -> int:
    if pid is None:
        return 0
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        return 0
    return 0


async def _wave(
    system: RunningSystem, ns: Namespace, waiter: _Waiter, count: int, first: int
) -> dict[str, Any]:
    """Submit `count` sessions at once and wait for all; their added time per turn, how
    they ended, and each process's peak resident memory meanwhile."""
    messages = [_session(first + i) for i in range(count)]
    peaks = dict.fromkeys(_MEASURED, 0)
    done = asyncio.Event()

    async def sample() -> None:
        while not done.is_set():
            for name in _MEASURED:
                peaks[name] = max(peaks[name], _rss_kb(system.supervisor.pid(name)))
            try:
                await asyncio.wait_for(done.wait(), _SAMPLE_S)
            except TimeoutError:
                pass

    sampler = asyncio.ensure_future(sample())
    try:
        await submit_sessions(system.nc, ns, waiter, messages, timeout_s=300 + count)
    except TimeoutError:
        pass  # judged below: the sessions that did not end are not complete
    finally:
        done.set()
        await sampler
    think = {m.session_id: _think_total(first + i) for i, m in enumerate(messages)}
    added = [(waiter.took[s] - think[s]) / ROUNDS * 1000 for s in waiter.took] or [float("inf")]
    return {
        "sessions": count,
        "completed": sum(r == "cap_reached" for r in waiter.reasons.values()),
        "added_ms_per_turn_p50": statistics.median(added),
        "added_ms_per_turn_p99": sorted(added)[min(len(added) - 1, int(0.99 * len(added)))],
        "wall_s": max(waiter.took.values(), default=0.0),
        "peak_rss_kb": peaks,
    }


async def sessions_scale(few: int, many: int) -> dict[str, Any]:
    """Waves of `few` then `many` sessions; the figures and their verdicts."""
    ns = Namespace("benchsessions")
    with scratch_directory("parley-bench-sessions-") as scratch:
        env = _agents_env(Path(scratch), max(few, many))
        async with demo_system(ns, child_env=env) as system:
            waiter = _Waiter()
            sub = await system.nc.subscribe(ns.wildcard("events"), cb=waiter.on_event)
            js = system.nc.jetstream()
            try:
                await _wave(system, ns, waiter, 1, 0)  # warm every process up
                before = await stream_sequences(js)
                small = await _wave(system, ns, waiter, few, 1)
                stores = await session_stores(js, before, few)
                before = await stream_sequences(js)
                large = await _wave(system, ns, waiter, many, 1 + few)
                made = await stores_since(js, before)
            finally:
                await sub.unsubscribe()
    floor = await _floor(stores, ns)
    asked = sessions_per_s_asked(
        many,
        [_think_total(1 + few + i) for i in range(many)],
        ROUNDS,
        small["added_ms_per_turn_p50"],
        AIM_RATIO,
    )
    return judged(small, large) | {
        "stores_per_session": sum(s.per_session for s in stores),
        "stores_by_stream": {s.stream: s.per_session for s in stores},
        "floor_sessions_per_s": floor,
        "parley_stores_per_s": made / max(large["wall_s"], 1e-9),
        "asked_sessions_per_s": asked,
    }


async def _floor(stores: list[StreamStores], ns: Namespace) -> float:
    """`floor_sessions_per_s` on a server of its own, once the system is down: nothing of
    Parley's (the auditor catching up, heartbeats) shares the machine with it."""
    floor_ns = Namespace("benchfloor")
    with scratch_directory("parley-bench-floor-") as scratch:
        server = EmbeddedServer(Path(scratch) / "nats")
        await asyncio.to_thread(server.start)
        try:
            nc = await nats.connect(server.url)
            try:
                await provision(nc.jetstream(), floor_ns, agents=_AGENTS)
            finally:
                await nc.close()
            return await floor_sessions_per_s(server.url, stores, ns, floor_ns, _FLOOR_SESSIONS)
        finally:
            await asyncio.to_thread(server.stop)


def judged(small: dict[str, Any], large: dict[str, Any]) -> dict[str, Any]:
    """The figure from its two waves: the ratio of their added time per turn, its verdict
    (FAIL too when a session did not complete), and the memory per extra session."""
    few, many = small["sessions"], large["sessions"]
    ratio = large["added_ms_per_turn_p50"] / max(small["added_ms_per_turn_p50"], 1e-9)
    complete = small["completed"] == few and large["completed"] == many
    extra = max(many - few, 1)
    per_session = {
        name: (large["peak_rss_kb"][name] - small["peak_rss_kb"][name]) / extra
        for name in _MEASURED
    }
    return {
        "rounds": ROUNDS,
        "few": small,
        "many": large,
        "all_completed": complete,
        "added_ratio": ratio,
        "rss_kb_per_session": per_session,
        "aims": {"added_ratio": AIM_RATIO},
        "pass": {"added_ratio": complete and ratio <= AIM_RATIO, "all_completed": complete},
        "measured": "session time from submission to its end event, less its agents' known "
        "think time, per turn; VmRSS of each process sampled every 0.5 s during a wave",
    }


def print_sessions(run: dict[str, Any], verdict: Callable[[str, str, str, bool], None]) -> None:
    """Print the figure: both waves, the ratio and its verdict, the memory per session."""
    few, many = run["few"], run["many"]
    print(
        f"\nscale: {many['sessions']:,} collaborations at once against {few['sessions']:,}, "
        f"{run['rounds']} turns each, agents thinking 1-3 s a turn"
    )
    for wave in (few, many):
        print(
            f"  {wave['sessions']:>6,} at once: {wave['completed']:,} completed; Parley's "
            f"added time per turn p50 {wave['added_ms_per_turn_p50']:,.0f} ms, "
            f"p99 {wave['added_ms_per_turn_p99']:,.0f} ms"
        )
    if not run["all_completed"]:
        print("  not every session completed at its cap: the ratio is not a measurement")
    verdict(
        f"added time per turn, {many['sessions']:,} / {few['sessions']:,}",
        f"{run['added_ratio']:.2f}x",
        f"<= {run['aims']['added_ratio']:g}x",
        run["pass"]["added_ratio"],
    )
    if "floor_sessions_per_s" in run:
        floor, asked = run["floor_sessions_per_s"], run["asked_sessions_per_s"]
        per_session = run["stores_per_session"]
        print(
            f"  the stores of a session ({per_session:.0f}, fsynced), made without Parley on a "
            f"server of their own: {floor:,.0f} sessions/s ({floor * per_session:,.0f} "
            f"stores/s); the aim "
            f"asks {asked:,.1f}/s; Parley made {run['parley_stores_per_s']:,.0f} stores/s in "
            f"the large wave"
        )
        if floor < asked:
            print(
                "  below what the aim asks: these stores alone do not go fast enough on this "
                "machine"
            )
    for name, kb in run["rss_kb_per_session"].items():
        peak = many["peak_rss_kb"][name] / 1024
        print(f"    {name:<8} {kb:7.1f} KB resident per session (peak {peak:,.0f} MB)")
