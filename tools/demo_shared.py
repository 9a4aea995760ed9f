"""`parley demo --shared`: seed 000 across two deployments and an untrusted gateway.

On this machine: Alice's deployment (gate, router, her local agent, relay) and Bob's (gate,
`byte-doc`, relay), each locked down, and the gateway between the relays; Bob shares
`byte-doc` with Alice's device (tools/_shared_deployments.py). The demo opens one
orchestrated session as the person at Alice's terminal, in full_auto, and prints its
timeline until the turn limit ends it; then what the gateway stored: each frame's size and
device ids, and a search of those frames and of the gateway's store on disk for every text
of the run (none is there: the frames are ciphertext). The gateway is locked down as
`parley gateway-config` writes it: each relay connects with its own device's credentials, and
the demo watches the frames as the gateway's operator. Exit 0 when the session reached its
turn limit and no text was found.
"""

from __future__ import annotations

from pathlib import Path
from typing import Final, TextIO

from nats.aio.msg import Msg

from actors.relay import frame_devices, gateway_stream
from bus import EmbeddedServer, scratch_directory
from bus._supervisor import GiveUp
from schemas import SessionEvent
from tools._shared_deployments import (
    BYTE_DOC_SCRIPT,
    GATEWAY_ROOT,
    LOCAL_SCRIPT,
    Deployment,
    SharedDeployments,
    shared_deployments,
)
from tools._shared_sessions import Refused, orchestrate
from tools.natsconf import GATEWAY_ADMIN, connect_gateway_operator
from tools.orchestrate import render_event

__all__ = ("BYTE_DOC_SCRIPT", "LOCAL_SCRIPT", "MAX_TURNS", "SHARED_OBJECTIVE", "run_shared_demo")

SHARED_OBJECTIVE: Final = "review this API for security issues"
MAX_TURNS: Final = 4


async def _session(alice: Deployment, out: TextIO) -> tuple[SessionEvent | None, list[str]]:
    """Open the session as the person at Alice's terminal and print its timeline."""
    texts = [SHARED_OBJECTIVE]
    end = None
    try:
        async for event in orchestrate(alice, SHARED_OBJECTIVE, "bob-byte-doc", MAX_TURNS):
            if event.event_type == "step_completed" and "message" in event.payload:
                texts.append(str(event.payload["message"]))
            line = render_event(event, MAX_TURNS)
            if line is not None:
                print(line, file=out, flush=True)
            end = event
    except TimeoutError:
        print("parley demo: the session went silent for 60 s", file=out)
        return None, texts
    except Refused as refused:
        print(f"parley demo: the session was {refused}", file=out)
        return None, texts
    return end, texts


async def _gateway_report(
    gateway: EmbeddedServer,
    operator: Path,
    frames: list[bytes],
    texts: list[str],
    sides: dict[str, str],
    out: TextIO,
) -> bool:
    """What the gateway stored, and whether any text of the run is in it (False if so)."""
    nc = await connect_gateway_operator(gateway.url, operator)
    try:
        info = await nc.jetstream().stream_info(gateway_stream(GATEWAY_ROOT).name or "")
    finally:
        await nc.close()
    print("\n── What the gateway stored ──", file=out)
    print(
        f"stream {info.config.name}: {info.state.last_seq} frame(s) stored in all, "
        f"{info.state.messages} still there (each is deleted once its relay took it)",
        file=out,
    )
    for number, frame in enumerate(frames, 1):
        sender, recipient = (f"{sides[d]} {d[:16]}…" for d in frame_devices(frame))
        print(f"  #{number:<2} {len(frame):>5} bytes  {sender} → {recipient}", file=out)
    files = [p for p in gateway.store_dir.rglob("*") if p.is_file() and p.suffix != ".conf"]
    stored = b"".join(p.read_bytes() for p in files)
    found = [t for t in texts if any(t.encode() in blob for blob in (*frames, stored))]
    print(
        f"searched {len(frames)} frame(s) ({sum(map(len, frames))} bytes) and the gateway's "
        f"store on disk ({len(stored)} bytes) for the run's {len(texts)} message texts: "
        + (f"FOUND {len(found)}: {found}" if found else "none found: ciphertext only"),
        file=out,
    )
    print("the gateway learned: frame sizes, timing and the two device ids", file=out)
    return not found


async def run_shared_demo(out: TextIO, *, keep: Path | None = None) -> int:
    """Run the shared-agent demo; return the exit code."""
    with scratch_directory("parley-demo-shared-") as scratch:
        try:
            async with shared_deployments(keep or Path(scratch), out) as running:
                return await _run(running, out)
        except* TimeoutError:
            print("parley demo --shared: not every actor was ready within 60 s", file=out)
        except* GiveUp as group:
            print(f"parley demo --shared: an actor kept failing: {group.exceptions[0]}", file=out)
    return 1


async def _run(running: SharedDeployments, out: TextIO) -> int:
    alice, bob, gateway = running.alice, running.bob, running.gateway
    print(
        f"Parley shared-agent demo: Alice's deployment at {alice.url}, Bob's at {bob.url}, "
        f"the gateway at {gateway.url}\nAlice's device {alice.keys.device_id[:16]}…, "
        f"Bob's {bob.keys.device_id[:16]}…; Bob shares byte-doc with Alice's device",
        file=out,
        flush=True,
    )
    frames: list[bytes] = []

    async def on_frame(msg: Msg) -> None:
        frames.append(msg.data)

    operator = running.gateway_seeds[GATEWAY_ADMIN]
    onlooker = await connect_gateway_operator(gateway.url, operator)
    try:
        await onlooker.subscribe(f"{GATEWAY_ROOT}.>", cb=on_frame)
        await onlooker.flush()
        print(f"\nyou → local, with bob-byte-doc (full_auto, ≤{MAX_TURNS} turns)", file=out)
        end, texts = await _session(alice, out)
        await onlooker.flush()
    finally:
        await onlooker.close()
    sides = {alice.keys.device_id: "alice", bob.keys.device_id: "bob"}
    clean = await _gateway_report(gateway, operator, frames, texts, sides, out)
    ok = end is not None and end.stop_reason == "max_turns" and clean
    print(f"\nparley demo --shared: {'done' if ok else 'FAILED'}", file=out)
    return 0 if ok else 1
