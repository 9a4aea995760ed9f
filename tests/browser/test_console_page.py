"""The console in a real browser: Debian's chromium, driven by Playwright, against a whole
deployment of real processes (tests/support/console.py), one browser and one deployment for
the module.

What a person does: sign in, start a collaboration and watch it reach `final` live, press
Stop mid-session and see "Collaboration canceled by user.", open a session in a second page
mid-session (its events are replayed first), find another person's session neither listed
nor openable by URL, and see an agent's `<script>` as text. Each step leaves a screenshot in
the test's own output directory.
"""

from __future__ import annotations

import os
import re
import shutil
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.async_api import Browser, Page, async_playwright, expect

from schemas import Namespace
from tests.support.console import XSS_MESSAGE, ConsoleDeployment, console_deployment
from tools.demo import DEMO_GOAL

pytestmark = pytest.mark.timeout(180)

CHROMIUM = "/usr/bin/chromium"
_WAIT_MS = 30_000


@pytest.fixture(scope="module")
async def deployment(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[ConsoleDeployment]:
    root = tmp_path_factory.mktemp("console-page")
    async with console_deployment(root, Namespace(f"t{uuid.uuid4().hex[:12]}")) as deployed:
        yield deployed


@pytest.fixture(scope="module")
async def browser() -> AsyncIterator[Browser]:
    if shutil.which("chromium") is None:
        pytest.fail("Debian's chromium is missing: `make test` installs it")
    args = ["--no-sandbox"] if os.geteuid() == 0 else []  # chromium refuses root otherwise
    async with async_playwright() as playwright:
        launched = await playwright.chromium.launch(executable_path=CHROMIUM, args=args)
        yield launched
        await launched.close()


async def _signed_in_page(browser: Browser, deployment: ConsoleDeployment, person: str) -> Page:
    page = await (await browser.new_context(viewport={"width": 1100, "height": 800})).new_page()
    await page.goto(deployment.url)
    await page.fill("#token", deployment.tokens[person])
    await page.click("#sign-in-form button[type=submit]")
    await expect(page.locator("#who")).to_have_text(person, timeout=_WAIT_MS)
    return page


async def _start(
    page: Page, mode: str, agents: str, goal: str, *, first: str = "", rounds: int = 6
) -> str:
    """Fill the start form and press Start; the id of the session the page then shows."""
    await page.goto(page.url.split("#", 1)[0] + "#/new")
    await expect(page.locator("#new-view")).to_be_visible()
    await page.check(f"input[name=mode][value={mode}]")
    await page.fill("#agents", agents)
    await page.fill("#first", first)
    if mode == "collaborate":
        await page.fill("#max-rounds", str(rounds))
    await page.fill("#goal-input", goal)
    await page.click("#start")
    await page.wait_for_url("**/#/session/*", timeout=_WAIT_MS)
    await expect(page.locator("#session-view")).to_be_visible()
    return page.url.rsplit("/", 1)[1]


async def _rpc_as(
    client: httpx.AsyncClient, headers: dict[str, str], method: str, params: dict[str, Any]
) -> dict[str, Any]:
    body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
    answer = await client.post("/rpc", json=body, headers=headers)
    result: dict[str, Any] = answer.json()["result"]
    return result


async def test_sign_in(browser: Browser, deployment: ConsoleDeployment, tmp_path: Path) -> None:
    page = await (await browser.new_context()).new_page()
    complaints: list[str] = []  # the page itself must live within its own CSP
    page.on("console", lambda message: complaints.append(message.text))
    await page.goto(deployment.url)
    await expect(page.locator("#sign-in-view")).to_be_visible()
    await page.screenshot(path=tmp_path / "01-sign-in.png")
    await page.fill("#token", "not-a-token")
    await page.click("#sign-in-form button[type=submit]")
    await expect(page.locator("#sign-in-error")).to_have_text("unknown or revoked token")
    await page.fill("#token", deployment.tokens["alice"])
    await page.click("#sign-in-form button[type=submit]")
    await expect(page.locator("#who")).to_have_text("alice")
    await expect(page.locator("#new-view")).to_be_visible()
    stored = await page.evaluate("JSON.stringify(Object.values(sessionStorage))")
    assert deployment.tokens["alice"] not in stored  # the page keeps its sign-in token only
    await page.screenshot(path=tmp_path / "02-signed-in.png")
    assert not [c for c in complaints if "Content Security Policy" in c], complaints
    await page.context.close()


async def test_a_collaboration_reaches_final_live(
    browser: Browser, deployment: ConsoleDeployment, tmp_path: Path
) -> None:
    page = await _signed_in_page(browser, deployment, "alice")
    await _start(page, "collaborate", "gpt,claude", DEMO_GOAL, first="claude", rounds=4)
    await expect(page.locator("#goal")).to_have_text(DEMO_GOAL)
    await expect(page.locator("#timeline .turn").first).to_be_visible(timeout=_WAIT_MS)
    await page.screenshot(path=tmp_path / "01-first-turn.png")
    await expect(page.locator("#ending")).to_have_text(
        "Stopped: final (round 4).", timeout=_WAIT_MS
    )
    await expect(page.locator("#timeline .turn")).to_have_count(4)
    opened = "Session opened with gpt, claude, up to 4 rounds."
    await expect(page.locator("#timeline .system")).to_have_text(opened)
    speakers = await page.locator("#timeline .turn .speaker").all_inner_texts()
    assert speakers == ["claude", "gpt", "claude", "gpt"]
    await expect(page.locator("#chip")).to_have_text("Collab 4/4")
    await expect(page.locator("#state")).to_have_text("completed")
    await expect(page.locator("#stop")).to_be_hidden()
    await page.screenshot(path=tmp_path / "02-final.png", full_page=True)
    await page.context.close()


async def test_stop_mid_session_and_a_page_opened_mid_session(
    browser: Browser, deployment: ConsoleDeployment, tmp_path: Path
) -> None:
    page = await _signed_in_page(browser, deployment, "alice")
    session_id = await _start(page, "collaborate", "gpt,claude", "A slow task", first="gpt")
    await expect(page.locator("#timeline .turn")).to_have_count(1, timeout=_WAIT_MS)
    await expect(page.locator("#waiting")).to_have_text("claude is answering (round 2)…")
    await expect(page.locator("#stop")).to_be_visible()
    await page.screenshot(path=tmp_path / "01-mid-session.png")

    later = await _signed_in_page(browser, deployment, "alice")  # opened mid-session
    await later.goto(f"{deployment.url}#/session/{session_id}")
    await expect(later.locator("#timeline .turn")).to_have_count(1, timeout=_WAIT_MS)
    first_message = later.locator("#timeline .turn .message")
    await expect(first_message).to_have_text("gpt starts the slow task.")
    await expect(later.locator("#chip")).to_have_text("Collab 2/6")
    await expect(later.locator("#timeline .system")).to_have_text(
        "Session opened with gpt, claude, up to 6 rounds."
    )
    await later.screenshot(path=tmp_path / "02-replayed.png")

    await page.click("#stop")
    notice = "Stopped: canceled (round 2). Collaboration canceled by user."
    await expect(page.locator("#ending")).to_have_text(notice, timeout=_WAIT_MS)
    await expect(later.locator("#ending")).to_have_text(notice, timeout=_WAIT_MS)  # pushed live
    await expect(page.locator("#stop")).to_be_hidden()
    await page.screenshot(path=tmp_path / "03-canceled.png")
    await page.context.close()
    await later.context.close()


async def test_another_persons_session_is_neither_listed_nor_opened(
    browser: Browser, deployment: ConsoleDeployment, tmp_path: Path
) -> None:
    async with httpx.AsyncClient(base_url=deployment.url) as client:
        signed = await client.post("/signin", json={"token": deployment.tokens["bob"]})
        headers = {"Authorization": f"Bearer {signed.json()['signInToken']}"}
        created = await _rpc_as(
            client, headers, "CreateSession", {"mode": "single", "agents": ["gpt"]}
        )
        bobs = created["sessionId"]
        prompt = "Bob's secret plan, then stop."
        started = await _rpc_as(client, headers, "StartTask", {"sessionId": bobs, "prompt": prompt})
        assert started["state"] == "submitted"

    page = await _signed_in_page(browser, deployment, "alice")
    mine = await _start(page, "single", "gpt", "Summarize this in 1 sentence, then stop.")
    await expect(page.locator(f'#sessions li[data-session-id="{mine}"]')).to_be_visible(
        timeout=_WAIT_MS
    )
    mine_listed = page.locator(f'#sessions li[data-session-id="{mine}"] .state')
    await expect(mine_listed).to_have_text("completed", timeout=_WAIT_MS)  # the list follows
    await expect(page.locator(f'#sessions li[data-session-id="{bobs}"]')).to_have_count(0)
    assert "secret plan" not in await page.locator("#sessions").inner_text()
    await page.screenshot(path=tmp_path / "01-list-without-bobs.png")

    await page.goto(f"{deployment.url}#/session/{bobs}")
    await expect(page.locator("#not-found-view")).to_be_visible(timeout=_WAIT_MS)
    await expect(page.locator("#session-view")).to_be_hidden()
    assert "secret plan" not in await page.content()
    await page.screenshot(path=tmp_path / "02-bobs-session-by-url.png")
    await page.context.close()


async def test_an_agents_markup_is_shown_as_text(
    browser: Browser, deployment: ConsoleDeployment, tmp_path: Path
) -> None:
    page = await _signed_in_page(browser, deployment, "alice")
    goal = 'xss <img src=x onerror="window.__pwned = 4"> in the goal too'
    await _start(page, "single", "gpt", goal)
    message = page.locator("#timeline .turn .message")
    await expect(message).to_have_text(XSS_MESSAGE, timeout=_WAIT_MS)
    await expect(page.locator("#goal")).to_have_text(goal)
    await expect(page.locator("#ending")).to_have_text("Stopped: final (round 1).")
    for selector in ("script", "img", "a", "b"):
        assert await page.locator(f"#timeline {selector}, #goal {selector}").count() == 0, selector
    assert await page.evaluate("window.__pwned === undefined")
    await message.click()  # a live javascript: link would run here
    assert await page.evaluate("window.__pwned === undefined")
    await page.screenshot(path=tmp_path / "01-markup-as-text.png")
    await page.context.close()


async def test_a_call_between_agents_is_shown_under_its_turn(
    browser: Browser, deployment: ConsoleDeployment, tmp_path: Path
) -> None:
    """gpt delegates to claude before it answers: the gate tells alice's timeline, and the
    page shows seed 004's lines for the call, before the turn that gathered its answer."""
    page = await _signed_in_page(browser, deployment, "alice")
    await _start(page, "single", "gpt", "ask the other about the parser")
    await expect(page.locator("#ending")).to_have_text(
        "Stopped: final (round 1).", timeout=_WAIT_MS
    )
    timeline = page.locator("#timeline > li")
    classes = [await item.get_attribute("class") for item in await timeline.all()]
    assert classes == ["system", "call", "call", "turn"], classes
    await expect(page.locator("#timeline .call .calling")).to_have_text(
        "gpt calling claude with task: facts please"
    )
    await expect(page.locator("#timeline .call .returned")).to_have_text(
        re.compile(r"^claude returned: SUCCESS \(\d+ tokens, [\d.]+s\)$")
    )
    await expect(page.locator("#timeline .turn .message")).to_contain_text("gpt gathered:")
    await page.screenshot(path=tmp_path / "01-call-under-its-turn.png", full_page=True)
    await page.context.close()
