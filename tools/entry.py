"""The `parley` command's entry point: what runs before the command line is even loaded.

Loading the command line imports every package Parley has (a few hundred milliseconds); a
Ctrl-C in that time printed a long import traceback, where docs/cli.md promises none. This
module imports nothing of Parley's until `main` runs, and a Ctrl-C that escapes the command
(while it loads, or while it parses its arguments) exits 130 quietly.
"""

from __future__ import annotations

__all__ = ("main",)

_INTERRUPTED = 130


def main() -> int:
    """Load the command line and run it; 130 for a Ctrl-C that nothing inside handled."""
    try:
        from tools.cli import main as run_command_line

        return run_command_line()
    except KeyboardInterrupt:
        return _INTERRUPTED
