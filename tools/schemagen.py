"""Writing `schemas/json/*.schema.json` from the envelope Structs (`parley schemas`)."""

from __future__ import annotations

from pathlib import Path

import schemas
from schemas import json_schemas, render_schema

__all__ = ("schema_dir", "write_schemas")


def schema_dir() -> Path:
    return Path(schemas.__file__).parent / "json"


def write_schemas(*, check_only: bool = False, directory: Path | None = None) -> list[str]:
    """Bring the schema files up to date; return the names that were (or would be) written.

    Files for kinds that no longer exist are removed too.
    """
    target = directory or schema_dir()
    target.mkdir(parents=True, exist_ok=True)
    wanted = {name: render_schema(doc) for name, doc in json_schemas().items()}
    changed = [
        name
        for name, text in sorted(wanted.items())
        if not (target / name).is_file() or (target / name).read_text() != text
    ]
    extra = sorted(p.name for p in target.glob("*.schema.json") if p.name not in wanted)
    if not check_only:
        for name in changed:
            (target / name).write_text(wanted[name])
        for name in extra:
            (target / name).unlink()
    return changed + extra
