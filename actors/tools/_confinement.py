"""The limits and the identity a Shell.Exec command runs under, whether or not it is sandboxed.

Resource limits (`setrlimit`) are per process, and `RLIMIT_NPROC` counts every process of the
child's real user and does not bind root at all. A runtime running as root (as in CI and in
most containers) therefore runs each command under a user of its own: a uid taken from a
range no account uses, leased for the run (shared by runs in the same workspace at once).
That one choice gives three defences: the process limit binds (it counts only the run's
processes), the command cannot write anything the runtime owns outside its workspace, and
"every process of the run" is well defined, so `sweep_user` can kill one that left the
process group (`setsid`). The workspace is handed to that user for the run and taken back
after it (actors/tools/_sandbox_lease.py).

A runtime that is not root cannot switch users: the process limit is then set above the
processes its own user already has (it counts them too), and a process that left the group
survives unless bubblewrap's PID namespace holds it (see docs/tools.md).
"""

from __future__ import annotations

import ctypes
import functools
import logging
import os
import resource
import shutil
import signal
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Final

__all__ = (
    "SANDBOX_UIDS",
    "ShellLimits",
    "child_setup",
    "network_isolation_unusable",
    "processes_of",
    "sandbox_user_unusable",
    "sweep_user",
)

log = logging.getLogger("parley.actors.tools.shell")

SANDBOX_UIDS: Final = range(2_000_000_000, 2_000_065_536)
"""Uids (used as gids too) a command may run under when the runtime is root: far above any
account or container's subordinate range, so a leased uid owns nothing but the run's files
and processes. One is picked at random per workspace in use."""

_CLONE_NEWNET: Final = 0x40000000
_PR_SET_NO_NEW_PRIVS: Final = 38
_PR_SET_PDEATHSIG: Final = 1
"""prctl: the signal the child gets when the runtime dies (cleared by a uid change: set after)."""
_libc = ctypes.CDLL(None, use_errno=True)  # loaded here: the child only calls into it


@dataclass(frozen=True, slots=True)
class ShellLimits:
    """Resource limits a command runs under (each one `setrlimit` in the child before exec).

    The defaults suit a test run or a build of a small project and stop a runaway one;
    a profile that needs more passes its own.
    """

    cpu_seconds: int = 60
    """RLIMIT_CPU per process: past it the kernel sends SIGXCPU, one second later SIGKILL."""
    memory_bytes: int = 1 << 30
    """RLIMIT_DATA per process (heap and private writable mappings; allocation fails past
    it). Not RLIMIT_AS: runtimes such as the JVM, Go and V8 reserve far more address space
    than they use, and would not start under a useful address-space limit."""
    file_size_bytes: int = 128 << 20
    """RLIMIT_FSIZE: a write past it fails, and the process gets SIGXFSZ."""
    open_files: int = 256
    """RLIMIT_NOFILE per process."""
    processes: int = 64
    """RLIMIT_NPROC: processes of the run at once (of its leased user; see the module)."""


def child_setup(
    limits: ShellLimits,
    *,
    uid: int | None,
    switch_user: bool,
    isolate_network: bool,
    cwd: Path | None = None,
) -> Callable[[], None]:
    """What the forked child does before exec (`preexec_fn`), in this order.

    `cwd` is entered first, while the child is still the runtime's user: uvloop (every
    actor's loop) changes directory only after `preexec_fn`, as the sandbox user, who may
    not pass through the directories above the workspace.
    `isolate_network` (root only) gives the command a network namespace of its own with
    nothing but a down loopback; `switch_user` drops to `uid` (the sandbox's leased user;
    under bubblewrap the switch happens inside the sandbox instead, after its mounts).
    `no_new_privs` stops a set-uid program from giving the command root back. Only C-level
    calls run here: the child of a threaded process must not take Python-level locks.
    """
    process_limit = limits.processes
    if uid is None:  # not root: RLIMIT_NPROC counts the runtime user's own processes too
        process_limit += len(processes_of(os.getuid()))
    rlimits = (
        (resource.RLIMIT_CPU, (limits.cpu_seconds, limits.cpu_seconds + 1)),
        (resource.RLIMIT_DATA, (limits.memory_bytes, limits.memory_bytes)),
        (resource.RLIMIT_FSIZE, (limits.file_size_bytes, limits.file_size_bytes)),
        (resource.RLIMIT_NOFILE, (limits.open_files, limits.open_files)),
        (resource.RLIMIT_NPROC, (process_limit, process_limit)),
        (resource.RLIMIT_CORE, (0, 0)),
    )

    def setup() -> None:
        if cwd is not None:
            os.chdir(cwd)
        if isolate_network:
            _unshare_network()
        if switch_user and uid is not None:
            os.setgroups([])
            os.setregid(uid, uid)
            os.setreuid(uid, uid)
        if _libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS)")
        # A runtime SIGKILLed mid-command takes its command with it (bubblewrap's
        # --die-with-parent does the same for a whole sandbox).
        if _libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG)")
        for which, values in rlimits:
            resource.setrlimit(which, values)

    return setup


