"""`parley bench`: Parley's paths against raw nats-py doing the same work, in the same run.

Public face: `main`, the command.

Inside: `_command` (rows, rounds and the table), `_gate` (the gate against a raw relay, and
`decide()` alone), `_collab` (collaboration rounds), `_latency` (one `say` at a time after
idle gaps, against `_rawpath`, the same hops in raw nats-py), `_system` (the demo's processes
the collaboration and latency rows run), `_relay` (the shared-agent relay against
`_rawrelay`, a raw nats-py relay doing the same sealing), `_audit` (the auditor's appends),
`_publish` (one answer per stored message against atomic and fast batches), `_toolcall` (a
4 KiB File.Read through the gate and the tool runtime against `_rawtools`, raw nats-py
request/reply and the same stores made with nats-py alone),
`_kit` (what the rows share: ack counting, percentiles) and `_table` (the printed tables).
"""

from tools.bench._command import main

__all__ = ("main",)
