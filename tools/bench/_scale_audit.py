"""The `scale` row's audit figure: `parley audit verify` over a long chain, streaming.

N records are written into a real audit stream the way the auditor chains them (one record
as the auditor makes it from a gate decision, then for each index: a fresh id, the chain
index and the previous hash, encoded and sealed; a signed checkpoint after every 1,000
records, the auditor's default, and after the last), published straight to the stream rather
than through a gate and an auditor, which would take hours for a million. Then the real
command, `parley audit verify --json`, runs as a child process against that stream, and is
judged by two figures:

- records/s: records verified over the child's whole wall time from spawn to exit (its
  interpreter start, imports and connection included, so the figure is a floor);
- peak resident memory: the child's own `ru_maxrss`, from `os.wait4` on its pid (the whole
  process: interpreter, libraries and the verify).

A verify that does not report every record written, in an intact chain, fails the row
whatever its speed.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NamedTuple

import msgspec
import nats
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat
from nats.aio.client import Client as NATS

from actors.auditor import (
    CHECKPOINT_PROFILE,
    GENESIS,
    Checkpoint,
    FactSource,
    Redactor,
    records_for,
    seal,
    sign_checkpoint,
)
from bus import (
    MSG_ID,
    EmbeddedServer,
    Quotas,
    owned_argv,
    provision,
    python_command,
    scratch_directory,
)
from schemas import AuditRecord, Namespace, derive_id, encode, utc_now
from tools.bench._audit import _decision

__all__ = (
    "AIM_MAX_RSS_MB",
    "AIM_RECORDS_PER_S",
    "Stored",
    "audit_verify_scale",
    "chain_messages",
    "write_chain",
)

AIM_RECORDS_PER_S = 20_000.0
AIM_MAX_RSS_MB = 200.0
_CHECKPOINT_EVERY = 1000
_MIB = 1024 * 1024
_TENANT = "bench"
_CHILD_TIMEOUT_S = 1800.0
_RUN_VERIFY = "import sys; from tools.cli import main; sys.exit(main(sys.argv[1:]))"


def _template() -> tuple[str, AuditRecord]:
    """One record as the auditor makes it from a refused gate decision, and its subject."""
    decision = _decision(0)
    source = FactSource("PARLEY_EVENTS", 1, decision.trace_id, 0, decision.id, "bench", utc_now())
    (record,) = records_for(decision, source, tenant=_TENANT, redactor=Redactor(key=b"bench"))
    return record.profile, record


def _as_sealed(index: int, stored: bytes) -> bytes:
    return stored


class Stored(NamedTuple):
    """One message of a chain as it is published: where, what, and under which id."""

    subject: str
    data: bytes
    msg_id: str
    checkpoint: bool


def chain_messages(
    ns: Namespace,
    count: int,
    key: Ed25519PrivateKey,
    *,
    stored_as: Callable[[int, bytes], bytes] = _as_sealed,
) -> Iterator[Stored]:
    """`count` records chained as the auditor chains them, with its checkpoints, one by one.

    `stored_as(index, sealed bytes)` is what is stored for each record: the sealed bytes, or
    a test's tampering with them after the chain and its checkpoints were computed.
    """
    profile, template = _template()
    subject = ns.audit(_TENANT, profile)
    checkpoints = ns.audit(_TENANT, CHECKPOINT_PROFILE)
    head, seq = GENESIS, 0
    for index in range(1, count + 1):
        record_id = derive_id(f"bench:{index}", "audit")
        chained = msgspec.structs.replace(
            template, id=record_id, source_seq=index, chain_index=index, prev_hash=head
        )
        sealed, head = seal(encode(chained))
        seq += 1
        yield Stored(subject, stored_as(index, sealed), record_id, False)
        if index % _CHECKPOINT_EVERY == 0 or index == count:
            seq += 1
            claim = Checkpoint(
                tenant=_TENANT, count=index, last_seq=seq - 1, head_hash=head, at=utc_now()
            )
            yield Stored(checkpoints, sign_checkpoint(claim, key), f"checkpoint:{index}", True)


async def write_chain(
    nc: NATS,
    ns: Namespace,
    count: int,
    key: Ed25519PrivateKey,
    *,
    stored_as: Callable[[int, bytes], bytes] = _as_sealed,
) -> None:
    """Append `chain_messages(...)` to `ns`'s audit stream.

    Records go out as plain publishes; each checkpoint waits for its acknowledgement, which
    (on one connection, in order) also says every record before it was stored, so no more
    than a checkpoint period is ever in flight. A record the server dropped would break the
    chain, and the verify reports it.
    """
    js = nc.jetstream()
    for message in chain_messages(ns, count, key, stored_as=stored_as):
        headers = {MSG_ID: message.msg_id}
        if message.checkpoint:
            await js.publish(message.subject, message.data, headers=headers)
        else:
            await nc.publish(message.subject, message.data, headers=headers)


_Outcome = tuple[int, str, float, float, float]
"""A child's exit code, output, wall seconds, CPU seconds and peak RSS in MB."""


