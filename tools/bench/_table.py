"""The benchmark's tables on the terminal: each row's figures and its ratio to raw nats-py."""

from __future__ import annotations

from typing import Any

from tools.bench._gate import ROWS as GATE_ROWS

__all__ = (
    "print_audit",
    "print_collab",
    "print_context",
    "print_gate",
    "print_latency",
    "print_publish",
    "print_relay",
    "print_runtime",
)


def print_collab(result: dict[str, Any]) -> None:
    rows = result.get("collab") or []
    if not rows:
        return
    print("\nCollaboration rounds through gate, router and two zero-latency scripted agents")
    print("(fsync always; a round = 4 JetStream hops + the router's compare-and-set):")
    print(
        f"{'sessions':>8} {'rounds':>7} {'rounds/s':>9} {'hops/s':>8} {'p50 ms':>8} {'p99 ms':>8}"
    )
    raw = next(
        (
            r["throughput"]
            for r in result.get("rows", [])
            if r["name"] == "js-raw" and r["fsync"] == "always"
        ),
        None,
    )
    for row in rows:
        print(
            f"{row['sessions']:>8} {row['rounds']:>7} {row['rounds_per_s']:>9.0f} "
            f"{row['hops_per_s']:>8.0f} {row['session_p50_ms']:>8.0f} {row['session_p99_ms']:>8.0f}"
        )
    if raw:
        best = max(row["hops_per_s"] for row in rows)
        print(f"  best hops/s over raw nats-py js-raw msgs/s (fsync always): {best / raw:.2f}x")


def print_runtime(result: dict[str, Any]) -> None:
    print(f"{'row':<10} {'fsync':<7} {'p50 µs':>9} {'p99 µs':>9} {'msgs/s':>9} {'CPU µs/env':>11}")
    for row in result["rows"]:
        cpu = row["cpu_us_per_envelope"]
        print(
            f"{row['name']:<10} {row['fsync']:<7} {row['p50_us']:>9.0f} {row['p99_us']:>9.0f} "
            f"{row['throughput']:>9.0f} {'' if cpu is None else f'{cpu:.1f}':>11}"
        )
    print("\nParley / raw nats-py JetStream (same server, same run):")
    for fsync, ratio in result["ratios_parley_to_raw"].items():
        print(
            f"  fsync={fsync:<6} p50 {ratio['p50_latency']:.2f}x  p99 {ratio['p99_latency']:.2f}x  "
            f"throughput {ratio['throughput']:.2f}x  CPU/envelope {ratio['cpu_per_envelope']:.2f}x"
        )


def print_gate(gate: dict[str, Any]) -> None:
    head = f"{'row':<14} {'fsync':<7} {'added p50':>10} {'added p99':>10} {'msgs/s':>9}"
    print(f"\n{head} {'CPU µs':>8}")
    for fsync in ("always", "lazy"):
        for name in GATE_ROWS:
            row = gate[fsync][name]
            print(
                f"{name:<14} {fsync:<7} {row['added_p50_us']:>10.0f} "
                f"{row['added_p99_us']:>10.0f} {row['throughput']:>9.0f} "
                f"{row['cpu_us_per_envelope']:>8.1f}"
            )
    for key, title in (
        ("ratios", "One gate process / raw nats-py relay (same server, same run):"),
        ("floor", "The guarded relay / the raw relay: what the gate's stores cost any client:"),
        ("over_floor", "The gate / the guarded relay: what Parley adds to those stores:"),
    ):
        print(f"\n{title}")
        for fsync in ("always", "lazy"):
            ratio = gate[fsync][key]
            print(
                f"  fsync={fsync:<6} throughput {ratio['throughput']:.2f}x  "
                f"added p50 {ratio['added_p50']:.2f}x  added p99 {ratio['added_p99']:.2f}x"
            )
    decide = gate["decide"]
    print(f"  decide() alone: p50 {decide['p50_us']:.1f} µs, p99 {decide['p99_us']:.1f} µs")


def print_audit(audit: dict[str, Any]) -> None:
    print("\nAudit appends, fsync=always (one auditor vs raw publish_async + Nats-Msg-Id):")
    print(
        f"  raw {audit['raw_publish_async_per_s']:.0f}/s  auditor "
        f"{audit['auditor_records_per_s']:.0f} records/s  ratio {audit['ratio']:.2f}x  "
        f"chain {'intact' if audit['chain_intact'] else 'BROKEN'}"
    )


