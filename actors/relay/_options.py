"""The relay's `[options]`, validated at start like every actor's (bus `validated_options`)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

__all__ = ("RelayOptions",)


class RelayOptions(BaseModel):
    """The relay's `[options]`."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    device_dir: str
    """Where `parley device init` wrote this deployment's device keys."""
    relay_dir: str
    """Where `parley share` and `parley shared add` keep shares and shared agents."""
    gateway_url: str
    """The gateway nats-server both relays reach; it sees only sealed frames."""
    gateway_nkey_seed_file: str | None = None
    """This relay's user on the gateway (`parley gateway-config` writes one per device)."""
    gateway_root: str = Field(default="parleygw", pattern=r"^[a-z0-9_-]{1,32}$")
    """The gateway's subject root and (upper-cased) stream name."""
    gateway_ack_wait_s: float = Field(default=30.0, gt=0)
    """How long a frame taken from the gateway may be in hand before it is given again: a
    relay killed mid-forward hands it to its next process after this."""
    max_frame_age_s: float = Field(default=7 * 24 * 3600.0, gt=0)
    """Frames older than this are refused: replay windows are kept longer (30 days), so
    no frame still accepted can outlive the window that would refuse it twice."""
