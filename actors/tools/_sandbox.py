"""Bubblewrap around a Shell.Exec command, where it is installed and can run.

Inside the sandbox the command sees a root of its own: /usr (and the /bin, /sbin, /lib*
links or directories) and a few files of /etc read-only, a fresh /proc of its own PID
namespace, a minimal /dev, an empty /tmp, and its workspace (at its real path) as the only
writable directory. It has no network unless granted (a network namespace with nothing
but loopback), no IPC or hostname shared with the host, and a session of its own (so it
cannot push keystrokes into a terminal). When the command ends, or bubblewrap is killed,
the PID namespace ends and every process left in it is killed by the kernel.

When the runtime is root, bubblewrap runs privileged (it needs no user namespace) and the
command drops to the run's sandbox uid inside, after the mounts, through `setpriv`: the
sandbox user could not have mounted a workspace under directories only root may enter.
"""

from __future__ import annotations

import functools
import logging
import os
import shutil
import subprocess
from pathlib import Path
from typing import Final

__all__ = ("bubblewrap_argv", "bubblewrap_unusable")

log = logging.getLogger("parley.actors.tools.shell")

_ETC_FILES: Final = (
    "alternatives",
    "ca-certificates",
    "ca-certificates.conf",
    "group",
    "host.conf",
    "hosts",
    "ld.so.cache",
    "ld.so.conf",
    "ld.so.conf.d",
    "localtime",
    "mime.types",
    "nsswitch.conf",
    "passwd",
    "resolv.conf",
    "ssl",
)
"""What of /etc a program needs to start, resolve names and check certificates: never
shadow, sudoers, ssh keys, or the runtime's own configuration."""

_TOP_LEVEL: Final = ("bin", "sbin", "lib", "lib32", "lib64", "libx32")


@functools.cache
def bubblewrap_unusable() -> str | None:
    """Why commands cannot run under bubblewrap here, or None when they can.

    Tried once per process: `bwrap` must be on the PATH and run a command (user namespaces
    or the privileges it needs may be missing in a container), and as root `setpriv` must
    be there to drop to the sandbox user inside. The answer is logged once.
    """
    reason = _probe()
    if reason is None:
        log.info("Shell.Exec commands run under bubblewrap")
    else:
        log.warning(
            "Shell.Exec commands run without bubblewrap (%s): only resource limits, "
            "a process group and, as root, a user of their own contain them",
            reason,
        )
    return reason


def _probe() -> str | None:
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        return "bwrap is not installed"
    if os.geteuid() == 0 and shutil.which("setpriv", path="/usr/bin:/bin") is None:
        return "setpriv (util-linux) is not installed"
    try:
        probe = subprocess.run(  # noqa: S603 - a fixed argv, no shell
            [bwrap, "--ro-bind", "/", "/", "true"],
            capture_output=True,
            timeout=10,
            check=False,
            env={"PATH": "/usr/bin:/bin"},
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"bwrap does not start: {exc}"
    if probe.returncode != 0:
        said = probe.stderr.decode(errors="replace").strip() or f"exit {probe.returncode}"
        return f"bwrap cannot run here: {said}"
    return None


def bubblewrap_argv(
    *, workspace: Path, cwd: Path, network: bool, sandbox_uid: int | None
) -> list[str]:
    """The `bwrap ... --` prefix that runs a command in the sandbox described above.

    `sandbox_uid` is the user the command becomes inside (the runtime is root), or None
    (the runtime is not: bubblewrap then makes a user namespace and keeps the caller's uid).
    """
    argv = ["bwrap", "--die-with-parent", "--new-session"]
    argv += ["--unshare-ipc", "--unshare-pid", "--unshare-uts", "--unshare-cgroup-try"]
    if not network:
        argv.append("--unshare-net")
    if sandbox_uid is None:
        argv.append("--unshare-user")
    argv += ["--ro-bind", "/usr", "/usr"]
    for name in _TOP_LEVEL:
        path = Path("/", name)
        if path.is_symlink():
            argv += ["--symlink", os.readlink(path), str(path)]
        elif path.is_dir():
            argv += ["--ro-bind", str(path), str(path)]
    # Passable by the sandbox user: bubblewrap would make /etc root's alone, and every file
    # bound into it unreadable (git stops at /etc/gitconfig refused instead of absent).
    argv += ["--perms", "0755", "--dir", "/etc"]
    for name in _ETC_FILES:
        argv += ["--ro-bind-try", f"/etc/{name}", f"/etc/{name}"]
    # S108: a fresh tmpfs at the sandbox's own /tmp, not the host's shared directory.
    argv += ["--proc", "/proc", "--dev", "/dev", "--perms", "1777", "--tmpfs", "/tmp"]  # noqa: S108
    for above in reversed(workspace.parents[:-1]):  # "/" is the sandbox's own root
        if str(above) != "/tmp":  # noqa: S108 - the sandbox's own, made just above
            # Passable by the sandbox user, so HOME and absolute paths reach the workspace
            # (bubblewrap would make them root's alone): names only, nothing of their content.
            argv += ["--perms", "0755", "--dir", str(above)]
    argv += ["--bind", str(workspace), str(workspace), "--chdir", str(cwd)]
    argv.append("--")
    if sandbox_uid is not None:
        argv += [
            "setpriv",
            f"--reuid={sandbox_uid}",
            f"--regid={sandbox_uid}",
            "--clear-groups",
            "--no-new-privs",
            "--",
        ]
    return argv
