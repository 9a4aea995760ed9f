"""The fault schedule of a run on a cluster: each node and PARLEY_SUBMIT's leader are hit in
turn like the actors, never the single server, and a node is never 'restarted' gracefully."""

from __future__ import annotations

from tools.chaos._schedule import SERVER, SUBMIT_LEADER, cluster_targets, plan_faults

ACTORS = ["gate", "router", "auditor", "gpt", "claude"]


def test_the_targets_are_every_node_and_the_submit_leader() -> None:
    assert cluster_targets(3) == ("nats-n1", "nats-n2", "nats-n3", SUBMIT_LEADER)


def test_every_node_and_the_leader_are_hit_before_any_target_twice() -> None:
    servers = cluster_targets(3)
    faults = plan_faults(1, 300, ACTORS, servers=servers)
    first = [fault.target for fault in faults[: len(ACTORS) + len(servers)]]
    assert sorted(first) == sorted([*ACTORS, *servers])
    assert SERVER not in {fault.target for fault in faults}
    on_nodes = [fault for fault in faults if fault.target in servers]
    assert on_nodes and all(fault.action in {"kill", "pause"} for fault in on_nodes)


def test_the_single_server_schedule_is_unchanged() -> None:
    assert plan_faults(1, 60, ACTORS) == plan_faults(1, 60, ACTORS, servers=(SERVER,))
