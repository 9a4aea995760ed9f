"""The console in a real browser: Debian's chromium, driven by Playwright, against a whole
deployment of real processes (tests/support/console.py), one browser and one deployment for
the module.

What a person does: sign in, start a collaboration and watch it reach `final` live, press
Stop mid-session and see "Collaboration canceled by user.", open a session in a second page
mid-session (its events are replayed first), find another person's session neither listed
nor openable by URL, see an agent's answer drawn as it is written, and see an agent's
`<script>` as text; run an orchestrated session
(seed 000: claude drafts as alice's agent, gpt is the shared agent) in manual mode and
approve, edit and reject its drafts, pause and resume one, and see the banner when full_auto
reaches maxTurns. Each step leaves a screenshot in the test's own output directory.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from nats.aio.msg import Msg
from playwright.async_api import Browser, Page, async_playwright, expect

from schemas import LlmChunk, Namespace, encode
from tests.support.console import (
    ORCHESTRATE_OBJECTIVE,
    XSS_MESSAGE,
    ConsoleDeployment,
    console_deployment,
)
from tools.audit import query_records
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
    await _choose_agents(page, agents)
    if mode != "delegate":  # a collaboration's order is its first speaker
        await page.select_option("#first", first or agents.split(",")[0])
    if mode == "collaborate":
        await page.fill("#max-rounds", str(rounds))
    await page.fill("#goal-input", goal)
    await page.click("#start")
    await page.wait_for_url("**/#/session/*", timeout=_WAIT_MS)
    await expect(page.locator("#session-view")).to_be_visible()
    return page.url.rsplit("/", 1)[1]


async def _choose_agents(page: Page, agents: str) -> None:
    """Tick the agents named (comma-separated) among those the form lists, and only those."""
    wanted = {name.strip() for name in agents.split(",")}
    boxes = page.locator("#agent-choices input[name=agent]")
    await expect(boxes).not_to_have_count(0, timeout=_WAIT_MS)
    listed = [await box.get_attribute("value") for box in await boxes.all()]
    assert wanted <= set(listed), (wanted, listed)
    for box in await boxes.all():
        if await box.get_attribute("value") not in wanted:
            await box.set_checked(False)
    for box in await boxes.all():
        if await box.get_attribute("value") in wanted:
            await box.set_checked(True)


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
        "Finished in round 4: the answer was marked final.", timeout=_WAIT_MS
    )
    await expect(page.locator("#timeline .turn")).to_have_count(4)
    opened = "Session opened with claude, gpt, up to 4 rounds."
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
        "Session opened with claude, gpt, up to 6 rounds."
    )
    await later.screenshot(path=tmp_path / "02-replayed.png")

    await page.click("#stop")
    notice = "Collaboration canceled by user in round 2: Stop pressed in the console."
    await expect(page.locator("#ending")).to_have_text(notice, timeout=_WAIT_MS)
    await expect(later.locator("#ending")).to_have_text(notice, timeout=_WAIT_MS)  # pushed live
    await expect(page.locator("#stop")).to_be_hidden()
    await page.screenshot(path=tmp_path / "03-canceled.png")
    await page.context.close()
    await later.context.close()


async def test_an_answer_being_written_is_shown_as_it_comes_then_gives_way(
    browser: Browser, deployment: ConsoleDeployment, tmp_path: Path
) -> None:
    """While claude answers round 2, the LLM gateway's principal sends alice's typing subject
    claude's message piece by piece (as actors/llm/_typing.py does; the gateway itself is
    tested in tests/integration/test_llm_stream.py and test_llm_up.py): the page draws one
    live turn growing with each piece, and the session's end takes it away."""
    page = await _signed_in_page(browser, deployment, "alice")
    session_id = await _start(page, "collaborate", "gpt,claude", "A slow task", first="gpt")
    await expect(page.locator("#waiting")).to_have_text(
        "claude is answering (round 2)…", timeout=_WAIT_MS
    )
    llm = await deployment.locked.connect("llm")
    subject = deployment.ns.typing("person-alice", session_id)
    pieces = ["Round two: ", "<b>the plan</b> ", "takes shape."]
    live = page.locator("#timeline #writing")
    try:
        for index, piece in enumerate(pieces):
            chunk = LlmChunk(request_id="r-typing", index=index, text=piece, agent="claude")
            await llm.publish(subject, encode(chunk))
            await llm.flush()
            written = "".join(pieces[: index + 1])
            await expect(live.locator(".message")).to_have_text(written, timeout=_WAIT_MS)
            if index == 0:
                await page.screenshot(path=tmp_path / "01-first-piece.png")
    finally:
        await llm.close()
    await expect(live.locator(".speaker")).to_have_text("claude")
    await expect(page.locator("#timeline .turn")).to_have_count(2)  # gpt's turn, the live one
    assert await page.locator("#timeline b").count() == 0  # text, never markup
    await page.screenshot(path=tmp_path / "02-written.png")
    await page.click("#stop")
    await expect(page.locator("#ending")).to_contain_text("canceled", timeout=_WAIT_MS)
    await expect(live).to_have_count(0)
    await expect(page.locator("#timeline .turn")).to_have_count(1)
    await page.context.close()


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
    await expect(page.locator("#ending")).to_have_text("gpt answered.")
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
    await expect(page.locator("#ending")).to_have_text("gpt answered.", timeout=_WAIT_MS)
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


