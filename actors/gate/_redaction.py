"""Redacting delegations, and the deployment secret that keys the redaction markers.

A marker `[REDACTED:phone:3f9a1c]` carries a short HMAC of what it hides, so equal secrets get
equal markers. Under a key anyone knows (the old public default), a reader of a redacted
delegation can confirm a guess at a low-entropy value (a phone number, a dictionary password)
by computing the marker himself; under a deployment secret he cannot.

Where the key comes from, first found wins:

1. `options.redaction_key_file`: a file holding the secret (at least 32 bytes; generate one
   with `head -c 32 /dev/urandom > redaction.key`). Every replica reads the same file, so
   markers agree across replicas and restarts.
2. The gate's own NATS credential (`nkey_seed_file` or `creds_file`, which `parley nats-config`
   writes): a secret every gate replica already shares, put through a labelled hash so the
   marker key reveals nothing of it.
3. Neither: a random key for this process, with a warning. Markers then correlate only within
   one process; never the public default.
"""

from __future__ import annotations

import hashlib
import logging
import secrets
from pathlib import Path

from msgspec import structs

from bus import ConfigError, Settings
from schemas import AnyEnvelope, DelegationRequest, redact

__all__ = ("MIN_KEY_BYTES", "redacted", "redaction_key")

log = logging.getLogger("parley.actors.gate")

MIN_KEY_BYTES = 32
_LABEL = b"parley-gate-redaction-key\x00"


def redaction_key(key_file: str | None, settings: Settings) -> bytes:
    """The HMAC key of this gate's redaction markers (see the module docstring).

    Raises:
        ConfigError: `redaction_key_file` is set but unreadable or shorter than 32 bytes.
    """
    if key_file is not None:
        path = Path(key_file)
        try:
            key = path.read_bytes().strip()
        except OSError as exc:
            raise ConfigError(
                f"gate options.redaction_key_file: cannot read {path}: {exc}"
            ) from None
        if len(key) < MIN_KEY_BYTES:
            raise ConfigError(
                f"gate options.redaction_key_file: {path} holds {len(key)} bytes, "
                f"the minimum is {MIN_KEY_BYTES}"
            )
        return key
    for credential in (settings.nkey_seed_file, settings.creds_file):
        if credential is None:
            continue
        try:
            return hashlib.sha256(_LABEL + Path(credential).read_bytes()).digest()
        except OSError as exc:  # the connection will say so too; fall through to a random key
            log.warning("cannot read the gate's credential", extra={"error": str(exc)})
    log.warning(
        "redaction markers keyed by a random key of this process: set options.redaction_key_file "
        "so that every replica's markers agree"
    )
    return secrets.token_bytes(MIN_KEY_BYTES)


def redacted(envelope: AnyEnvelope, redact_pii: bool, key: bytes) -> AnyEnvelope | None:
    """A copy of a delegation with secrets and PII redacted, when its sender's profile asks
    (seed 003 security 3), markers keyed by the deployment's `key`; None when nothing is to
    be redacted."""
    if not (redact_pii and isinstance(envelope, DelegationRequest)):
        return None
    return structs.replace(
        envelope,
        objective=redact(envelope.objective, pii=True, key=key),
        input=redact(envelope.input, pii=True, key=key),
        handoff_data=structs.replace(
            envelope.handoff_data,
            facts=tuple(redact(fact, pii=True, key=key) for fact in envelope.handoff_data.facts),
        ),
    )
