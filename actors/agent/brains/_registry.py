"""Which brain class answers for which backend name."""

from __future__ import annotations

from typing import assert_never

from actors.agent._profile import (
    A2aBrainConfig,
    AgentProfile,
    AnthropicBrainConfig,
    GatewayBrainConfig,
    OpenAIBrainConfig,
    ScriptedBrainConfig,
    SubprocessBrainConfig,
)
from actors.agent.brains._anthropic import AnthropicBrain
from actors.agent.brains._gateway import gateway_brain
from actors.agent.brains._openai import OpenAIBrain
from actors.agent.brains._protocol import Brain
from actors.agent.brains._scripted import ScriptedBrain
from actors.agent.brains._subprocess import SubprocessBrain

__all__ = ("make_brain",)


def make_brain(profile: AgentProfile) -> Brain:
    """The brain a profile names, built (not yet started) from its `[brain]` settings."""
    config = profile.brain
    if isinstance(config, ScriptedBrainConfig):
        return ScriptedBrain(profile, config)
    if isinstance(config, SubprocessBrainConfig):
        return SubprocessBrain(profile, config)
    if isinstance(config, OpenAIBrainConfig):
        return OpenAIBrain(profile, config)
    if isinstance(config, AnthropicBrainConfig):
        return AnthropicBrain(profile, config)
    if isinstance(config, GatewayBrainConfig):
        return gateway_brain(profile, config)
    if isinstance(config, A2aBrainConfig):
        # Imported only here: the A2A SDK costs every process that loads it over a second.
        from actors.agent.brains._a2a import A2aBrain

        return A2aBrain(profile, config)
    assert_never(config)
