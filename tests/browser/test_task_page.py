"""The console's task view in a real browser: Debian's chromium, driven by Playwright, against
a whole deployment of real processes (tests/support/task_system.py).

alice starts a task for gpt from the start form; its File.Write waits for her approval, shown
with what it does and its risk; she approves it and sees the task's state reach
SESSION_COMPLETED, its step SUCCEEDED and the patch preview with the line written. A second
task's request she rejects with a reason: the step is DENIED and nothing is written.
"""

from __future__ import annotations

import os
import re
import shutil
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from playwright.async_api import Browser, Page, async_playwright, expect

from schemas import Namespace
from tests.support.task_system import TaskDeployment, task_deployment

pytestmark = pytest.mark.timeout(240)

CHROMIUM = "/usr/bin/chromium"
_WAIT_MS = 60_000


@pytest.fixture(scope="module")
async def deployment(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[TaskDeployment]:
    root = tmp_path_factory.mktemp("task-page")
    async with task_deployment(root, Namespace(f"t{uuid.uuid4().hex[:12]}")) as deployed:
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


async def _start_task(page: Page, goal: str) -> None:
    await page.goto(page.url.split("#", 1)[0] + "#/new")
    await page.check("input[name=mode][value=task]")
    boxes = page.locator("#agent-choices input[name=agent]")
    await expect(boxes).not_to_have_count(0, timeout=_WAIT_MS)
    await page.locator("#agent-choices input[value=gpt]").set_checked(True)
    await page.fill("#goal-input", goal)
    await page.click("#start")
    await page.wait_for_url("**/#/session/*", timeout=_WAIT_MS)
    await expect(page.locator("#chip")).to_have_text("Task")


async def test_a_task_is_approved_and_rejected_in_the_page(
    browser: Browser, deployment: TaskDeployment, tmp_path: Path
) -> None:
    page = await (await browser.new_context(viewport={"width": 1100, "height": 800})).new_page()
    complaints: list[str] = []  # the page must live within its own CSP
    page.on("console", lambda message: complaints.append(message.text))
    await page.goto(deployment.url)
    await page.fill("#token", deployment.tokens["alice"])
    await page.click("#sign-in-form button[type=submit]")
    await expect(page.locator("#who")).to_have_text("alice", timeout=_WAIT_MS)

    await _start_task(page, "delta")
    approval = page.locator("#tool-approval")
    await expect(approval).to_be_visible(timeout=_WAIT_MS)
    await expect(page.locator("#tool-approval-title")).to_contain_text("File.Write (risk medium)")
    await expect(page.locator("#tool-approval-summary")).to_contain_text('path="delta.txt"')
    await expect(page.locator("#state")).to_have_text("WAITING_FOR_APPROVAL")
    await page.screenshot(path=tmp_path / "task-awaiting-approval.png")
    await page.click("#tool-approve")
    await expect(page.locator("#state")).to_have_text("SESSION_COMPLETED", timeout=_WAIT_MS)
    step = page.locator("#task-steps li.step")
    await expect(step).to_have_count(1)
    await expect(step).to_contain_text("File.Write")
    await expect(step).to_contain_text("SUCCEEDED")
    await expect(page.locator("#patch")).to_contain_text("+written for delta", timeout=_WAIT_MS)
    returned = page.locator("#timeline .call .returned")
    await expect(returned).to_have_text("tools returned: SUCCEEDED")
    await expect(returned).not_to_have_class(re.compile("failed"))
    await expect(page.locator("#timeline .turn .chip")).to_have_text("Task")
    await page.screenshot(path=tmp_path / "task-completed.png")

    await _start_task(page, "epsilon")
    await expect(approval).to_be_visible(timeout=_WAIT_MS)
    await page.fill("#tool-reject-reason", "not that file")
    await page.click("#tool-reject")
    await expect(page.locator("#state")).to_have_text("SESSION_COMPLETED", timeout=_WAIT_MS)
    await expect(page.locator("#task-steps li.step")).to_contain_text("DENIED")
    await expect(page.locator("#patch")).to_have_text("(no changes)", timeout=_WAIT_MS)
    assert not list(deployment.workspaces.glob("*/epsilon.txt"))
    assert not [c for c in complaints if "Content Security Policy" in c], complaints