def _draft(turn: int) -> str:
    return f"Draft {turn}: could we meet on Tuesday at ten?"


async def _start_orchestrated(page: Page, mode: str, max_turns: int) -> str:
    """Start an orchestrated session from the form: claude drafts, gpt is the shared agent.
    The page is made tall enough for the whole run, so each screenshot shows the timeline
    above the sticky controls (a full-page shot pins them mid-page, over the timeline)."""
    await page.set_viewport_size({"width": 1100, "height": 1500})
    await page.goto(page.url.split("#", 1)[0] + "#/new")
    await expect(page.locator("#new-view")).to_be_visible()
    await page.check("input[name=mode][value=orchestrate]")
    await expect(page.locator("#orchestrate-fields")).to_be_visible()
    await expect(page.locator("#call-fields")).to_be_hidden()
    await expect(page.locator("#goal-label")).to_have_text("Objective")
    await page.select_option("#local-agent", "claude")
    await page.select_option("#shared-agent", "gpt")
    await page.select_option("#orchestration-mode", mode)
    await page.fill("#max-turns", str(max_turns))
    await page.fill("#goal-input", ORCHESTRATE_OBJECTIVE)
    await page.click("#start")
    await page.wait_for_url("**/#/session/*", timeout=_WAIT_MS)
    await expect(page.locator("#session-view")).to_be_visible()
    await expect(page.locator("#goal")).to_have_text(ORCHESTRATE_OBJECTIVE)
    return page.url.rsplit("/", 1)[1]


async def _awaiting(page: Page, draft: str, not_id: str = "") -> str:
    """Wait for the approval prompt of a draft (another approval than `not_id`); its id."""
    prompt = page.locator("#approval")
    await expect(prompt).to_be_visible(timeout=_WAIT_MS)
    await expect(page.locator("#approval-draft")).to_have_text(draft, timeout=_WAIT_MS)
    if not_id:
        await expect(prompt).not_to_have_attribute("data-approval-id", not_id, timeout=_WAIT_MS)
    approval_id = await prompt.get_attribute("data-approval-id")
    assert approval_id
    return approval_id


