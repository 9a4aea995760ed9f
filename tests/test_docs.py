"""The documentation cannot rot unseen: size, links, the command tables and the README's profiles.

The README is what a newcomer reads in five minutes, so it has a size bound; everything else
lives in docs/, reached by links that must lead somewhere. The command tables are checked
against the real parser both ways: a command the README names must exist, and a command the
parser has must be in docs/commands.md, and so must every flag, as `--help` gives it. The
README's model profiles must load as profiles.
"""

from __future__ import annotations

import argparse
import re
import tomllib
from pathlib import Path

import pytest

from actors.agent._profile import AgentProfile
from bus import Quotas
from tools.cli import _parser
from tools.flag_reference import every_parser, with_flag_section

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
README_LIMIT_BYTES = 12 * 1024

FENCE = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)
INLINE_CODE = re.compile(r"`[^`\n]*`")
LINK = re.compile(r"!?\[[^\]\n]*\]\(([^)\s]+)\)")
HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*$", re.MULTILINE)
TABLE_COMMAND = re.compile(r"`parley ([^`]+)`")
WORDS = re.compile(r"^[a-z][a-z-]*(\|[a-z][a-z-]*)*$")


def _markdown_files() -> list[Path]:
    return [README, *sorted(DOCS.glob("*.md")), ROOT / "examples" / "README.md"]


def _prose(text: str) -> str:
    """The text a reader sees as prose: code blocks and inline code hold no links."""
    return INLINE_CODE.sub("", FENCE.sub("", text))


def _anchor(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces as hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.replace("`", "").lower())
    return text.replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    return {_anchor(title) for title in HEADING.findall(FENCE.sub("", path.read_text()))}


def _relative_links(path: Path) -> list[str]:
    return [
        target
        for target in LINK.findall(_prose(path.read_text()))
        if not re.match(r"^[a-z][a-z+.-]*:", target)  # http:, https:, mailto:
    ]


def _broken_links(path: Path) -> list[str]:
    broken = []
    for target in _relative_links(path):
        file_part, _, fragment = target.partition("#")
        resolved = (path.parent / file_part).resolve() if file_part else path
        if not resolved.exists():
            broken.append(f"{target}: no such file")
        elif fragment and resolved.suffix == ".md" and fragment not in _anchors(resolved):
            broken.append(f"{target}: no heading #{fragment} in {resolved.name}")
    return broken


def _section(text: str, heading: str) -> str:
    start = text.index(heading)
    end = text.find("\n## ", start + len(heading))
    return text[start : end if end != -1 else len(text)]


def _table_commands(table_text: str) -> set[tuple[str, str | None]]:
    """Every `parley X [Y|Z]` in a table's first column, as (command, subcommand or None).

    A second word counts only as written plainly (`audit query|verify`), so `run <actor>`
    and `up [TOPOLOGY]` name just their command.
    """
    named: set[tuple[str, str | None]] = set()
    for row in table_text.splitlines():
        if not row.startswith("| `parley"):
            continue
        first_cell = row.split(" | ")[0].replace("\\|", "|")  # a table escapes its pipes
        for usage in TABLE_COMMAND.findall(first_cell):
            words = usage.split()
            if len(words) > 1 and WORDS.match(words[1]):
                named.update((words[0], sub) for sub in words[1].split("|"))
            else:
                named.add((words[0], None))
    return named


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _unknown(named: set[tuple[str, str | None]]) -> list[str]:
    commands = _subcommands(_parser())
    unknown = []
    for command, sub in sorted(named, key=str):
        if command not in commands:
            unknown.append(f"parley {command}")
            continue
        subs = _subcommands(commands[command])
        if sub is None and subs:
            unknown.append(f"parley {command} (needs one of {', '.join(subs)})")
        elif sub is not None and subs and sub not in subs:
            unknown.append(f"parley {command} {sub}")
    return unknown


def test_the_readme_is_read_in_five_minutes() -> None:
    size = len(README.read_bytes())
    assert size <= README_LIMIT_BYTES, f"README.md is {size} bytes (at most {README_LIMIT_BYTES})"


@pytest.mark.parametrize("path", _markdown_files(), ids=lambda path: str(path.relative_to(ROOT)))
def test_every_relative_link_leads_to_a_file_and_heading_that_exist(path: Path) -> None:
    assert _broken_links(path) == []


