"""Seed 002 §6's session handshake, at CreateSession: the policy in force, checked, and what it
says of the session about to start.

The seed's desktop host asks a session service for the signed policy bundle before any work
and refuses to start when it does not validate (§10: signature, expiry, tenant, schema). Here
every actor that acts verifies the bundle itself (the gate, the tool runtime, the LLM
gateway), and the console verifies it too, with the same signers' public keys (its
`policy_keys` option; `parley up` gives them), reading the newest by a stored message's get
at every CreateSession (bus/_bundle_reader.py): a session is not created while no bundle is
trusted (`POLICY_BUNDLE_INVALID`, saying why) or the one in force has expired
(`POLICY_EXPIRED`), since every step of it would be refused.

Otherwise CreateSession's answer carries `handshake` (the seed's handshake response, in its
words where it has them):

- `compatibility`: `compatible` when the client listed every capability the session's agents
  hold (`supportedCapabilities`; not listing any says nothing and is compatible), else
  `degraded` with those it did not list: the session still runs (the tool runtime, not the
  client, executes them), but the client will be shown steps it said it does not know;
- `policyBundle`: the bundle's version, schema version, tenant, expiry and label;
- `llmGateway`: the target model calls are addressed to, and the models allowed;
- `limits`: the bundle's token limits and each agent's budgets;
- `capabilities`: what each of the session's agents may use (a name that is no registered
  agent, another person's or a system actor's, is described as one the bundle has no profile
  for: nothing of their limits is told);
- `approvalRules`: the rules that hold those capabilities' requests for the person;
- `featureFlags`: what this console offers (patch previews, the audit views).

The bundle itself is not handed out: the actors that act on it verify it, and a person needs
what it says of their session, not the guardrails' patterns.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

from actors.console._agents import AgentDirectory, AgentsUnreadable
from actors.console._rpc_errors import RpcError
from bus import BundleReader
from schemas import Capability, PolicyBundle, approval_rule_of, effective_scope, utc_now

__all__ = ("Handshake",)


class Handshake:
    """Answers CreateSession's handshake from the newest bundle a `BundleReader` trusts."""

    def __init__(
        self,
        bundles: BundleReader,
        features: dict[str, bool],
        llm_target: str = "llm",
        clock: Callable[[], datetime] = utc_now,
        directory: AgentDirectory | None = None,
    ) -> None:
        """`directory`: the registered agents, the only names the handshake describes (None:
        every name); `clock`: now, which a test may move past a bundle's expiry."""
        self._directory = directory
        self._bundles = bundles
        self._features = features
        self._llm_target = llm_target
        self._clock = clock

    async def answer(
        self, agents: Sequence[str], supported: Sequence[str] | None
    ) -> dict[str, Any]:
        """The handshake for a session of `agents`, for a client supporting `supported`,
        under the newest bundle (read again now: one stored message's get).

        Raises:
            RpcError: no bundle is trusted, or the one in force has expired; the session
                must not start.
        """
        await self._bundles.refresh()
        bundle = self._trusted()
        described = await self._agents(agents)
        held = {
            agent: _capabilities(bundle, agent) if agent in described else [] for agent in agents
        }
        needed = sorted({name for names in held.values() for name in names})
        unsupported = [] if supported is None else [c for c in needed if c not in supported]
        llm = bundle.llm_policy
        return {
            "compatibility": {
                "status": "degraded" if unsupported else "compatible",
                "unsupportedCapabilities": unsupported,
            },
            "policyBundle": {
                "version": bundle.version,
                "schemaVersion": bundle.schema_version,
                "tenantId": bundle.tenant_id,
                "expiresAt": bundle.expires_at.isoformat(),
                "label": bundle.label,
            },
            "llmGateway": {"target": self._llm_target, "allowedModels": list(llm.allowed_models)},
            "limits": {
                "maxInputTokens": llm.max_input_tokens,
                "maxOutputTokens": llm.max_output_tokens,
                "maxSessionTokens": llm.max_session_tokens,
                "agents": {
                    agent: _budgets(bundle, agent) if agent in described else None
                    for agent in agents
                },
            },
            "capabilities": held,
            "approvalRules": _approval_rules(bundle, agents, held),
            "featureFlags": dict(self._features),
        }

    async def _agents(self, names: Sequence[str]) -> frozenset[str]:
        """Which of `names` are registered agents: a person's or a system actor's profile
        (another person's budgets, the router's rate) is nobody's business here, so such a
        name is described as one without a profile, exactly like a name nobody has."""
        if self._directory is None:
            return frozenset(names)
        try:
            registered = set(await self._directory.names())
        except AgentsUnreadable:
            return frozenset()  # described as unknown; the session itself is not refused
        return frozenset(name for name in names if name in registered)

    def _trusted(self) -> PolicyBundle:
        bundle = self._bundles.bundle
        if bundle is None:
            raise RpcError.refused(
                "POLICY_BUNDLE_INVALID",
                f"no policy bundle is trusted, so no session may start: {self._bundles.problem}",
            )
        if bundle.expires_at <= self._clock():
            raise RpcError.refused(
                "POLICY_EXPIRED",
                f"the policy bundle in force (version {bundle.version}) expired at "
                f"{bundle.expires_at.isoformat()}: no session may start until a newer one is "
                "signed (`parley policy sign`)",
            )
        return bundle


def _capabilities(bundle: PolicyBundle, agent: str) -> list[str]:
    policy = bundle.profiles.get(agent)
    return sorted(policy.capabilities) if policy is not None else []


def _budgets(bundle: PolicyBundle, agent: str) -> dict[str, Any] | None:
    """An agent's own limits (None: the bundle has no profile for it, so it may do nothing)."""
    policy = bundle.profiles.get(agent)
    if policy is None:
        return None
    return {
        "traceMessageBudget": policy.trace_message_budget,
        "ratePerMinute": policy.rate_per_minute,
        "maxHopCount": policy.max_hop_count,
        "maxDepth": policy.max_depth,
        "maxFanOut": policy.max_fan_out,
        "maxTokens": policy.max_tokens,
        "allowedModels": None if policy.allowed_models is None else list(policy.allowed_models),
    }


def _approval_rules(
    bundle: PolicyBundle, agents: Sequence[str], held: dict[str, list[str]]
) -> list[dict[str, Any]]:
    """The rules that hold the session's agents' requests, each once."""
    rules: dict[str, dict[str, Any]] = {}
    for agent in agents:
        for name in held[agent]:
            scope: Capability | None = effective_scope(bundle, agent, name)
            rule = approval_rule_of(bundle, scope) if scope and scope.requires_approval else None
            if rule is not None and rule.approval_rule_id not in rules:
                rules[rule.approval_rule_id] = {
                    "approvalRuleId": rule.approval_rule_id,
                    "title": rule.title,
                    "description": rule.description,
                    "timeoutS": rule.timeout_s,
                    "capabilities": [],
                }
            if rule is not None:
                rules[rule.approval_rule_id]["capabilities"].append(name)
    return list(rules.values())
