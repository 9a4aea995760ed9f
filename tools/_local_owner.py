"""Which `parley up` owns this directory's `.parley/`, and how a command tells it still runs.

Everything a local system keeps is under `.parley/` (its URL, its broker config, its console's
URL, its metrics targets). Two things follow:

- **One `parley up` a directory.** A second one here, even on a store of its own (`--store`),
  pointed this directory's commands at itself, and its stop removed the files of the first,
  which ran on unreachable. `claim_local_directory` takes an exclusive lock on
  `.parley/up.lock` for the life of the process (`flock`: the kernel lets it go when the
  process ends, however it ends), before anything is written for the system, so two started
  at the same instant cannot both pass; the loser is told the winner's pid and URL.
- **A URL is followed only while its writer lives.** `parley up` writes its URL to
  `.parley/nats.url` and itself beside it (`.parley/up.pid`: its pid and start time, which no
  later process with a reused pid shares); a file left by one that was killed is "no local
  system running", never a dead or foreign URL.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path
from typing import Final, TextIO

from bus import ConfigError

__all__ = (
    "LOCAL_DIR",
    "LOCAL_LOCK_FILE",
    "LOCAL_OWNER_FILE",
    "LOCAL_URL_FILE",
    "claim_local_directory",
    "forget_local_system",
    "local_system_alive",
    "record_local_system",
)

LOCAL_DIR: Final = Path(".parley")
LOCAL_URL_FILE: Final = LOCAL_DIR / "nats.url"
LOCAL_OWNER_FILE: Final = LOCAL_DIR / "up.pid"
LOCAL_LOCK_FILE: Final = LOCAL_DIR / "up.lock"


def _started(pid: int) -> str | None:
    """When process `pid` started (clock ticks since boot), None when there is no such
    process or it has ended (a zombie not yet reaped). Without /proc (not Linux), "" for any
    process that exists."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        if Path("/proc/self/stat").exists():
            return None
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return None
        except PermissionError:
            pass
        return ""
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[1].split()  # from field 3, after the command name
    return None if fields[0] == "Z" else fields[19]  # a zombie has ended; field 22: start


def claim_local_directory() -> TextIO:
    """This process's claim on `.parley/`, held while the returned file stays open (keep it
    for the life of `parley up`; the kernel lets the lock go when the process ends). The
    file holds the claimant's pid, for the refusal of the next.

    The file is opened close-on-exec, as Python opens every file, so no child started later
    holds the claim past its parent. A `parley up` on a server of its own choosing
    (`NATS_URL`) claims the directory too: it writes the metrics targets and the console's
    URL here as well.

    Raises:
        ConfigError: another `parley up` holds it (the message names its pid, and its URL
            once it has written it).
    """
    LOCAL_DIR.mkdir(parents=True, exist_ok=True)
    claim = LOCAL_LOCK_FILE.open("a")
    try:
        fcntl.flock(claim, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        claim.close()
        raise ConfigError(
            f"a local system already runs in this directory: {_holder()}: stop it first, or "
            "start another system from a directory of its own (each keeps its `.parley/`)"
        ) from None
    claim.truncate(0)
    claim.write(f"{os.getpid()}\n")
    claim.flush()
    return claim


def _holder() -> str:
    """The `parley up` holding the claim, as well as its files tell it."""
    try:
        pid = LOCAL_LOCK_FILE.read_text().strip()
    except OSError:
        pid = ""
    if not pid:  # between its lock and its write
        return "another `parley up` is starting here"
    try:
        owner = LOCAL_OWNER_FILE.read_text().split(" ", 1)[0]
        if local_system_alive() and owner == pid:
            return f"`parley up` pid {pid} ({LOCAL_URL_FILE.read_text().strip()})"
    except OSError:  # not written yet, or it stopped meanwhile
        pass
    return f"`parley up` pid {pid}"


def record_local_system(url: str) -> None:
    """`parley up`'s URL for the commands run here, and who wrote it."""
    LOCAL_DIR.mkdir(parents=True, exist_ok=True)
    LOCAL_OWNER_FILE.write_text(f"{os.getpid()} {_started(os.getpid())}\n")
    LOCAL_URL_FILE.write_text(url + "\n")


def forget_local_system() -> None:
    """`parley up` is stopping: no command should find its URL any more."""
    LOCAL_URL_FILE.unlink(missing_ok=True)
    LOCAL_OWNER_FILE.unlink(missing_ok=True)


def local_system_alive() -> bool:
    """Whether the `parley up` that wrote `.parley/nats.url` still runs."""
    try:
        pid_text, _, started = LOCAL_OWNER_FILE.read_text().strip().partition(" ")
        pid = int(pid_text)
    except (OSError, ValueError):
        return False
    now = _started(pid)
    return now is not None and now == started
