"""The keys a KV bucket holds, as the server counts them.

nats-py's `KeyValue.keys()` lists keys through a watcher that can say "that was all" before
entries already on their way to it were read (nats-io/nats.py#842), and then raises
`NoKeysError` for a bucket that has keys: a test that asked it was flaky (CI saw it on the
tool runs' bucket). The stream's own count of its subjects has no such race.
"""

from __future__ import annotations

from nats.js import JetStreamContext

__all__ = ("stored_keys",)


async def stored_keys(js: JetStreamContext, bucket: str, pattern: str = ">") -> list[str]:
    """The keys of `bucket` matching `pattern` (a subject filter) with anything stored: a
    value, or the marker of a deleted key. Sorted."""
    prefix = f"$KV.{bucket}."
    info = await js.stream_info(f"KV_{bucket}", subjects_filter=f"{prefix}{pattern}")
    return sorted(subject.removeprefix(prefix) for subject in info.state.subjects or {})