async def test_an_orchestrated_session_where_drafts_are_approved_edited_and_rejected(
    browser: Browser, deployment: ConsoleDeployment, tmp_path: Path
) -> None:
    page = await _signed_in_page(browser, deployment, "alice")
    await _start_orchestrated(page, "manual", 5)
    await expect(page.locator("#timeline .system").first).to_have_text(
        "Local Agent: claude · Remote Agent: gpt · manual · up to 5 turns.", timeout=_WAIT_MS
    )
    await _awaiting(page, _draft(1))
    await expect(page.locator("#chip")).to_have_text("Turn 1/5 · manual")
    await expect(page.locator("#approval-reasons")).to_contain_text("manual mode")
    for control in ("#pause", "#take-over", "#stop"):
        await expect(page.locator(control)).to_be_visible()
    await page.screenshot(path=tmp_path / "01-draft-awaits-approval.png")

    await page.click("#approve")
    labels = page.locator("#timeline .sent .label")
    await expect(labels).to_have_text(["approved"], timeout=_WAIT_MS)
    await expect(page.locator("#timeline .turn.remote")).to_have_count(1, timeout=_WAIT_MS)
    await page.screenshot(path=tmp_path / "02-approved.png")

    await _awaiting(page, _draft(2))
    edit = "Tuesday at ten suits us; shall we confirm?"
    await page.click("#edit")
    await expect(page.locator("#edit-text")).to_have_value(_draft(2))
    await page.fill("#edit-text", edit)
    await page.screenshot(path=tmp_path / "03-editing.png")
    await page.click("#send-edit")
    await expect(labels).to_have_text(["approved", "edited by you"], timeout=_WAIT_MS)
    await expect(page.locator("#timeline .decision.edited")).to_have_text(
        f"You edited the draft: {edit}"
    )
    remote = page.locator("#timeline .turn.remote .message")
    await expect(remote).to_have_count(2, timeout=_WAIT_MS)
    await expect(remote.nth(1)).to_contain_text(edit)  # gpt answered the edited text
    await page.screenshot(path=tmp_path / "04-edited.png")

    rejected_id = await _awaiting(page, _draft(3))
    await page.click("#reject")
    await page.fill("#reject-reason", "too pushy")
    await page.click("#send-reject")
    await expect(page.locator("#timeline .decision.rejected")).to_have_text(
        "You rejected the draft: too pushy", timeout=_WAIT_MS
    )
    await _awaiting(page, _draft(3), not_id=rejected_id)  # the local agent drafts again
    await expect(labels).to_have_count(2)  # nothing was sent for the rejected draft
    voices = await page.locator("#timeline .turn .speaker").all_inner_texts()
    assert voices == ["Local Agent", "Remote Agent"] * 2 + ["Local Agent"] * 2, voices
    await page.screenshot(path=tmp_path / "05-rejected-and-redrafted.png")

    await page.click("#stop")
    await expect(page.locator("#ending")).to_have_text(
        re.compile(r"^You stopped the session at turn \d: Stop pressed in the console\.$"),
        timeout=_WAIT_MS,
    )
    await expect(page.locator("#state")).to_have_text("canceled")
    for control in ("#approval", "#pause", "#resume", "#take-over", "#stop"):
        await expect(page.locator(control)).to_be_hidden()
    await expect(page.locator("#banner")).to_be_hidden()
    await page.screenshot(path=tmp_path / "06-stopped.png")
    await page.context.close()


async def test_full_auto_to_max_turns_shows_the_limit_banner(
    browser: Browser, deployment: ConsoleDeployment, tmp_path: Path
) -> None:
    page = await _signed_in_page(browser, deployment, "alice")
    await _start_orchestrated(page, "full_auto", 2)
    banner = page.locator("#banner")
    await expect(banner).to_have_text(re.compile(r"^TURN LIMIT REACHED: "), timeout=_WAIT_MS)
    await expect(banner).to_contain_text("maxTurns is 2")
    labels = page.locator("#timeline .sent .label")
    await expect(labels).to_have_text(["auto-sent", "auto-sent"])
    await expect(page.locator("#ending")).to_have_text(
        "Ended at turn 2: the turn limit was reached: maxTurns is 2."
    )
    await expect(page.locator("#approval")).to_be_hidden()
    await expect(page.locator("#state")).to_have_text("completed")
    await page.screenshot(path=tmp_path / "01-turn-limit-banner.png")
    await page.context.close()


async def test_pause_resume_and_take_over_an_orchestrated_session(
    browser: Browser, deployment: ConsoleDeployment, tmp_path: Path
) -> None:
    page = await _signed_in_page(browser, deployment, "alice")
    await _start_orchestrated(page, "manual", 3)
    await _awaiting(page, _draft(1))
    await page.click("#pause")
    system = page.locator("#timeline .system")
    await expect(system.last).to_have_text(
        "You paused the session: nothing is sent until you resume.", timeout=_WAIT_MS
    )
    await expect(page.locator("#resume")).to_be_visible()
    await expect(page.locator("#pause")).to_be_hidden()
    await expect(page.locator("#approval")).to_be_hidden()  # decided after Resume
    await expect(page.locator("#state")).to_have_text("running · paused")
    await page.screenshot(path=tmp_path / "01-paused.png")

    await page.click("#resume")
    await expect(system.last).to_have_text("You resumed the session.", timeout=_WAIT_MS)
    await expect(page.locator("#pause")).to_be_visible()
    await _awaiting(page, _draft(1))  # the draft asked for still stands
    await page.screenshot(path=tmp_path / "02-resumed.png")
    await page.click("#approve")
    labels = page.locator("#timeline .sent .label")
    await expect(labels).to_have_text(["approved"], timeout=_WAIT_MS)

    await _awaiting(page, _draft(2))  # Take over: the person's own words instead of it
    mine = "Let me answer myself: Tuesday at ten works."
    await page.click("#take-over")
    await page.fill("#take-over-text", mine)
    await page.screenshot(path=tmp_path / "03-taking-over.png")
    await page.click("#send-take-over")
    await expect(page.locator("#timeline .turn.you .message")).to_have_text(mine, timeout=_WAIT_MS)
    await expect(labels).to_have_text(["approved", "typed by you"])
    await expect(page.locator("#timeline .decision.taken_over")).to_have_text("You took over.")
    await page.screenshot(path=tmp_path / "04-taken-over.png")
    await page.click("#stop")
    await expect(page.locator("#ending")).to_have_text(
        re.compile(r"^You stopped the session at turn \d: Stop pressed in the console\.$"),
        timeout=_WAIT_MS,
    )
    await page.screenshot(path=tmp_path / "05-stopped.png")
    await page.context.close()


