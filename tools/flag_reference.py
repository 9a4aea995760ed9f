"""The "Every flag" section of docs/commands.md, written from `parley`'s own parser.

The command table above it is written by hand, for reading; this section lists every flag of
every command and subcommand with its `--help` text, made from the parser itself so that it
cannot drift from what `parley <command> --help` prints (a walk through the README found a
dozen flags the table left out). `python -m tools.flag_reference` rewrites the section
(`make docs`); a test fails when the file differs from what this makes.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

from tools.bench._options import bench_parser
from tools.cli import _parser

__all__ = ("BEGIN", "END", "every_parser", "flag_section", "with_flag_section")

BEGIN = "<!-- every flag: written by `make docs` from the parser; do not edit by hand -->"
END = "<!-- end of every flag -->"
_COMMANDS_DOC = Path(__file__).resolve().parent.parent / "docs" / "commands.md"


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _commands(
    parser: argparse.ArgumentParser, prefix: str
) -> Iterator[tuple[str, argparse.ArgumentParser]]:
    """Every command under `parser` that takes flags of its own, outermost first."""
    yield prefix, parser
    for name, sub in _subparsers(parser).items():
        yield from _commands(sub, f"{prefix} {name}")


def _usage(action: argparse.Action) -> str:
    """A flag as `--help` shows it: its names, and its value's name (its choices, when it has
    them) if it takes one."""
    names = ", ".join(action.option_strings)
    if action.nargs == 0:
        return names
    if action.metavar is not None:
        value = action.metavar if isinstance(action.metavar, str) else " ".join(action.metavar)
    elif action.choices is not None:
        value = "{" + ",".join(str(choice) for choice in action.choices) + "}"
    else:
        value = action.dest.upper()
    shapes = {"?": f"[{value}]", "*": f"[{value} ...]", "+": f"{value} [{value} ...]"}
    return f"{names} {shapes.get(str(action.nargs), value)}"


def _help(action: argparse.Action) -> str:
    """The flag's help text on one line, formatted as argparse formats it (`%(default)s`
    filled in, `%%` a percent sign), pipes escaped for the table."""
    params = {**vars(action), "prog": ""}
    if params.get("choices") is not None:
        params["choices"] = ", ".join(str(choice) for choice in params["choices"])
    text = " ".join((action.help or "").split()) % params
    return text.replace("|", "\\|")


def every_parser() -> tuple[argparse.ArgumentParser, ...]:
    """`parley`'s parser, and `parley bench`'s, which owns every word after `bench`."""
    return _parser(), bench_parser("")


def flag_section(parsers: Sequence[argparse.ArgumentParser]) -> str:
    """The section's text, between its markers: a table of every flag of every command."""
    rows = [BEGIN, "", "| command | flag | what it does |", "|---|---|---|"]
    commands = (command for parser in parsers for command in _commands(parser, parser.prog))
    for command, sub in commands:
        for action in sub._actions:
            if not action.option_strings or isinstance(action, argparse._HelpAction):
                continue
            if action.help == argparse.SUPPRESS:
                continue
            usage = _usage(action).replace("|", "\\|")
            rows.append(f"| `{command}` | `{usage}` | {_help(action)} |")
    return "\n".join([*rows, "", END])


def with_flag_section(document: str, parsers: Sequence[argparse.ArgumentParser]) -> str:
    """`document` with its section replaced by the one `parsers` make.

    Raises:
        ValueError: the document has no section markers.
    """
    pattern = re.compile(re.escape(BEGIN) + r".*?" + re.escape(END), re.DOTALL)
    if not pattern.search(document):
        raise ValueError(f"no section between {BEGIN!r} and {END!r}")
    section = flag_section(parsers)
    return pattern.sub(lambda _: section, document, count=1)


def main() -> int:
    """Rewrite docs/commands.md's section from the parsers."""
    text = _COMMANDS_DOC.read_text()
    written = with_flag_section(text, every_parser())
    if written != text:
        _COMMANDS_DOC.write_text(written)
        print(f"rewrote the flag section of {_COMMANDS_DOC}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
