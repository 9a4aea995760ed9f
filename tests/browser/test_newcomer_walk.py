"""A newcomer's path through the README, walked as they would walk it.

The README promises that a fresh checkout, with no flag it does not show, gets them through
`make demo`, a standing `parley up`, the README's own command block (collaborate, orchestrate
with the local agent, delegate, who called whom, a trace, `parley audit verify`, a console
token), and the console's session, trace and audit views in a browser. Every step here is one
of those, run as a real process in a fresh directory (its `.venv` the one under test) or done
in Debian's chromium; the commands are read from the README, not copied, so the walk follows
the README as it stands.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
from pathlib import Path

import pytest
from playwright.async_api import Page, async_playwright, expect

from tests.support.processes import REPO, ProcessOutput, close_up
from tests.support.runnable import (
    READY_LINE,
    as_checkout,
    parse_blocks,
    person_env,
    run_documented,
)

pytestmark = [pytest.mark.chaos, pytest.mark.timeout(600)]

CHROMIUM = "/usr/bin/chromium"
WAIT_MS = 60_000


def _verb(command: str) -> str:
    """`collab` for `.venv/bin/parley collab "…"`."""
    return shlex.split(command, comments=True)[1]


async def _sign_in(page: Page, url: str, token: str) -> None:
    await page.goto(url)
    await page.fill("#token", token)
    await page.click("#sign-in-form button[type=submit]")
    await expect(page.locator("#who")).to_have_text("alice", timeout=WAIT_MS)


async def test_a_newcomer_walks_the_readme(tmp_path: Path) -> None:
    if shutil.which("chromium") is None:
        pytest.fail("Debian's chromium is missing: `make test` installs it")
    (block,) = parse_blocks(REPO / "README.md")  # the README's one standing-system block
    assert block.up == [], "the README's block starts the local system with no argument"
    verbs = [_verb(command) for command in block.runs]
    for needed in ("collab", "orchestrate", "delegate", "calls", "trace", "audit", "console"):
        assert needed in verbs, f"the README no longer shows `parley {needed}`: {verbs}"
    as_checkout(tmp_path)
    env = person_env()

    # `make demo` is `.venv/bin/parley demo` once `.venv` exists (the Makefile's demo target).
    demo = await run_documented(".venv/bin/parley demo", tmp_path, env)
    assert "stopped: final (round 4)" in demo and "parley demo: done" in demo, demo[-2000:]

    up = ProcessOutput([".venv/bin/parley", "up"], env, name="up", cwd=tmp_path)
    try:
        await up.wait_line(READY_LINE.pattern, timeout=120)
        said = {
            _verb(command): await run_documented(command, tmp_path, env) for command in block.runs
        }
        assert "stopped: final" in said["collab"], said["collab"]
        assert re.search(r"stopped: (objective_met|max_turns)", said["orchestrate"])
        assert "planner returned: SUCCESS" in said["delegate"], said["delegate"]
        assert "planner calling researcher" in said["calls"], said["calls"]
        assert re.search(r"cli -> planner\s+delegation\s", said["trace"]), said["trace"]
        assert "audit chain intact" in said["audit"], said["audit"]
        token = said["console"].splitlines()[0].strip()

        console_url = (tmp_path / ".parley/console.url").read_text().strip()
        assert f"Console: {console_url}" in "\n".join(up.lines)
        args = ["--no-sandbox"] if os.geteuid() == 0 else []  # chromium refuses root otherwise
        async with async_playwright() as playwright:
            browser = await playwright.chromium.launch(executable_path=CHROMIUM, args=args)
            try:
                page = await browser.new_page(viewport={"width": 1100, "height": 800})
                await _sign_in(page, console_url, token)
                await _walk_the_console(page, tmp_path)
            finally:
                await browser.close()

        up.signal(signal.SIGINT)
        assert await up.wait_exit(timeout=60) == 0, "\n".join(up.lines[-30:])
        stray = [line for line in up.lines if "Logging error" in line or "Traceback" in line]
        assert not stray, "parley up printed tracebacks:\n" + "\n".join(stray)
    finally:
        close_up(up)


async def _walk_the_console(page: Page, shots: Path) -> None:
    """A collaboration started and followed in the page, then its trace and alice's records."""
    await page.goto(page.url.split("#", 1)[0] + "#/new")
    # Of every agent parley up registers, the form ticks the README's pair, and orchestration
    # starts from the README's local and shared agents.
    await expect(page.locator("#agent-choices input")).not_to_have_count(0, timeout=WAIT_MS)
    ticked = page.locator("#agent-choices input:checked")
    assert sorted([await box.get_attribute("value") or "" for box in await ticked.all()]) == [
        "claude",
        "gpt",
    ]
    await expect(page.locator("#local-agent")).to_have_value("local")
    await expect(page.locator("#shared-agent")).to_have_value("claude")
    await page.check("input[name=mode][value=collaborate]")
    await page.fill("#goal-input", "Write a two-paragraph fairy tale about a lighthouse cat")
    await page.click("#start")
    await page.wait_for_url("**/#/session/*", timeout=WAIT_MS)
    ending = page.locator("#ending")
    await expect(ending).to_have_text(re.compile(r"answer was marked final"), timeout=WAIT_MS)
    assert await page.locator("#timeline .turn").count() >= 1
    await page.screenshot(path=shots / "01-session.png", full_page=True)

    await page.click("#show-trace")
    first = page.locator("#trace .node").first
    await expect(first).to_have_text(re.compile(r"^person-alice → router"), timeout=WAIT_MS)
    await page.screenshot(path=shots / "02-trace.png", full_page=True)

    await page.click("#audit-link")
    await expect(page.locator("#audit-view")).to_be_visible()
    await expect(page.locator("#audit-profile")).to_have_text("person-alice", timeout=WAIT_MS)
    await expect(page.locator("#audit-records tr").first).to_be_visible(timeout=WAIT_MS)
    assert "cannot be read" not in await page.locator("#audit-view").inner_text()
    await page.screenshot(path=shots / "03-audit.png", full_page=True)