async def test_a_delegation_from_the_form_shows_each_result(
    browser: Browser, deployment: ConsoleDeployment, tmp_path: Path
) -> None:
    """Seed 003 from the form: alice delegates one objective to gpt and claude at once (the
    request `parley delegate --fan-out` sends); each call is told by the gate as it goes, and
    each agent's answer is shown as it comes."""
    page = await _signed_in_page(browser, deployment, "alice")
    await page.goto(page.url.split("#", 1)[0] + "#/new")
    await page.check("input[name=mode][value=delegate]")
    await expect(page.locator("#goal-label")).to_have_text("Objective")
    await expect(page.locator("#first-field")).to_be_hidden()
    await expect(page.locator("#rounds-field")).to_be_hidden()
    objective = "list the parser's open questions"
    await _choose_agents(page, "gpt, claude")
    await page.fill("#goal-input", objective)
    await page.screenshot(path=tmp_path / "01-delegation-form.png")
    await page.click("#start")
    await page.wait_for_url("**/#/session/*", timeout=_WAIT_MS)
    await expect(page.locator("#chip")).to_have_text("Delegation")
    await expect(page.locator("#ending")).to_have_text(
        "2 of 2 agents answered successfully.", timeout=_WAIT_MS
    )
    calls = page.locator("#timeline .call .calling")  # the gate tells each call as it goes
    await expect(calls).to_have_count(2)
    assert sorted(await calls.all_inner_texts()) == [
        f"person-alice calling claude with task: {objective}",
        f"person-alice calling gpt with task: {objective}",
    ]
    await expect(page.locator("#timeline .turn.delegation .chip")).to_have_text(
        ["SUCCESS", "SUCCESS"]
    )
    await expect(page.locator("#timeline .turn.delegation .figures").first).to_have_text(
        re.compile(r"^\(\d+ tokens(, [\d.]+s)?\)$")
    )
    await expect(page.locator("#timeline .turn.delegation .message")).to_have_text(
        [
            f"claude completed the delegated objective: {objective}",
            f"gpt completed the delegated objective: {objective}",
        ]
    )
    await expect(page.locator("#state")).to_have_text("completed")
    await page.screenshot(path=tmp_path / "02-delegation-results.png")
    await page.context.close()


