"""JSON Schema documents generated from the Structs, for users of other languages.

The files in `schemas/json/` are written by `parley schemas` and a test fails when they differ
from what the Structs say, so the documents can never drift from the code.
"""

from __future__ import annotations

import inspect
import json
from typing import Any, get_args

import msgspec

from schemas._envelopes import AnyEnvelope, Reply
from schemas._frames import AnyFrame

__all__ = ("json_schemas", "render_schema")

_DIALECT = "https://json-schema.org/draft/2020-12/schema"


def _cleaned(node: Any) -> Any:
    """`node` with every description's docstring indentation removed (`inspect.cleandoc`):
    msgspec 0.23 removes it itself and earlier versions kept it, so the files read the same
    whichever version writes them."""
    if isinstance(node, dict):
        return {
            key: inspect.cleandoc(value)
            if key == "description" and isinstance(value, str)
            else _cleaned(value)
            for key, value in node.items()
        }
    if isinstance(node, list):
        return [_cleaned(item) for item in node]
    return node


def _document(kind_type: Any, name: str) -> dict[str, Any]:
    (root,), components = msgspec.json.schema_components([kind_type], ref_template="#/$defs/{name}")
    document: dict[str, Any] = {"$schema": _DIALECT, "$id": name}
    document.update(root)
    if components:
        document["$defs"] = dict(sorted(components.items()))
    cleaned: dict[str, Any] = _cleaned(document)
    return cleaned


def json_schemas() -> dict[str, dict[str, Any]]:
    """Return `{file name: schema}` for every envelope kind, the reply and the bridge frames."""
    documents: dict[str, dict[str, Any]] = {}
    for kind_type in (*get_args(AnyEnvelope), *get_args(AnyFrame)):
        tag = kind_type.__struct_config__.tag
        documents[f"{tag}.schema.json"] = _document(kind_type, str(tag))
    documents["reply.schema.json"] = _document(Reply, "reply")
    return documents


def render_schema(document: dict[str, Any]) -> str:
    """Serialise a schema the one way the files are written (stable, diff-friendly)."""
    return json.dumps(document, indent=2, sort_keys=True) + "\n"
