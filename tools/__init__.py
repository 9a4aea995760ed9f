"""The `parley` command line and its commands (tools/cli.py; the entry point, tools/entry.py).
Imports nothing on its own: `parley` starts by loading tools/entry.py alone, so a Ctrl-C while
the rest loads is handled there."""

__all__ = ()
