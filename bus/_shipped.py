"""Where the files Parley ships are: agent profiles, policy bundles, topologies (`deploy/`).

A command run outside the checkout used to look for `deploy/...` in the working directory
only, and said "topology not found: deploy/topologies/smoke.toml" (or failed on the demo
policy) wherever a person happened to stand. A path under `deploy/` is now taken from the
working directory when it has one there (a deployment's own files win), else from beside the
installed packages (a checkout, or an editable install of one).
"""

from __future__ import annotations

from pathlib import Path

__all__ = ("SHIPPED_ROOT", "shipped")

SHIPPED_ROOT = Path(__file__).resolve().parent.parent
"""The directory holding Parley's packages and its `deploy/` folder."""


def shipped(relative: Path | str) -> Path:
    """`relative` (e.g. `deploy/policy/demo.toml`) in the working directory if it exists
    there, else under `SHIPPED_ROOT`; an absolute path is returned as it is."""
    path = Path(relative)
    if path.is_absolute() or path.exists():
        return path
    beside = SHIPPED_ROOT / path
    return beside if beside.exists() else path
