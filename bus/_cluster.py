"""A cluster of real nats-servers (`EmbeddedCluster`) for `parley up --cluster 3` and the tests
that kill nodes: `size` `EmbeddedServer`s routed into one JetStream cluster on loopback.
"""

from __future__ import annotations

import functools
import json
import re
import tempfile
import threading
import time
import urllib.request
import weakref
from collections.abc import Callable
from pathlib import Path

from bus._embedded import EmbeddedServer, NatsServerError
from bus._ports import PortClaims, PortsExhausted, free_port
from bus._scratch import scratch_directory

__all__ = ("EmbeddedCluster",)

_SELF_META_LEADER = "Self is new JetStream cluster metadata leader"
_META_LEADER = re.compile(r"JetStream cluster new metadata leader: ([^/\s]+)")
_NO_META_LEADER = "JetStream cluster no metadata leader"
_STREAM_LEADER = re.compile(r"JetStream cluster new stream leader for '.* > (\S+)'")


def _meta_leader_in(line: str, node: str) -> tuple[bool, str | None]:
    """Whether node `node`'s log line names the metadata leader it now follows, and which
    (None: it has none)."""
    if _SELF_META_LEADER in line:
        return True, node
    if (match := _META_LEADER.search(line)) is not None:
        return True, match.group(1)
    return _NO_META_LEADER in line, None


def _meta_group_members(monitor_url: str) -> int:
    """How many nodes the node at `monitor_url` counts in the metadata group it follows (0:
    it does not answer yet, or follows no leader).

    Both the group's size and the peers it lists: before the first election a node reports
    its boot estimate as the size (its configured routes, every node) while its group holds
    only itself.
    """
    try:
        with urllib.request.urlopen(f"{monitor_url}/jsz", timeout=5) as response:  # noqa: S310 - a loopback node of ours
            meta = json.load(response).get("meta_cluster") or {}
        if not meta.get("leader"):
            return 0
        return min(int(meta.get("cluster_size") or 0), len(meta.get("replicas") or ()) + 1)
    except (OSError, ValueError, TypeError, AttributeError):
        return 0