async def test_the_trace_of_a_session_and_my_audit_records(
    browser: Browser, deployment: ConsoleDeployment, tmp_path: Path
) -> None:
    """The trace tree of alice's session (her message to the router, the router's call to
    gpt under it) and her own audit records; bob's page lists none of hers."""
    reader = await deployment.locked.connect("audit-cli")
    answer_audited = asyncio.Event()
    records: list[dict[str, Any]] = []
    session: list[str] = []

    def check() -> None:
        """The last decision of the session's trace: gpt's answer to the router."""
        if any(r.get("session_id") in session and r.get("requester") == "gpt" for r in records):
            answer_audited.set()

    async def on_record(msg: Msg) -> None:
        records.append(json.loads(msg.data))
        check()

    await reader.subscribe(f"{deployment.ns.root}.audit.demo.*", cb=on_record)
    await reader.flush()
    try:
        page = await _signed_in_page(browser, deployment, "alice")
        session.append(await _start(page, "single", "gpt", "Trace me in 1 sentence, then stop."))
        check()
        await expect(page.locator("#ending")).to_have_text("gpt answered.", timeout=_WAIT_MS)
        await asyncio.wait_for(answer_audited.wait(), 30)
        # Seen as it was published: the router's call, recorded before it, may be stored a
        # moment later (the auditor's appends are pipelined). The trace is drawn from the
        # stream once, so it is opened only when the call's record is there.
        js = deployment.locked.js(reader, "audit-cli")
        async with asyncio.timeout(30):
            while not any(
                (r.requester, r.target) == ("router", "gpt")
                for r in await query_records(js, deployment.ns, tenant="demo", session=session[0])
            ):
                await reader.flush()
        await page.click("#show-trace")
        nodes = page.locator("#trace .node")
        await expect(nodes.first).to_have_text(
            re.compile(r"^person-alice → router  human_message  delivered"), timeout=_WAIT_MS
        )
        nested = page.locator("#trace > ul.tree > li > ul.tree .node")
        await expect(nested.filter(has_text="router → gpt")).not_to_have_count(0)
        await page.screenshot(path=tmp_path / "01-trace-tree.png", full_page=True)

        await page.click("#audit-link")
        await expect(page.locator("#audit-view")).to_be_visible()
        await expect(page.locator("#audit-profile")).to_have_text("person-alice")
        rows = page.locator("#audit-records tr")
        await expect(rows.first).to_be_visible(timeout=_WAIT_MS)
        lines = await page.locator("#audit-records td:nth-child(3)").all_inner_texts()
        assert lines and all("person-alice" in line for line in lines), lines
        await page.screenshot(path=tmp_path / "02-my-audit-records.png", full_page=True)

        bob = await _signed_in_page(browser, deployment, "bob")
        await bob.goto(f"{deployment.url}#/audit")
        await expect(bob.locator("#audit-profile")).to_have_text("person-bob", timeout=_WAIT_MS)
        assert "Trace me" not in await bob.locator("#audit-view").inner_text()
        await bob.screenshot(path=tmp_path / "03-bobs-audit-records.png", full_page=True)
        await page.context.close()
        await bob.context.close()
    finally:
        await reader.close()


async def test_a_draft_full_of_markup_is_shown_as_text(
    browser: Browser, deployment: ConsoleDeployment, tmp_path: Path
) -> None:
    """A draft is an agent's words too: in the timeline and in the approval prompt (and the
    edit box) its markup is text, and nothing in it runs."""
    page = await _signed_in_page(browser, deployment, "alice")
    await page.set_viewport_size({"width": 1100, "height": 1500})
    await page.goto(page.url.split("#", 1)[0] + "#/new")
    await page.check("input[name=mode][value=orchestrate]")
    await page.fill("#goal-input", "markup draft for the other team")
    await page.click("#start")
    await page.wait_for_url("**/#/session/*", timeout=_WAIT_MS)
    await _awaiting(page, XSS_MESSAGE)
    await expect(page.locator("#timeline .turn.local .message")).to_have_text(XSS_MESSAGE)
    await page.click("#edit")
    await expect(page.locator("#edit-text")).to_have_value(XSS_MESSAGE)
    for selector in ("script", "img", "a", "b"):
        found = page.locator(f"#timeline {selector}, #approval {selector}")
        assert await found.count() == 0, selector
    await page.locator("#approval-draft").click()
    assert await page.evaluate("window.__pwned === undefined")
    await page.screenshot(path=tmp_path / "01-draft-markup-as-text.png")
    await page.click("#stop")
    await expect(page.locator("#ending")).to_contain_text("You stopped", timeout=_WAIT_MS)
    await page.context.close()


