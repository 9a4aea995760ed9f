"""`parley policy keygen|sign|verify|show`: the policy signer's tools."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tomllib
from pathlib import Path

import msgspec
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import (
    Encoding,
    NoEncryption,
    PrivateFormat,
    PublicFormat,
)
from nats.errors import NoServersError

from actors.gate import BUNDLE_KEY
from bus import (
    ConfigError,
    KeyFileError,
    jetstream,
    load_private_key,
    load_public_key,
    provision,
    shipped,
)
from schemas import (
    BUNDLE_PAYLOAD_TYPE,
    BundleError,
    DsseEnvelope,
    Namespace,
    PolicyBundle,
    dangling_approval_rules,
    decode_bundle,
    key_id,
    sign_payload,
    utc_now,
    verify_bundle,
)
from tools._command_connection import connect_local
from tools._errors import report_failure
from tools._local import local_settings
from tools.natsconf._permissions import POLICY_SIGNER

__all__ = ("add_policy_commands",)


class PolicyToolError(Exception):
    """A key or file the tool cannot use."""


def _load_private(path: Path) -> Ed25519PrivateKey:
    try:
        return load_private_key(path)
    except KeyFileError as exc:
        raise PolicyToolError(str(exc)) from None


def _load_public(path: Path) -> Ed25519PublicKey:
    try:
        return load_public_key(path)
    except KeyFileError as exc:
        raise PolicyToolError(str(exc)) from None


def _bundle_bytes(path: Path) -> bytes:
    """The bytes to sign: a JSON file as it is, or a TOML source turned into JSON. A shipped
    bundle (`deploy/policy/demo.toml`) is found from any directory, as `parley up` finds its
    topology (bus/_shipped.py)."""
    path = shipped(path)
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise PolicyToolError(f"cannot read {path}: {exc}") from None
    if path.suffix == ".toml":
        try:
            return msgspec.json.encode(tomllib.loads(raw.decode()))
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
            raise PolicyToolError(f"{path} is not valid TOML: {exc}") from None
    return raw


def _summary(bundle: PolicyBundle, signer: str) -> str:
    profiles = ", ".join(sorted(bundle.profiles)) or "none"
    return (
        f"bundle version {bundle.version} ({bundle.label or 'no label'}) for tenant "
        f"{bundle.tenant_id}, signed by {signer}, expires {bundle.expires_at.isoformat()}; "
        f"profiles: {profiles}"
    )


def _keygen(args: argparse.Namespace) -> int:
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    private, public = out / "policy.key", out / "policy.pub"
    if (private.exists() or public.exists()) and not args.force:
        raise PolicyToolError(f"{private} or {public} exists; pass --force to replace them")
    key = Ed25519PrivateKey.generate()
    private.write_bytes(key.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, NoEncryption()))
    private.chmod(0o600)
    public.write_bytes(
        key.public_key().public_bytes(Encoding.PEM, PublicFormat.SubjectPublicKeyInfo)
    )
    print(f"wrote {private} and {public} (key id {key_id(key.public_key())})")
    return 0


def _sign(args: argparse.Namespace) -> int:
    key = _load_private(args.key)
    payload = _bundle_bytes(args.bundle)
    try:
        bundle = decode_bundle(payload)  # never sign something no gate could read
    except BundleError as exc:
        raise PolicyToolError(f"{args.bundle} is not a valid bundle: {exc}") from None
    dangling = dangling_approval_rules(bundle)
    if dangling:  # its held requests would wait the default time under no rule's title
        raise PolicyToolError(
            f"{args.bundle} is not a valid bundle: {'; '.join(dangling)}, which approval_rules "
            "does not define"
        )
    args.output.write_bytes(sign_payload(payload, BUNDLE_PAYLOAD_TYPE, key))
    print(f"signed {args.output}: {_summary(bundle, key_id(key.public_key()))}")
    return 0


def _verify(args: argparse.Namespace) -> int:
    public = _load_public(args.pub)
    try:
        bundle, signer = verify_bundle(
            args.signed.read_bytes(), {key_id(public): public}, now=utc_now(), tenant=args.tenant
        )
    except OSError as exc:
        raise PolicyToolError(f"cannot read {args.signed}: {exc}") from None
    except BundleError as exc:
        print(f"refused ({exc.code.value}, {exc.reason}): {exc}", file=sys.stderr)
        return 1
    print(f"valid: {_summary(bundle, signer)}")
    return 0


def _show(args: argparse.Namespace) -> int:
    try:
        envelope = msgspec.json.decode(args.signed.read_bytes(), type=DsseEnvelope)
        payload = msgspec.json.decode(msgspec.convert(envelope.payload, bytes))
    except (OSError, msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise PolicyToolError(f"cannot read {args.signed}: {exc}") from None
    signers = ", ".join(s.keyid for s in envelope.signatures)
    print(f"# {envelope.payloadType}, signatures by {signers} (not verified: use `verify`)")
    print(json.dumps(payload, indent=2, sort_keys=True))
    return 0


async def _publish_bundle(signed: bytes, config: Path | None) -> int:
    settings = local_settings(config, POLICY_SIGNER)
    nc = await connect_local(settings, POLICY_SIGNER)
    try:
        js = jetstream(nc, settings)
        namespace = Namespace(settings.namespace)
        if settings.provision:
            await provision(js, namespace, max_msg_size=settings.max_payload)
        kv = await js.key_value(namespace.bucket("policy"))
        return int(await kv.put(BUNDLE_KEY, signed))
    finally:
        await nc.close()


def _publish(args: argparse.Namespace) -> int:
    try:
        signed = args.signed.read_bytes()
    except OSError as exc:
        raise PolicyToolError(f"cannot read {args.signed}: {exc}") from None
    try:
        envelope = msgspec.json.decode(signed, type=DsseEnvelope)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise PolicyToolError(f"{args.signed} is not a signed bundle: {exc}") from None
    if envelope.payloadType != BUNDLE_PAYLOAD_TYPE:
        raise PolicyToolError(f"{args.signed} holds {envelope.payloadType}, not a policy bundle")
    try:
        revision = asyncio.run(_publish_bundle(signed, args.config))
    except (ConfigError, OSError, NoServersError) as exc:
        raise PolicyToolError(f"cannot publish: {exc}") from None
    print(f"published {args.signed} as revision {revision}; gates verify it before using it")
    return 0


def _run(handler: argparse.Namespace) -> int:
    try:
        code: int = handler.policy_func(handler)
    except PolicyToolError as exc:
        return report_failure("policy", exc, 2)
    return code


def add_policy_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register `parley policy …` on the main parser."""
    policy = commands.add_parser("policy", help="create, sign, verify and show policy bundles")
    policy.set_defaults(func=_run)
    sub = policy.add_subparsers(dest="policy_command", required=True)

    keygen = sub.add_parser("keygen", help="write DIR/policy.key and DIR/policy.pub")
    keygen.add_argument("--out", type=Path, required=True, help="the directory for the key pair")
    keygen.add_argument("--force", action="store_true", help="replace existing keys")
    keygen.set_defaults(policy_func=_keygen)

    sign = sub.add_parser("sign", help="sign a bundle (JSON, or a TOML source)")
    sign.add_argument("--key", type=Path, required=True, help="the private key (policy.key)")
    sign.add_argument("bundle", type=Path)
    sign.add_argument("-o", "--output", type=Path, required=True, help="the signed bundle to write")
    sign.set_defaults(policy_func=_sign)

    verify = sub.add_parser("verify", help="check a signed bundle; exit 0 and a summary")
    verify.add_argument("--pub", type=Path, required=True, help="the public key (policy.pub)")
    verify.add_argument("--tenant", help="also require this tenant")
    verify.add_argument("signed", type=Path)
    verify.set_defaults(policy_func=_verify)

    publish = sub.add_parser(
        "publish", help="put a signed bundle where the gates load it (NATS_URL, PARLEY_*)"
    )
    publish.add_argument("signed", type=Path)
    publish.add_argument(
        "--config",
        type=Path,
        help="the policy signer's settings file (`parley nats-config` writes "
        "actors/policy-signer.toml); default: the one `parley up` wrote here",
    )
    publish.set_defaults(policy_func=_publish)

    show = sub.add_parser("show", help="print a signed bundle's contents (without verifying)")
    show.add_argument("signed", type=Path)
    show.set_defaults(policy_func=_show)