def test_both_indexes_link_into_docs() -> None:
    assert "docs/README.md" in _relative_links(README)
    indexed = {target.partition("#")[0] for target in _relative_links(DOCS / "README.md")}
    unindexed = [page.name for page in DOCS.glob("*.md") if page.name not in indexed]
    assert unindexed == ["README.md"], "docs/README.md does not list these pages"


def test_a_broken_link_or_anchor_is_seen(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        "# Page\n\n## Real `heading`, here\n\n[ok](#real-heading-here) [gone](missing.md) "
        "[bad anchor](#nowhere) ![img](page.md) [web](https://nats.io) `[code](x.md)`\n"
        "```\n[fenced](y.md)\n```\n"
    )
    assert _broken_links(page) == [
        "missing.md: no such file",
        "#nowhere: no heading #nowhere in page.md",
    ]


def test_every_command_in_the_readme_table_is_a_real_subcommand() -> None:
    table = _section(README.read_text(), "## Commands at a glance")
    named = _table_commands(table)
    assert len(named) >= 20, sorted(named, key=str)
    assert _unknown(named) == []


def test_every_subcommand_has_a_row_in_the_command_reference() -> None:
    named = _table_commands((DOCS / "commands.md").read_text())
    assert _unknown(named) == []
    missing = []
    for command, parser in _subcommands(_parser()).items():
        subs = _subcommands(parser)
        wanted = [(command, sub) for sub in subs] if subs else [(command, None)]
        missing += [" ".join(filter(None, pair)) for pair in wanted if pair not in named]
    assert missing == [], "no row in docs/commands.md for: parley " + ", parley ".join(missing)


def test_every_flag_of_every_command_is_in_the_command_reference() -> None:
    text = (DOCS / "commands.md").read_text()
    assert with_flag_section(text, every_parser()) == text, (
        "docs/commands.md's flag section differs from `parley --help`: run `make docs`"
    )


def test_a_flag_missing_from_the_reference_is_seen() -> None:
    text = (DOCS / "commands.md").read_text()
    row = next(line for line in text.splitlines() if line.startswith("| `parley tail` | `--"))
    stale = text.replace(row + "\n", "")
    assert with_flag_section(stale, every_parser()) != stale


def test_a_table_naming_a_command_that_does_not_exist_is_seen() -> None:
    table = "\n".join(
        (
            "| `parley audit query\\|erase` | x |",
            "| `parley teleport` | y |",
            "| `parley policy` | z |",
        )
    )
    assert _unknown(_table_commands(table)) == [
        "parley audit erase",
        "parley policy (needs one of keygen, sign, verify, publish, show)",
        "parley teleport",
    ]


def test_the_readme_model_profiles_are_valid_profiles() -> None:
    blocks = re.findall(r"^```toml\n(.*?)^```", README.read_text(), re.MULTILINE | re.DOTALL)
    profiles = [AgentProfile.model_validate(tomllib.loads(block)) for block in blocks]
    assert {(profile.name, profile.brain.backend) for profile in profiles} == {
        ("gpt", "gateway"),
        ("claude", "gateway"),
    }
    assert all(profile.model for profile in profiles), "a real model names its model"


def test_every_whole_profile_in_the_agent_docs_is_a_valid_profile() -> None:
    text = (DOCS / "agents.md").read_text()
    blocks = re.findall(r"^```toml\n(.*?)^```", text, re.MULTILINE | re.DOTALL)
    whole = [block for block in blocks if "\n[brain]\n" in block]
    backends = {AgentProfile.model_validate(tomllib.loads(block)).brain.backend for block in whole}
    assert backends == {"openai", "anthropic", "gateway"}


def test_the_quota_totals_quotas_md_gives_are_the_defaults_own() -> None:
    """docs/quotas.md said "about 3 GiB" and "2.8 GiB" in two places, and 16 MiB per agent,
    against 3.2 GiB and 25 MiB (an operator's walk): the figures follow the code."""
    text = (ROOT / "docs" / "quotas.md").read_text()
    quotas = Quotas()
    total = f"{quotas.total_bytes(0) / 2**30:.1f} GiB"
    per_agent = f"{(quotas.total_bytes(1) - quotas.total_bytes(0)) / 2**20:.0f} MiB more per agent"
    seven = f"{quotas.total_bytes(7) / 2**30:.2f} GiB for `parley up`'s seven agents"
    for figure in (f"{total} of reservations in all", per_agent, seven, f"defaults are {total}"):
        assert figure in " ".join(text.split()), figure