async def test_agents_are_chosen_from_those_registered(
    browser: Browser, deployment: ConsoleDeployment, tmp_path: Path
) -> None:
    """The form offers the agents registered on the deployment (gpt and claude), as boxes to
    tick and lists to choose from: there is no box to type a name into."""
    page = await _signed_in_page(browser, deployment, "alice")
    await page.goto(page.url.split("#", 1)[0] + "#/new")
    boxes = page.locator("#agent-choices input[name=agent]")
    await expect(boxes).to_have_count(2, timeout=_WAIT_MS)
    assert [await box.get_attribute("value") for box in await boxes.all()] == ["claude", "gpt"]
    assert (
        await page.locator("#new-view input[type=text], #new-view input:not([type])").count() == 0
    )
    await page.check("input[name=mode][value=single]")
    await expect(page.locator("#agent-choices input:checked")).to_have_count(1)
    await page.check("#agent-choices input[value=gpt]")  # one agent for a single call
    await expect(page.locator("#agent-choices input:checked")).to_have_count(1)
    await page.check("input[name=mode][value=orchestrate]")
    for select in ("#local-agent", "#shared-agent"):
        options = await page.locator(f"{select} option").all_inner_texts()
        assert options == ["claude", "gpt"], (select, options)
    await expect(page.locator("#local-agent")).to_have_value("claude")
    await expect(page.locator("#shared-agent")).to_have_value("gpt")
    await page.screenshot(path=tmp_path / "01-agents-to-choose.png")
    await page.context.close()


async def test_a_send_the_gate_refused_shows_the_refusal(
    browser: Browser, deployment: ConsoleDeployment, tmp_path: Path
) -> None:
    """full_auto sends claude's draft to an agent the router may not call: the gate refuses
    it, and the page says so where the send is shown, never "auto-sent"."""
    async with httpx.AsyncClient(base_url=deployment.url) as client:
        signed = await client.post("/signin", json={"token": deployment.tokens["alice"]})
        headers = {"Authorization": f"Bearer {signed.json()['signInToken']}"}
        params = {
            "mode": "orchestrate",
            "agents": ["claude", "reviewer"],  # the bundle lets the router call gpt and claude
            "orchestrationMode": "full_auto",
            "maxTurns": 2,
        }
        created = await _rpc_as(client, headers, "CreateSession", params)
        session_id = created["sessionId"]
        prompt = {"sessionId": session_id, "prompt": ORCHESTRATE_OBJECTIVE}
        assert (await _rpc_as(client, headers, "StartTask", prompt))["state"] == "submitted"
    page = await _signed_in_page(browser, deployment, "alice")
    await page.goto(f"{deployment.url}#/session/{session_id}")
    sent = page.locator("#timeline .sent")
    await expect(sent.locator(".label")).to_have_text(["refused by the gate"], timeout=_WAIT_MS)
    await expect(sent).to_contain_text("TARGET_NOT_ALLOWED: router may not send to reviewer")
    await expect(page.locator("#ending")).to_have_text(
        re.compile(r"^Failed at turn 1: the gate refused the call to the shared agent reviewer: "),
        timeout=_WAIT_MS,
    )
    assert "auto-sent" not in await page.locator("#timeline").inner_text()
    await page.screenshot(path=tmp_path / "01-refused-send.png")
    await page.context.close()


async def test_no_view_is_wider_than_a_420_px_screen(
    browser: Browser, deployment: ConsoleDeployment, tmp_path: Path
) -> None:
    """Sign-in, the start form, a session with its trace, and the audit records, each at
    420 px wide: nothing scrolls sideways."""
    context = await browser.new_context(viewport={"width": 420, "height": 800})
    page = await context.new_page()

    async def fits(view: str) -> None:
        widths = await page.evaluate(
            "[document.documentElement.scrollWidth, document.documentElement.clientWidth]"
        )
        await page.screenshot(path=tmp_path / f"420-{view}.png", full_page=True)
        assert widths[0] <= widths[1], (view, widths)

    await page.goto(deployment.url)
    await expect(page.locator("#sign-in-view")).to_be_visible()
    await fits("sign-in")
    await page.fill("#token", deployment.tokens["alice"])
    await page.click("#sign-in-form button[type=submit]")
    await expect(page.locator("#who")).to_have_text("alice", timeout=_WAIT_MS)
    await page.goto(deployment.url + "#/new")
    await expect(page.locator("#agent-choices input")).to_have_count(2, timeout=_WAIT_MS)
    await fits("start-form")
    await _start(page, "collaborate", "gpt,claude", DEMO_GOAL, first="claude", rounds=2)
    await expect(page.locator("#ending")).to_be_visible(timeout=_WAIT_MS)
    await page.click("#show-trace")
    await expect(page.locator("#trace")).to_be_visible(timeout=_WAIT_MS)
    await fits("session")
    await page.goto(deployment.url + "#/audit")
    await expect(page.locator("#audit-records tr").first).to_be_visible(timeout=_WAIT_MS)
    await fits("audit")
    await context.close()
