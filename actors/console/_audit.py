"""What the audit says about a signed-in person: their own profile's records, and the trace
tree of a session of theirs.

Who may see what. The audit stream is readable only by the audit reader (`audit-cli`, an
operator role): a person's own account may not read it at all. So the console reads it with
that role's credentials (its `audit_reader` option; without it, both views are unavailable)
and is the filter, deciding from the sign-in, never from the request's params:

- a person's records: the subject `parley.audit.<tenant>.person-<name>` only, the one their
  principal's records are stored under, so the server sends nothing else;
- a trace tree: only for a session of theirs (another's is SESSION_NOT_FOUND), and only the
  traces they started in it: the envelopes the console submitted for them there (each is a
  root, its trace id its own id). It shows every decision of those traces, whoever it was
  about (the router, the agents), because the person caused them; no other trace is read.

Pure parts: `record_json` and `trace_tree`; `AuditView` does the reading. A read that fails
says what failed, as whom and why (`AuditUnreadable`): the broker refusing the reader says
what it refused, a read with no answer says how long it waited.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Final

import msgspec
from nats.aio.client import Client as NATS
from nats.errors import Error as NatsError

from actors.auditor import CHECKPOINT_PROFILE
from actors.console._credentials import principal_settings
from bus import HistoryError, Settings, connect, jetstream, read_history
from schemas import AuditRecord, Namespace

__all__ = (
    "AUDIT_READER",
    "AuditUnreadable",
    "AuditView",
    "reason_of",
    "record_json",
    "trace_tree",
)

log = logging.getLogger("parley.console.audit")

AUDIT_READER: Final = "audit-cli"
_MAX_RECORDS: Final = 500
_READ_TIMEOUT_S: Final = 5.0
_decoder = msgspec.json.Decoder(AuditRecord)


def record_json(record: AuditRecord) -> dict[str, Any]:
    """The fields a person reads in a record (camelCase, as the rest of the API)."""
    return {
        "fact": record.fact,
        "profile": record.profile,
        "createdAt": record.created_at.isoformat(),
        "traceId": record.trace_id,
        "envelopeId": record.envelope_id,
        "causationId": record.causation_id,
        "requester": record.requester,
        "target": record.target,
        "task": record.task,
        "status": record.status,
        "decisionCode": record.decision_code,
        "failureReason": record.failure_reason,
        "hopCount": record.hop_count,
        "sessionId": record.session_id,
        "policyVersion": record.policy_version,
    }


def trace_tree(records: Iterable[AuditRecord]) -> list[dict[str, Any]]:
    """The decisions of some traces as a forest: each envelope once (an admitted envelope is
    recorded for its sender and its target; the sender's copy is kept), under the envelope
    that caused it, oldest first."""
    kept: dict[str, AuditRecord] = {}
    for record in records:
        if record.fact != "decision":
            continue
        found = kept.get(record.envelope_id)
        if found is None or (
            found.profile != found.requester and record.profile == record.requester
        ):
            kept[record.envelope_id] = record
    nodes = {
        envelope_id: {**record_json(record), "children": []}
        for envelope_id, record in sorted(
            kept.items(), key=lambda item: (item[1].created_at, item[1].chain_index)
        )
    }
    roots = []
    for node in nodes.values():
        parent = nodes.get(node["causationId"])
        if parent is not None and parent is not node:
            parent["children"].append(node)
        else:
            roots.append(node)
    return roots


class AuditUnreadable(Exception):
    """A read of the audit failed; the message says what was read, as whom, and why."""


def reason_of(exc: BaseException) -> str:
    """What an exception says, never nothing: a `TimeoutError` (or any other) raised without
    a message is named by its type."""
    return str(exc).strip() or f"{type(exc).__name__} (raised without a message)"


class AuditView:
    """A read-only connection as the audit reader, and the two reads the console makes."""

    def __init__(self, settings_file: Path, nats_url: str, tenant: str) -> None:
        self.settings: Settings = principal_settings(settings_file, nats_url)
        self.ns = Namespace(self.settings.namespace)
        self.tenant = tenant
        self._nc: NATS | None = None
        self._refused: str | None = None
        """The last permission violation the broker reported on this connection."""

    async def open(self) -> None:
        self._nc = await connect(
            self.settings, AUDIT_READER, reconnect_forever=True, on_refused=self._on_refused
        )

    def _on_refused(self, text: str) -> None:
        self._refused = text

    async def close(self) -> None:
        if self._nc is not None:
            await self._nc.close()
            self._nc = None

    async def _read(self, subject: str) -> list[AuditRecord]:
        """The records stored under `subject`.

        Raises:
            AuditUnreadable: not connected, refused by the broker, refused by the stream, or
                no answer within `_READ_TIMEOUT_S`; the message says which.
        """
        stream = self.ns.stream("audit")
        what = f"{AUDIT_READER} reading {stream} ({subject})"
        if self._nc is None or not self._nc.is_connected:
            raise AuditUnreadable(f"{what}: the audit reader is not connected to the broker")
        js = jetstream(self._nc, self.settings)
        records = []
        self._refused = None
        try:
            history = read_history(js, stream, subject=subject, timeout=_READ_TIMEOUT_S)
            async for message in history:
                if message.subject.endswith("." + CHECKPOINT_PROFILE):
                    continue
                try:
                    records.append(_decoder.decode(message.data))
                except msgspec.DecodeError:
                    continue  # `parley audit verify` reports it
        except TimeoutError:
            if self._refused is not None:
                raise AuditUnreadable(f"{what}: the broker refused it: {self._refused}") from None
            raise AuditUnreadable(f"{what}: no answer within {_READ_TIMEOUT_S:g} s") from None
        except (HistoryError, ConnectionError, NatsError) as exc:
            raise AuditUnreadable(f"{what}: {reason_of(exc)}") from None
        return records

    async def person_records(self, principal: str) -> list[dict[str, Any]]:
        """The principal's own records, newest first (at most the last 500)."""
        records = await self._read(self.ns.audit(self.tenant, principal))
        return [record_json(r) for r in reversed(records[-_MAX_RECORDS:])]

    async def traces(self, trace_ids: set[str]) -> list[dict[str, Any]]:
        """The trees of the traces named (and of no other)."""
        if not trace_ids:
            return []
        records = await self._read(f"{self.ns.root}.audit.{self.tenant}.*")
        return trace_tree(r for r in records if r.trace_id in trace_ids)