class EmbeddedCluster:
    """`size` nats-servers on loopback routed into one JetStream cluster, each with its own
    store and the same settings as a single `EmbeddedServer` (sync always, the authorization
    include).

    Leadership is read from the nodes' logs as it changes: every node logs the metadata leader
    it follows, and a stream's new leader logs that it leads. Waiting for a leader is waiting
    for those lines, never polling. The metadata group's membership, which no line says at
    the default log level, is read from each node's monitoring endpoint once, at `start`. A
    node may be killed and started again (`kill`, `restart`); it keeps its ports and store.
    """

    def __init__(
        self,
        size: int = 3,
        store_dir: Path | None = None,
        *,
        name: str = "parley",
        sync_always: bool = True,
        authorization: Path | None = None,
        on_log: Callable[[str, str], None] | None = None,
        on_exit: Callable[[str, int], None] | None = None,
    ) -> None:
        """`on_log` gets each node's name and log line; `on_exit` each node's name and the
        exit code of each of its processes (`EmbeddedServer`'s `on_exit`)."""
        if size < 2:  # nats-server's metadata group of one node never elects a leader
            raise NatsServerError(f"a cluster needs at least two nodes, not {size}")
        self._owned_dir: tempfile.TemporaryDirectory[str] | None = None
        if store_dir is None:
            self._owned_dir = scratch_directory("parley-cluster-")
            store_dir = Path(self._owned_dir.name)
        self.store_dir = store_dir
        self.name = name
        self.names = tuple(f"n{index}" for index in range(1, size + 1))
        self._on_log = on_log
        self._on_exit = on_exit
        self._stopping = False
        """Set by `stop` and `close`: a node's exit then is theirs, not a death to tell."""
        self._changed = threading.Condition()
        self._meta_seen: dict[str, str | None] = dict.fromkeys(self.names)
        self._stream_leaders: dict[str, str] = {}
        route_ports: dict[str, int] = {}
        self._route_claims = PortClaims()
        weakref.finalize(self, self._route_claims.release)  # a cluster dropped unclosed
        for node in self.names:  # every config names every route port: all drawn first
            try:
                route_ports[node] = free_port(route_ports.values(), self._route_claims)
            except PortsExhausted as exc:
                raise NatsServerError(str(exc)) from None
        routes = ", ".join(f"nats-route://127.0.0.1:{port}" for port in route_ports.values())
        self._nodes = {
            node: EmbeddedServer(
                store_dir / node,
                sync_always=sync_always,
                authorization=authorization,
                on_log=self._log_reader(node),
                reserved_ports=route_ports.values(),  # a node not started yet has not bound it
                on_exit=None if on_exit is None else functools.partial(self._exited, node),
                extra_config=(
                    f"server_name: {node}\n"
                    "cluster {\n"
                    f"  name: {name}\n"
                    f"  listen: 127.0.0.1:{route_ports[node]}\n"
                    f"  routes: [{routes}]\n"
                    "}\n"
                ),
            )
            for node in self.names
        }

    @property
    def url(self) -> str:
        """Every node's client URL, comma-separated: what NATS_URL takes."""
        return ",".join(node.url for node in self._nodes.values())

    @property
    def monitor_url(self) -> str:
        """Every node's monitoring URL, comma-separated: what PARLEY_MONITOR_URL takes (an
        actor checks that each node it reaches fsyncs every write)."""
        return ",".join(node.monitor_url for node in self._nodes.values())

    def lock_store(self) -> None:
        """Lock every node's store now (`EmbeddedServer.lock_store`).

        Raises:
            StoreInUseError: another process runs a server on one of them.
        """
        for node in self._nodes.values():
            node.lock_store()

    def node(self, name: str) -> EmbeddedServer:
        return self._nodes[name]

    def kill(self, name: str) -> None:
        """SIGKILL node `name`, as a crash would; what it led is forgotten until re-elected."""
        self._nodes[name].kill()
        with self._changed:
            self._meta_seen[name] = None
            self._stream_leaders = {
                stream: leader for stream, leader in self._stream_leaders.items() if leader != name
            }
            self._changed.notify_all()

    def restart(self, name: str, timeout: float = 30.0) -> None:
        """Start node `name` again (same ports and store) and wait until every node, it too,
        follows one metadata leader.

        Raises:
            NatsServerError: it did not start, or did not rejoin in time.
        """
        with self._changed:
            self._meta_seen[name] = None
        self._nodes[name].start(timeout)
        self.wait_meta_leader(timeout)

    def _log_reader(self, node: str) -> Callable[[str], None]:
        def read(line: str) -> None:
            if self._on_log is not None:
                self._on_log(node, line)
            said, leader = _meta_leader_in(line, node)
            stream = _STREAM_LEADER.search(line)
            if not said and stream is None:
                return
            with self._changed:
                if said:
                    self._meta_seen[node] = leader
                if stream is not None:
                    self._stream_leaders[stream.group(1)] = node
                self._changed.notify_all()

        return read

    def meta_leader(self) -> str | None:
        """The metadata leader every running node follows, if they agree on a running one."""
        with self._changed:
            return self._agreed_meta_leader()

    def _agreed_meta_leader(self) -> str | None:
        running = [node for node in self.names if self._nodes[node].running()]
        seen = {self._meta_seen[node] for node in running}
        leader = seen.pop() if len(seen) == 1 else None
        return leader if leader in running else None

    def _followed(self) -> str:
        """What each node last said of the metadata leader it follows, for an error."""
        return ", ".join(
            f"{node} ({'running' if self._nodes[node].running() else 'down'}) follows"
            f" {self._meta_seen[node] or 'none'}"
            for node in self.names
        )

    def wait_meta_leader(self, timeout: float = 30.0, *, not_on: str | None = None) -> str:
        """Wait until every running node follows the same running metadata leader (other
        than `not_on`, a node just killed) and return its name.

        Raises:
            NatsServerError: no such leader within `timeout`.
        """

        def elected() -> bool:
            return self._agreed_meta_leader() not in (None, not_on)

        with self._changed:
            if not self._changed.wait_for(elected, timeout):
                raise NatsServerError(
                    f"no JetStream metadata leader within {timeout} s; {self._followed()}"
                )
            leader = self._agreed_meta_leader()
        assert leader is not None  # noqa: S101 - `elected` held under the same lock
        return leader

    def wait_stream_leader(
        self, stream: str, timeout: float = 30.0, *, not_on: str | None = None
    ) -> str:
        """Wait until a running node (other than `not_on`, a node just killed) leads `stream`,
        as its log said, and return its name.

        Raises:
            NatsServerError: no new leader within `timeout`.
        """

        def elected() -> bool:
            leader = self._stream_leaders.get(stream)
            return leader not in (None, not_on) and self._nodes[str(leader)].running()

        with self._changed:
            if not self._changed.wait_for(elected, timeout):
                raise NatsServerError(f"no new leader of {stream} within {timeout} s")
            return self._stream_leaders[stream]

    def start(self, timeout: float = 30.0) -> None:
        """Start every node and return once they follow one metadata leader.

        Raises:
            NatsServerError: a node did not start, or no leader was elected in time.
        """
        self._stopping = False
        try:
            for node in self._nodes.values():
                node.start(timeout)
            self.wait_meta_leader(timeout)
            self._wait_meta_members(timeout)
        except NatsServerError:
            self.stop()
            raise

    def _wait_meta_members(self, timeout: float) -> None:
        """Wait until every node counts every node in the metadata group.

        A new cluster's first leader adds its peers to the group one at a time after it is
        elected, and each node learns them as it applies those entries: killed in between, it
        left two nodes whose group still named only it and one of them, so neither could win
        an election (a vote from a peer the group does not name is not counted), and the
        cluster had no metadata leader until that node came back. JetStream says the group's
        size only on the monitoring endpoint (`/jsz`), so this reads it there, 20 ms apart.

        Raises:
            NatsServerError: a node did not count them all within `timeout`.
        """
        deadline = time.monotonic() + timeout
        while True:
            sizes = {
                name: _meta_group_members(node.monitor_url) for name, node in self._nodes.items()
            }
            if all(size == len(self.names) for size in sizes.values()):
                return
            if time.monotonic() > deadline:
                raise NatsServerError(
                    f"the metadata group did not name all {len(self.names)} nodes within"
                    f" {timeout} s: {sizes}"
                )
            time.sleep(0.02)  # a state only the monitoring endpoint tells

    def _exited(self, node: str, code: int) -> None:
        """Tell `on_exit` of a node's exit that no stop of ours asked for (a stop past its
        grace is killed, and its exit is no death)."""
        if self._on_exit is not None and not self._stopping:
            self._on_exit(node, code)

    def stop(self, timeout: float = 10.0) -> None:
        """Stop every node gracefully."""
        self._stopping = True
        for node in self._nodes.values():
            node.stop(timeout)

    def close(self) -> None:
        """Stop every node, let their ports go and remove the stores the cluster created for
        itself."""
        self._stopping = True
        for node in self._nodes.values():
            node.close()
        self._route_claims.release()
        if self._owned_dir is not None:
            self._owned_dir.cleanup()
            self._owned_dir = None
