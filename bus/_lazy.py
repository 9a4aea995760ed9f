"""Names a package exports without importing the module that defines them until first use.

A process runs one actor, and every `parley` command imports the command table: a package
whose `__init__` imports its web server (uvicorn, starlette) or a protocol SDK made every
process pay for it at start, a large share of the test suite's CPU and of each actor's start.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping

__all__ = ("lazy_exports",)


def lazy_exports(package: str, where: Mapping[str, str]) -> Callable[[str], object]:
    """A module `__getattr__` for `package`: each name in `where` is read from the module it
    maps to on its first lookup (the package keeps its names' types for mypy by importing
    them under `TYPE_CHECKING`)."""

    def __getattr__(name: str) -> object:
        module = where.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(module), name)

    return __getattr__
