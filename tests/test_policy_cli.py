"""`parley policy keygen|sign|verify|show` on the demo bundle source."""

from __future__ import annotations

from pathlib import Path

import pytest

from tools.cli import main

DEMO = Path(__file__).resolve().parents[1] / "deploy" / "policy" / "demo.toml"


def test_keygen_sign_verify_show(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    keys, other = tmp_path / "keys", tmp_path / "other"
    assert main(["policy", "keygen", "--out", str(keys)]) == 0
    assert main(["policy", "keygen", "--out", str(other)]) == 0
    assert (keys / "policy.key").stat().st_mode & 0o077 == 0, "the private key is private"
    signed = tmp_path / "demo.signed.json"
    assert (
        main(["policy", "sign", "--key", str(keys / "policy.key"), str(DEMO), "-o", str(signed)])
        == 0
    )
    capsys.readouterr()

    assert main(["policy", "verify", "--pub", str(keys / "policy.pub"), str(signed)]) == 0
    out = capsys.readouterr().out
    assert "valid: bundle version 1 (demo-1) for tenant demo" in out
    profiles = (
        "claude, cli, coder, gpt, llm, local, person-alice, person-bob, planner, researcher, "
        "reviewer, router, tools"
    )
    assert f"profiles: {profiles}\n" in out

    assert main(["policy", "verify", "--pub", str(other / "policy.pub"), str(signed)]) == 1
    assert "refused (POLICY_BUNDLE_INVALID, unknown_key)" in capsys.readouterr().err

    assert (
        main(["policy", "verify", "--pub", str(keys / "policy.pub"), "--tenant", "x", str(signed)])
        == 1
    )
    assert "tenant" in capsys.readouterr().err

    assert main(["policy", "show", str(signed)]) == 0
    assert '"tenant_id": "demo"' in capsys.readouterr().out


def test_sign_refuses_an_invalid_bundle(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["policy", "keygen", "--out", str(tmp_path)]) == 0
    bad = tmp_path / "bad.toml"
    bad.write_text('schema_version = "1.0"\nversion = 1\ntenant_id = "t"\n')  # no expires_at
    code = main(
        [
            "policy",
            "sign",
            "--key",
            str(tmp_path / "policy.key"),
            str(bad),
            "-o",
            str(tmp_path / "s"),
        ]
    )
    assert code == 2
    assert "expires_at" in capsys.readouterr().err
    assert not (tmp_path / "s").exists()
    assert main(["policy", "keygen", "--out", str(tmp_path)]) == 2, (
        "keys are never overwritten silently"
    )
