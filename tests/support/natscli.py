"""The NATS and JetStream API requests the `nats` CLI makes for a command, made with nats-py.

The Go CLI cannot be installed where the tests run, so each command it is documented for
(docs/nats-cli.md) is replayed here as the requests its source makes (natscli on jsm.go and
nats.go's `jetstream` package), with the context file `parley up` writes:

- `account info`: `$JS.API.INFO`;
- `stream ls`: `STREAM.LIST` (jsm.go pages it from offset 0);
- `stream info S`: `STREAM.INFO.S`;
- `stream get S SEQ` and `stream get S --last-for SUBJECT`: `STREAM.INFO.S` (it loads the
  stream first), then `STREAM.MSG.GET.S` with `seq` or `last_by_subj` (jsm.go `ReadMessage`,
  `ReadLastMessageForSubject`);
- `consumer ls S`: `CONSUMER.LIST.S`; `consumer info S C`: `CONSUMER.INFO.S.C`;
- `kv ls`: `STREAM.LIST` filtered to `$KV.*.>` (nats.go `KeyValueStores`);
- `kv info B`: `STREAM.INFO.KV_B`;
- `kv get B K`: `STREAM.INFO.KV_B` (binding the bucket), then, as the bucket allows direct
  gets, `DIRECT.GET.KV_B.$KV.B.K` with no body, else `STREAM.MSG.GET.KV_B` with `last_by_subj`;
- `sub SUBJECT`: a plain subscription.
"""

from __future__ import annotations

import base64
import json
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import nats
from nats.aio.client import Client as NATS
from nats.aio.subscription import Subscription

__all__ = ("CliRefused", "NatsCli", "operator_lines")

OPERATOR_FENCE = "```sh operator"


class CliRefused(Exception):
    """The server answered a request with an error, or a direct get with a status."""


def operator_lines(doc: Path) -> list[str]:
    """The lines of the doc's block fenced as ```` ```sh operator ````."""
    lines = doc.read_text().splitlines()
    start = lines.index(OPERATOR_FENCE) + 1
    end = lines.index("```", start)
    return [line for line in lines[start:end] if line.strip()]


@dataclass
class NatsCli:
    """One connection made from a nats CLI context, and the requests its commands make."""

    nc: NATS
    api: str

    @classmethod
    async def from_context(cls, context: dict[str, str]) -> NatsCli:
        """Connect as a context file says: url, nkey seed file, inbox prefix, API prefix."""
        nc = await nats.connect(
            context["url"],
            nkeys_seed=context["nkey"],
            inbox_prefix=context["inbox_prefix"].encode(),
            allow_reconnect=False,
        )
        return cls(nc, context.get("jetstream_api_prefix") or "$JS.API")

    async def _api(self, tail: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        payload = b"" if body is None else json.dumps(body).encode()
        reply = await self.nc.request(f"{self.api}.{tail}", payload, timeout=2)
        answer: dict[str, Any] = json.loads(reply.data)
        if "error" in answer:
            raise CliRefused(f"{tail}: {answer['error']}")
        return answer

    async def _message(self, stream: str, request: dict[str, Any]) -> bytes:
        await self._api(f"STREAM.INFO.{stream}")
        answer = await self._api(f"STREAM.MSG.GET.{stream}", request)
        return base64.b64decode(answer["message"].get("data", ""))

    async def _kv_get(self, bucket: str, key: str) -> bytes:
        info = await self._api(f"STREAM.INFO.KV_{bucket}")
        subject = f"$KV.{bucket}.{key}"
        if not info["config"].get("allow_direct"):
            return await self._message(f"KV_{bucket}", {"last_by_subj": subject})
        reply = await self.nc.request(
            f"{self.api}.DIRECT.GET.KV_{bucket}.{subject}", b"", timeout=2
        )
        status = (reply.headers or {}).get("Status")
        if status is not None:
            raise CliRefused(f"direct get {subject}: {status}")
        return reply.data

    async def run(self, argv: list[str]) -> str | bytes | Subscription:
        """The requests of `nats ARGV…`: the answer as text or data, or the subscription."""
        match argv:
            case ["account", "info"]:
                return json.dumps(await self._api("INFO"))
            case ["stream", "ls"]:
                return json.dumps(await self._api("STREAM.LIST", {"offset": 0}))
            case ["stream", "info", stream]:
                return json.dumps(await self._api(f"STREAM.INFO.{stream}"))
            case ["stream", "get", stream, "--last-for", subject]:
                return await self._message(stream, {"last_by_subj": subject})
            case ["stream", "get", stream, sequence]:
                return await self._message(stream, {"seq": int(sequence)})
            case ["consumer", "ls", stream]:
                return json.dumps(await self._api(f"CONSUMER.LIST.{stream}", {"offset": 0}))
            case ["consumer", "info", stream, consumer]:
                return json.dumps(await self._api(f"CONSUMER.INFO.{stream}.{consumer}"))
            case ["kv", "ls"]:
                return json.dumps(
                    await self._api("STREAM.LIST", {"offset": 0, "subject": "$KV.*.>"})
                )
            case ["kv", "info", bucket]:
                return json.dumps(await self._api(f"STREAM.INFO.KV_{bucket}"))
            case ["kv", "get", bucket, key]:
                return await self._kv_get(bucket, key)
            case ["sub", subject]:
                return await self.nc.subscribe(subject)
        raise ValueError(f"no requests known for `nats {shlex.join(argv)}`")