def print_context(row: dict[str, Any]) -> None:
    parts = ", ".join(f"{name} {tokens}" for name, tokens in row["parts"].items())
    print("\nContext sent to brains for one task (seed 004's context bloat, tokens):")
    print(f"  one agent, three steps:             {row['single_agent']:>6}")
    print(f"  planner -> coder -> reviewer:       {row['multi_agent']:>6}  ({parts})")
    print(f"  ratio (seed 004: under 1.2):        {row['ratio']:>6.2f}")


def print_latency(rows: list[dict[str, Any]]) -> None:
    print("\nOne `say` at a time after an idle gap (person -> gate -> router -> gate -> agent ->")
    print("gate -> router -> person; zero-latency brain; fsync always):")
    print(
        f"{'gap s':>6} {'path':<8} {'calls':>6} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8} "
        f"{'CPU ms':>8} {'server':>8}"
    )
    for row in rows:
        print(
            f"{row['gap_s']:>6g} {row['path']:<8} {row['calls']:>6} {row['p50_ms']:>8.1f} "
            f"{row['p99_ms']:>8.1f} {row['max_ms']:>8.1f} {row['cpu_ms']:>8.1f} "
            f"{row['server_cpu_ms']:>8.1f}"
        )
    print("(CPU ms: every process of the run, the server's share beside it, per call in flight)")
    print("\nParley / raw nats-py (aims: p50 <= 1.3x raw; p99 <= 2x p50; max < 250 ms), and the")
    print("guarded path (raw nats-py storing what Parley's guarantees store) / raw: their floor:")
    by_gap: dict[float, dict[str, dict[str, Any]]] = {}
    for row in rows:
        by_gap.setdefault(row["gap_s"], {})[row["path"]] = row
    for gap_s, paths in by_gap.items():
        raw, guarded, parley = paths["raw"], paths["guarded"], paths["parley"]
        print(
            f"  gap {gap_s:>4g} s  p50 {parley['p50_ms'] / raw['p50_ms']:.2f}x raw  "
            f"p99/p50 {parley['p99_ms'] / parley['p50_ms']:.2f}x  max {parley['max_ms']:.0f} ms  "
            f"floor {guarded['p50_ms'] / raw['p50_ms']:.2f}x raw  "
            f"Parley {parley['p50_ms'] / guarded['p50_ms']:.2f}x guarded"
        )


def print_relay(result: dict[str, Any]) -> None:
    rows = result["forwards"]
    print("\nThe shared-agent relay: a delivered call sealed (Ed25519 + HPKE) and stored on the")
    print("gateway, Parley's relay against a raw nats-py relay doing the same sealing:")
    print(f"{'path':<7} {'forwards':>8} {'fwd/s':>8} {'calls':>6} {'p50 ms':>8} {'p99 ms':>8}")
    for row in rows:
        print(
            f"{row['path']:<7} {row['forwards']:>8} {row['forwards_per_s']:>8.0f} "
            f"{row['calls']:>6} {row['p50_ms']:>8.1f} {row['p99_ms']:>8.1f}"
        )
    raw, parley = (next(r for r in rows if r["path"] == path) for path in ("raw", "parley"))
    print(
        f"\nParley / raw nats-py (aims: >= 0.7x forwards/s, p50 <= 1.3x): "
        f"{parley['forwards_per_s'] / raw['forwards_per_s']:.2f}x forwards/s, "
        f"p50 {parley['p50_ms'] / raw['p50_ms']:.2f}x"
    )
    print("\nOne orchestrated turn's remote leg (the router's draft sent to the answer handled):")
    print(f"{'path':<15} {'turns':>6} {'p50 ms':>8} {'p99 ms':>8}")
    for row in result["turns"]:
        print(f"{row['path']:<15} {row['turns']:>6} {row['p50_ms']:>8.1f} {row['p99_ms']:>8.1f}")
    local, relayed = result["turns"]
    print(f"added by the relay: p50 {relayed['p50_ms'] - local['p50_ms']:.1f} ms")


def print_publish(rows: list[dict[str, Any]]) -> None:
    print("\nStoring batches of 64 in one stream (ratio: throughput to one PubAck per message):")
    print(
        f"  {'mode':<13} {'fsync':<7} {'msgs/s':>8} {'ratio':>6} "
        f"{'client µs':>10} {'server µs':>10} {'flow acks/batch':>16}"
    )
    for row in rows:
        print(
            f"  {row['mode']:<13} {row['fsync']:<7} {row['per_s']:>8.0f} {row['ratio']:>5.2f}x "
            f"{row['client_us']:>10.1f} {row['server_us']:>10.1f} "
            f"{row['flow_acks_per_batch']:>16.2f}"
        )