def _wait_for(child: subprocess.Popen[bytes], started: float) -> _Outcome:
    """Read the child to its end, then reap it with its own resource usage."""
    assert child.stdout is not None  # noqa: S101 - started with a pipe
    with child.stdout as stdout:
        output = stdout.read().decode(errors="replace")  # until the child closes it
    _, status, usage = os.wait4(child.pid, 0)  # this child's own rusage, not every child's
    wall = time.perf_counter() - started
    child.returncode = os.waitstatus_to_exitcode(status)
    cpu = usage.ru_utime + usage.ru_stime
    return child.returncode, output, wall, cpu, usage.ru_maxrss / 1024  # Linux: KiB


def _spawn(argv: list[str], cwd: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(  # dies with the benchmark, however it ends
        owned_argv(argv), cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )


async def _run_verify(argv: list[str], cwd: Path) -> _Outcome:
    """Run `argv` as a child; killed (by its pid) if it outlasts the bound or the bench stops."""
    started = time.perf_counter()
    child = _spawn(argv, cwd)  # returns at once; the waiting is done in a thread
    waiting = asyncio.ensure_future(asyncio.to_thread(_wait_for, child, started))
    try:
        return await asyncio.wait_for(asyncio.shield(waiting), _CHILD_TIMEOUT_S)
    except BaseException:
        child.kill()
        await asyncio.wait({waiting})  # reaped by the thread
        raise


async def audit_verify_scale(
    count: int, *, stored_as: Callable[[int, bytes], bytes] = _as_sealed
) -> dict[str, Any]:
    """Write `count` records, verify them with the real command; figures, aims, verdicts.

    `stored_as` as for `chain_messages` (a tampered chain must fail the row).
    """
    key = Ed25519PrivateKey.generate()
    ns = Namespace("benchscale")
    with (
        scratch_directory("parley-bench-") as work,
        EmbeddedServer(Path(work) / "store", sync_always=False) as server,
    ):
        nc = await nats.connect(server.url)
        try:
            # A million records of this size outgrow the audit stream's default quota (1 GiB).
            quotas = Quotas(stream_bytes={"audit": max(1024, count * 2048 // _MIB + 1) * _MIB})
            await provision(nc.jetstream(), ns, quotas=quotas)
            began = time.perf_counter()
            await write_chain(nc, ns, count, key, stored_as=stored_as)
            written_s = time.perf_counter() - began
        finally:
            await nc.close()
        public = Path(work) / "audit.pub"
        public.write_bytes(
            key.public_key().public_bytes(Encoding.PEM, PublicFormat.SubjectPublicKeyInfo)
        )
        config = Path(work) / "verify.toml"
        config.write_text(f'nats_url = "{server.url}"\nnamespace = "{ns.root}"\n')
        argv = python_command("-c", _RUN_VERIFY, "audit", "verify", "--config", str(config))
        argv += ["--key", str(public), "--strict", "--json"]
        code, output, wall, cpu, rss_mb = await _run_verify(argv, Path(work))
    report = _report_of(output)
    verified = code == 0 and report.get("ok") is True and report.get("records") == count
    rate = count / wall if verified else 0.0
    return {
        "records": count,
        "write_s": written_s,
        "verify_wall_s": wall,
        "records_per_s": rate,
        "verify_cpu_us_per_record": cpu / count * 1e6,
        "peak_rss_mb": rss_mb,
        "chain_verified": verified,
        "verify_output": "" if verified else output[-2000:],
        "aims": {"records_per_s": AIM_RECORDS_PER_S, "peak_rss_mb": AIM_MAX_RSS_MB},
        "pass": {
            "records_per_s": verified and rate >= AIM_RECORDS_PER_S,
            "peak_rss_mb": verified and rss_mb < AIM_MAX_RSS_MB,
        },
        "measured": "child process `parley audit verify --strict --json`: wall time from "
        "spawn to exit; ru_maxrss of that process from os.wait4",
    }


def _report_of(output: str) -> dict[str, Any]:
    """The verify's JSON report (its last line), or {} when it printed none."""
    for line in reversed(output.strip().splitlines()):
        try:
            found = json.loads(line)
        except ValueError:
            continue
        if isinstance(found, dict):
            return found
    return {}
