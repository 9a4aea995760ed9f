"""Scratch directories that do not outlive a killed run for long.

A demo, a chaos run, a benchmark or an ephemeral server keeps its JetStream store and its
actors' files in a temporary directory, removed when the run ends. A run killed with SIGKILL
(or one whose machine lost power) never reaches that removal, and each such run left its
directory behind, a store of up to hundreds of megabytes, for ever (an operator's walk).

Each directory's name carries the process id that made it (`parley-chaos-p1234-…`); whoever
makes the next one first removes those of this user whose process is gone. A process id
used again by a living process keeps its directory until that process ends too: nothing of
a running process is ever removed.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from pathlib import Path
from typing import Final

__all__ = ("abandoned_scratch", "scratch_directory")

_SCRATCH_NAME: Final = re.compile(r"^parley-(?:[a-z0-9]+-)*p(\d+)-[^/]+$")
"""What `scratch_directory` names: its prefix, `p` and the maker's process id, a random tail."""


def scratch_directory(prefix: str) -> tempfile.TemporaryDirectory[str]:
    """A new temporary directory named for this process (`prefix` is `parley-<what>-`), after
    removing the ones whose makers died before they could (`abandoned_scratch`)."""
    for directory in abandoned_scratch():
        shutil.rmtree(directory, ignore_errors=True)
    return tempfile.TemporaryDirectory(prefix=f"{prefix}p{os.getpid()}-")


def abandoned_scratch(root: Path | None = None) -> list[Path]:
    """This user's scratch directories under `root` (the temporary directory) whose process
    has ended."""
    root = Path(tempfile.gettempdir()) if root is None else root
    found: list[Path] = []
    try:
        entries = list(os.scandir(root))
    except OSError:
        return found
    uid = os.getuid()
    for entry in entries:
        named = _SCRATCH_NAME.match(entry.name)
        if named is None:
            continue
        try:
            if not entry.is_dir(follow_symlinks=False) or entry.stat().st_uid != uid:
                continue
        except OSError:  # removed meanwhile
            continue
        if not _alive(int(named[1])):
            found.append(Path(entry.path))
    return found


def _alive(pid: int) -> bool:
    """Whether a process of that id exists (any user's: a pid in use is never taken for
    ended)."""
    if pid <= 0:
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True
