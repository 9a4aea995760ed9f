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


def test_sign_refuses_a_scope_naming_an_approval_rule_the_bundle_lacks(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Its held requests would wait the default time under no rule's title (a requirements
    walk signed one); the rule's id, the scope and where it is are named."""
    assert main(["policy", "keygen", "--out", str(tmp_path)]) == 0
    dangling = tmp_path / "dangling.toml"
    dangling.write_text(
        'schema_version = "1.0"\nversion = 1\ntenant_id = "t"\n'
        'expires_at = "2099-01-01T00:00:00Z"\n'
        "[profiles.gpt]\n"
        'capabilities = ["File.Delete"]\n'
        "[[profiles.gpt.scopes]]\n"
        'name = "File.Delete"\nrequires_approval = true\napproval_rule_id = "no_such_rule"\n'
    )
    key, out = str(tmp_path / "policy.key"), str(tmp_path / "s")
    assert main(["policy", "sign", "--key", key, str(dangling), "-o", out]) == 2
    said = capsys.readouterr().err
    assert "profile gpt's File.Delete scope names approval rule 'no_such_rule'" in said, said
    assert not (tmp_path / "s").exists()


def test_sign_finds_the_shipped_bundle_from_any_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """docs/console.md signs `deploy/policy/demo.toml` in a directory of the person's own,
    where `parley up deploy/topologies/console.toml` finds its topology beside Parley."""
    monkeypatch.chdir(tmp_path)
    assert main(["policy", "keygen", "--out", "keys"]) == 0
    signed = tmp_path / "demo.signed.json"
    sign = ["policy", "sign", "--key", "keys/policy.key", "deploy/policy/demo.toml"]
    assert main([*sign, "-o", str(signed)]) == 0
    assert signed.exists()
