"""The `parley` command line and its commands. Imports the packages; imported by none."""

from tools.cli import main, resolve_actor

__all__ = ("main", "resolve_actor")
