"""Policy bundles: what the gate enforces, signed so that only the policy signer can change it.

The bundle is seed 002 §10 (capabilities with scopes, LLM policy, approval rules, tenant,
expiry) plus, per agent profile, the controls of seed 000 (shared-agent calls, default deny),
seed 003 (depth, fan-out, deadline, token budget) and seed 004 (sub-agent calls, depth, tool
allowlists). Field names are snake_case like the rest of the wire (seed 002's
`policyBundleVersion` is `label`; its `signature` block is the DSSE envelope around the bundle).

A bundle travels only inside a DSSE envelope (schemas/_dsse.py). `verify_bundle` checks the
signature over the exact bytes first and decodes only what was signed; unknown fields are
refused, since a control an old gate cannot read must not be silently ignored.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Final, Literal

import msgspec
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from msgspec import Meta, Struct

from schemas._base import Name, UtcTime
from schemas._dsse import DsseError, verify_payload
from schemas._errors import ErrorCode

__all__ = (
    "BUNDLE_PAYLOAD_TYPE",
    "SUPPORTED_SCHEMA_VERSIONS",
    "ApprovalRule",
    "BundleError",
    "Capability",
    "GuardrailRule",
    "Guardrails",
    "LlmPolicy",
    "PolicyBundle",
    "ProfilePolicy",
    "approval_rule_of",
    "dangling_approval_rules",
    "decode_bundle",
    "effective_scope",
    "verify_bundle",
)

BUNDLE_PAYLOAD_TYPE: Final = "application/vnd.parley.policy-bundle+json"
SUPPORTED_SCHEMA_VERSIONS: Final = ("1.0",)

Positive = Annotated[int, Meta(ge=1)]
NonNegative = Annotated[int, Meta(ge=0)]


class Capability(Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """One capability and its scope (seed 002 §9)."""

    name: str
    allowed_paths: tuple[str, ...] = ()
    blocked_paths: tuple[str, ...] = ()
    allowed_commands: tuple[str, ...] = ()
    blocked_commands: tuple[str, ...] = ()
    allowed_domains: tuple[str, ...] = ()
    max_file_size_bytes: NonNegative | None = None
    max_output_bytes: NonNegative | None = None
    requires_approval: bool = False
    approval_rule_id: str | None = None


class LlmPolicy(Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Which models, and how many tokens (seed 002 §10 `llmPolicy`); None means no limit."""

    allowed_models: tuple[str, ...] = ()
    max_input_tokens: Positive | None = None
    max_output_tokens: Positive | None = None
    max_session_tokens: Positive | None = None


