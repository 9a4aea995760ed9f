"""Whose a session's workspace is: the person its first step worked for, and nobody else's.

A session's workspace is named by its id (actors/tools/_steps.py `workspace_name`), and the
id a tool request names comes from its trace's root, which the sender chose: an attack review,
holding bob's credentials, delegated to an agent naming alice's session as the parent and read
and rewrote alice's files, and the console then showed bob her patch preview. So the first
step run in a workspace claims it for the person its trace works for (`Parley-Origin`, which
the gate sets), in a file beside the workspace (`<name>.owner`, out of every sandbox's reach),
and a step or preview for anyone else is refused.

The claim is made whole or not at all (written aside, then linked into place: a link never
replaces a file), so a runtime killed mid-claim leaves no empty owner behind. A workspace made
before this release has no claim: its next step claims it.
"""

from __future__ import annotations

import hashlib
import os
import re
import tempfile
from pathlib import Path
from typing import Final

__all__ = ("claim_workspace", "workspace_name", "workspace_owner")

_SAFE_NAME: Final = re.compile(r"[A-Za-z0-9_-]{1,64}")


def workspace_name(session_id: str) -> str:
    """A session's directory name: its id when that is a safe name, else a digest of it."""
    if _SAFE_NAME.fullmatch(session_id):
        return session_id
    return "~" + hashlib.sha256(session_id.encode()).hexdigest()[:40]  # "~": no safe id's


def _claim_file(workspaces: Path, name: str) -> Path:
    return workspaces / f"{name}.owner"


def workspace_owner(workspaces: Path, name: str) -> str | None:
    """Who workspace `name` under `workspaces` belongs to, or None while nobody claimed it."""
    try:
        return _claim_file(workspaces, name).read_text(encoding="utf-8")
    except FileNotFoundError:
        return None


def claim_workspace(workspaces: Path, name: str, owner: str) -> str | None:
    """Claim workspace `name` for `owner` unless someone did; return the other owner when it
    is another's, None when it is `owner`'s (now or before)."""
    claim = _claim_file(workspaces, name)
    descriptor, aside = tempfile.mkstemp(dir=workspaces, prefix=".claim-")
    try:
        with os.fdopen(descriptor, "w", encoding="utf-8") as file:
            file.write(owner)
        os.link(aside, claim)
    except FileExistsError:
        found = workspace_owner(workspaces, name)
        return None if found == owner else found
    finally:
        os.unlink(aside)
    return None