@functools.cache
def sandbox_user_unusable() -> str | None:
    """Why commands cannot run as a sandbox user here, or None when they can (checked once).

    The runtime must be root, and the sandbox uids must exist in its user namespace (a
    rootless container maps only a few thousand uids).
    """
    if os.geteuid() != 0:
        return "the runtime does not run as root"
    with open("/proc/self/uid_map") as uid_map:
        for line in uid_map:
            inside, _, count = (int(word) for word in line.split())
            if inside <= SANDBOX_UIDS.start and SANDBOX_UIDS.stop <= inside + count:
                return None
    reason = f"uids {SANDBOX_UIDS.start}-{SANDBOX_UIDS.stop - 1} are not mapped here"
    log.warning("Shell.Exec commands run as the runtime's own user: %s", reason)
    return reason


@functools.cache
def network_isolation_unusable() -> str | None:
    """Why a command without bubblewrap cannot get a network namespace of its own here, or
    None when it can: tried once (a container may withhold the privilege it needs)."""
    if os.geteuid() != 0:
        return "the runtime does not run as root"
    true = shutil.which("true", path="/usr/bin:/bin")
    if true is None:
        return "true is not installed"
    try:
        subprocess.run(  # noqa: S603 - a fixed argv, no shell
            [true],
            preexec_fn=_unshare_network,
            check=True,
            timeout=10,
            env={},
        )
    except (OSError, subprocess.SubprocessError) as exc:
        log.warning("Shell.Exec commands without bubblewrap keep the network: %s", exc)
        return f"unshare(CLONE_NEWNET) fails: {exc}"
    return None


def _unshare_network() -> None:
    if _libc.unshare(_CLONE_NEWNET) != 0:
        raise OSError(ctypes.get_errno(), "unshare(CLONE_NEWNET)")


def processes_of(uid: int) -> list[int]:
    """The live (not zombie) processes whose effective uid is `uid`, from /proc."""
    found: list[int] = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            if os.stat(f"/proc/{name}").st_uid != uid:
                continue
            with open(f"/proc/{name}/stat", "rb") as status:
                state = status.read().rsplit(b")", 1)[1].split()[0]
        except (FileNotFoundError, ProcessLookupError, IndexError):
            continue
        if state not in (b"Z", b"X"):
            found.append(int(name))
    return found


def sweep_user(uid: int, *, rounds: int = 50) -> None:
    """SIGKILL every process of the sandbox user `uid`, until none is left.

    Each process is signalled through a pidfd opened before its owner is checked again, so
    a pid reused by another program between the listing and the signal is never hit. Runs
    again while processes remain: one forked before it was killed appears in the next round.

    Raises:
        ValueError: `uid` is not a sandbox uid (this must never touch another user).
    """
    if uid not in SANDBOX_UIDS:
        raise ValueError(f"uid {uid} is not a sandbox uid")
    for _ in range(rounds):
        alive = processes_of(uid)
        if not alive:
            return
        for pid in alive:
            _kill_if_owned(pid, uid)
    log.warning("processes of sandbox uid %d survived %d sweeps: %s", uid, rounds, alive)


def _kill_if_owned(pid: int, uid: int) -> None:
    try:
        pidfd = os.pidfd_open(pid)
    except (ProcessLookupError, OSError):
        return
    try:
        if os.stat(f"/proc/{pid}").st_uid == uid:
            signal.pidfd_send_signal(pidfd, signal.SIGKILL)
    except (FileNotFoundError, ProcessLookupError):
        pass
    finally:
        os.close(pidfd)
