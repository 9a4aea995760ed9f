"""The README's real-model lines under `parley up`: agent profiles with `backend = "gateway"`,
the provider keys exported in the shell, and a collaboration that reaches the provider through
the gate and the LLM gateway, which alone holds the key.

`parley up DIR` runs a system of its own (gpt and claude with the README's gateway profiles,
the demo bundle, the gateway) in a directory of its own; the provider is the local OpenAI
wire-format server (tests/support/llm_server.py), named by `OPENAI_BASE_URL`, which records
the key each request came with.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from tests.support.llm_server import WireServer, openai_completion
from tests.support.processes import REPO, close_up, parley_env, parley_up
from tests.support.system import finished, parley_cli

KEY = "sk-readme-real-model-0123"
GOAL = "Outline a 3-step plan for a picnic."
README_PROFILES = re.findall(
    r"^```toml\n(.*?)^```", (REPO / "README.md").read_text(), re.MULTILINE | re.DOTALL
)
"""The README's "A real model" profiles, as a person copies them: gpt's, then claude's."""
GPT, CLAUDE = README_PROFILES


async def test_the_readme_real_model_profiles_reach_the_provider_through_the_gateway(
    tmp_path: Path,
) -> None:
    server = WireServer(checks="openai")
    await server.start()
    server.queue(openai_completion(json.dumps({"message": "1. bread 2. go 3. eat", "final": True})))
    system = tmp_path / "system"
    (system / "agents").mkdir(parents=True)
    (system / "agents" / "gpt.toml").write_text(GPT)
    (system / "agents" / "claude.toml").write_text(CLAUDE)
    policy = REPO / "deploy" / "policy" / "demo.toml"
    (system / "system.toml").write_text(
        f'agents = ["gpt", "claude"]\npolicy = {json.dumps(str(policy))}\n'
        'agents_dir = "agents"\nconsole = false\nllm = true\n'
    )
    env = parley_env("unused", "parley")
    del env["NATS_URL"], env["PARLEY_NAMESPACE"]  # as a person's shell
    env |= {"OPENAI_API_KEY": KEY, "OPENAI_BASE_URL": f"{server.url}/v1"}
    up = parley_up(system, env, cwd=tmp_path)
    try:
        await up.wait_line(
            r"^\[nats\] ready: gate, router, auditor, gpt, claude, llm;", timeout=120
        )
        code, said = await finished(parley_cli(env, "collab", GOAL, cwd=tmp_path), 120)
        assert code == 0 and said[-1].startswith("stopped: final"), said
        assert any("1. bread 2. go 3. eat" in line for line in said), said
    finally:
        close_up(up)
        await server.close()
    (asked,) = server.requests
    assert asked.headers["authorization"] == f"Bearer {KEY}"
    assert asked.body["model"] == "gpt-4o-mini"
    assert KEY not in (system / "agents" / "gpt.toml").read_text()