class GuardrailRule(Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """One rule of the LLM gateway (seed 002 §17 prompt and response guardrails): text that
    matches `pattern` (a regular expression, case-insensitive) on the `stage` side denies
    the call, or is redacted. Its `rule_id` names it in every decision it takes."""

    rule_id: Annotated[str, Meta(min_length=1, max_length=64)]
    stage: Literal["request", "response"]
    pattern: Annotated[str, Meta(min_length=1, max_length=500)]
    action: Literal["deny", "redact"] = "deny"


class Guardrails(Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The LLM gateway's guardrails: secrets (and, if asked, personal data) redacted on both
    sides, text from tools marked as untrusted data, and the bundle's own rules."""

    redact_secrets: bool = True
    redact_pii: bool = False
    mark_tool_output: bool = True
    rules: tuple[GuardrailRule, ...] = ()


class ApprovalRule(Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Seed 002's approval rule: a capability's scope names it (`approval_rule_id`)."""

    approval_rule_id: str
    title: str
    description: str = ""
    timeout_s: Annotated[int, Meta(ge=1, le=86_400)] = 300  # APPROVAL_TIMEOUT_S
    """How long a held request waits for its owner's decision; then it is denied."""


class ProfilePolicy(Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """What one agent profile may do. Every default is the seeds' default, and denies."""

    allowed_targets: tuple[Name, ...] = ()
    start_traces: bool = False
    """May submit an envelope with no cause, starting a new trace (a person's CLI, the
    router). Agents may not: an agent that could start fresh traces could escape the trace
    budget and the cycle checks by dropping its causation."""
    max_concurrent_calls: NonNegative = 3
    """Calls (agent calls, delegations, sub-agent calls) from this profile awaiting their
    answer at once."""
    speaks_for_person: bool = False
    """The principal acts for one person (a person's CLI or console session): only such a
    principal may send the kinds that speak for a person (`human_message`, `control`). An
    agent that could send them would open sessions with its own goal and cap, or stop other
    people's sessions, in a person's name."""
    operator: bool = False
    """An operator role: may send `control` for any session, not only the ones it opened
    (the gate tells the router with the `Parley-Sender-Role` header it sets on delivery)."""
    # seed 000: shared agents and loop prevention
    allow_shared_agent_calls: bool = False
    allowed_shared_device_ids: tuple[str, ...] = ()
    max_concurrent_shared_calls: NonNegative = 3
    max_hop_count: NonNegative = 2
    # seed 003: delegation
    max_depth: NonNegative = 2
    max_fan_out: NonNegative = 3
    deadline_ms: Positive = 15000
    max_tokens: Positive = 1200
    redact_pii: bool = False
    # seed 004: sub-agent calls
    allow_sub_agent_calls: bool = False
    max_sub_agent_depth: NonNegative = 5
    tools_allowed: tuple[str, ...] = ()
    # seed 002: capability names from the bundle's list
    capabilities: tuple[str, ...] = ()
    """Capabilities this profile may use as tools: seed 002 §9's names (`File.Read`, ...) or
    an MCP server's tools (`Mcp.<server>.<tool>`, or `Mcp.<server>.*` for all of them)."""
    scopes: tuple[Capability, ...] = ()
    """This profile's own scope of a capability it names, in place of the bundle's."""
    # seed 002: the models this profile may call through the LLM gateway
    allowed_models: tuple[str, ...] | None = None
    """None: any model of the bundle's `llm_policy.allowed_models`; else only these, and only
    those the bundle's list also names (both apply)."""
    # gate limits that bound a ping-pong that never deepens
    rate_per_minute: Positive = 60
    trace_message_budget: Positive = 200
    # A2A (actors/a2a/): the edge serves an Agent Card and A2A's methods for this agent
    a2a_exposed: bool = False
    """An agent A2A clients may find and call through `parley run a2a` (its Agent Card and
    methods). Off by default: an agent is reachable from outside only where the signer says."""


class PolicyBundle(Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """A whole policy. `version` only ever grows: a lower one is a rollback and is refused."""

    schema_version: str
    version: Positive
    label: str = ""
    tenant_id: Name
    issued_at: UtcTime | None = None
    expires_at: UtcTime
    profiles: dict[Name, ProfilePolicy] = {}
    shared_agents: tuple[Name, ...] = ()
    """Targets that are shared agents on another deployment (seed 000): calls to them need
    `allow_shared_agent_calls` and count against `max_concurrent_shared_calls`."""
    shared_agent_devices: dict[Name, str] = {}
    """The device each shared agent lives on (its owner's device id, `parley shared list`),
    so a profile's `allowed_shared_device_ids` may name devices, as seed 000's
    `allowedSharedDeviceIds` does, as well as shared agents by name."""
    capabilities: tuple[Capability, ...] = ()
    llm_policy: LlmPolicy = LlmPolicy()
    guardrails: Guardrails = Guardrails()
    approval_rules: tuple[ApprovalRule, ...] = ()


def approval_rule_of(bundle: PolicyBundle | None, scope: Capability) -> ApprovalRule | None:
    """The approval rule a scope that requires approval names (`approval_rule_id`, else its
    own capability's name), or None when the bundle has none of that id."""
    rule_id = scope.approval_rule_id or scope.name
    rules = bundle.approval_rules if bundle else ()
    return next((rule for rule in rules if rule.approval_rule_id == rule_id), None)


APPROVAL_TIMEOUT_S: Final = 300
"""How long a request held under no rule of the bundle waits, as a rule's own default."""


def approval_timeout_s(bundle: PolicyBundle | None, scope: Capability) -> int:
    """How long a request `scope` holds waits for its owner: its rule's `timeout_s`."""
    rule = approval_rule_of(bundle, scope)
    return rule.timeout_s if rule else APPROVAL_TIMEOUT_S


def dangling_approval_rules(bundle: PolicyBundle) -> list[str]:
    """Each scope whose `approval_rule_id` names no rule of the bundle: its held requests
    would wait the default time under no title. `parley policy sign` refuses such a bundle
    (gates still load one signed before, as ever)."""
    known = {rule.approval_rule_id for rule in bundle.approval_rules}
    scopes = [("the bundle", scope) for scope in bundle.capabilities]
    scopes += [
        (f"profile {name}", scope)
        for name, policy in bundle.profiles.items()
        for scope in policy.scopes
    ]
    return [
        f"{where}'s {scope.name} scope names approval rule {scope.approval_rule_id!r}"
        for where, scope in scopes
        if scope.approval_rule_id is not None and scope.approval_rule_id not in known
    ]


def effective_scope(bundle: PolicyBundle, profile: str, capability: str) -> Capability | None:
    """The scope `profile` may use `capability` within, or None when it may not use it.

    The profile must name the capability (or its MCP server's `Mcp.<server>.*`); its scope
    is the profile's own entry of that name, else the bundle's, else the empty scope, which
    allows no path, command or domain.
    """
    policy = bundle.profiles.get(profile)
    if policy is None:
        return None
    server_wildcard = capability.rsplit(".", 1)[0] + ".*" if capability.startswith("Mcp.") else ""
    named = capability in policy.capabilities or (
        bool(server_wildcard) and server_wildcard in policy.capabilities
    )
    if not named:
        return None
    for scopes in (policy.scopes, bundle.capabilities):
        for scope in scopes:
            if scope.name in (capability, server_wildcard) and scope.name:
                return scope
    return Capability(name=capability)


class _Head(Struct, frozen=True):
    schema_version: str = ""


class BundleError(ValueError):
    """A bundle that must not be trusted. `code` is the error code, `reason` a short word."""

    def __init__(self, code: ErrorCode, reason: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason


_head_decoder = msgspec.json.Decoder(_Head)
_bundle_decoder = msgspec.json.Decoder(PolicyBundle)


def decode_bundle(payload: bytes) -> PolicyBundle:
    """Decode bundle bytes strictly (schema version first, for a clear error)."""
    try:
        head = _head_decoder.decode(payload)
    except msgspec.DecodeError as exc:
        raise BundleError(ErrorCode.POLICY_BUNDLE_INVALID, "malformed", str(exc)) from None
    if head.schema_version not in SUPPORTED_SCHEMA_VERSIONS:
        raise BundleError(
            ErrorCode.POLICY_BUNDLE_INVALID,
            "schema_version",
            f"schema version {head.schema_version!r} is not supported "
            f"(supported: {', '.join(SUPPORTED_SCHEMA_VERSIONS)})",
        )
    try:
        return _bundle_decoder.decode(payload)
    except msgspec.DecodeError as exc:
        raise BundleError(ErrorCode.POLICY_BUNDLE_INVALID, "invalid", str(exc)) from None


def verify_bundle(
    signed: bytes,
    trusted: dict[str, Ed25519PublicKey],
    *,
    now: datetime,
    tenant: str | None = None,
    min_version: int = 0,
) -> tuple[PolicyBundle, str]:
    """Verify a signed bundle and return it with the id of the key that signed it.

    Order matters: signature over the exact bytes, then decoding, then expiry, tenant and
    rollback (`version` below `min_version`, the highest version ever trusted).

    Raises:
        BundleError: with `POLICY_BUNDLE_INVALID` or `POLICY_EXPIRED`.
    """
    try:
        payload, signer = verify_payload(signed, BUNDLE_PAYLOAD_TYPE, trusted)
    except DsseError as exc:
        raise BundleError(ErrorCode.POLICY_BUNDLE_INVALID, exc.reason, str(exc)) from None
    bundle = decode_bundle(payload)
    if bundle.expires_at <= now:
        raise BundleError(
            ErrorCode.POLICY_EXPIRED,
            "expired",
            f"bundle version {bundle.version} expired at {bundle.expires_at.isoformat()}",
        )
    if tenant is not None and bundle.tenant_id != tenant:
        raise BundleError(
            ErrorCode.POLICY_BUNDLE_INVALID,
            "tenant",
            f"bundle is for tenant {bundle.tenant_id!r}, this gate serves {tenant!r}",
        )
    if bundle.version < min_version:
        raise BundleError(
            ErrorCode.POLICY_BUNDLE_INVALID,
            "rollback",
            f"bundle version {bundle.version} is lower than the trusted version {min_version}",
        )
    return bundle, signer
