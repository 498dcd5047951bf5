"""The secret scan. Secret-like test strings are assembled at run time so this file holds none."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from trm.errors import TRMError
from trm.ops.secrets import ALLOWLIST, read_allowlist, scan_repo, scan_text

ROOT = Path(__file__).resolve().parents[1]
HEX40 = "3f" * 4 + "0123456789abcdef" * 2
PART36 = "A1b2C3d4E5f6G7h8I9j0" + "K1l2M3n4" + "O5p6Q7r8"

SECRETS = {
    "private-key": "-----BEGIN " + "OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXk=\n",
    "aws-access-key-id": "aws_access_key_id = " + "AKIA" + "Q3EXAMPLEKEYZ7XY",
    "aws-secret-access-key": "aws_secret_" + "access_key: " + "wJalrXUtnFEMI/K7MDENG/bPxRfiCY" + "EXAMPLE123",
    "github-token": "token " + "ghp_" + PART36,
    "huggingface-token": "HF=" + "hf_" + PART36,
    "slack-token": "xoxb-" + "1234567890-abcdefABCDEF",
    "google-api-key": "AIza" + "SyA1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q",
    "wandb-key": "WANDB_API_" + "KEY=" + HEX40,
    "wandb-netrc": "machine api.wandb.ai\n  login user\n  password " + HEX40,
    "kaggle-key": '{"username": "someone", "' + 'key": "' + "0123456789abcdef" * 2 + '"}',
    "kubernetes-secret-data": "apiVersion: v1\nkind: "
    + "Secret\nmetadata:\n  name: trm-wandb\nstringData:\n  api-key: hunter2\n",
}


@pytest.mark.parametrize("rule", sorted(SECRETS))
def test_each_kind_of_secret_is_found(rule: str):
    findings = scan_text("x: 1\n" + SECRETS[rule], "f.yaml")
    assert rule in {f.rule for f in findings}
    assert all(f.path == "f.yaml" and f.line >= 2 for f in findings)
    assert all(HEX40 not in str(f) and PART36 not in str(f) for f in findings)  # never echoes the secret


def test_wandb_key_in_yaml_value_is_found():
    text = "env:\n- name: WANDB_API_" + "KEY\n  value: " + HEX40 + "\n"
    assert {f.rule for f in scan_text(text, "job.yaml")} & {"wandb-key", "assigned-secret"}


@pytest.mark.parametrize(
    "text",
    [
        "commit " + HEX40 + " fixed the loader",  # a git SHA-1 with no key-like word near it
        "WANDB_API_" + "KEY=$WANDB_API_KEY",
        "WANDB_API_" + "KEY=<your key>",
        "secretKeyRef:\n  name: trm-wandb\n  key: api-key\n",
        "kind: "
        + "Secret\nmetadata:\n  name: x\n---\nkind: ConfigMap\ndata:\n  a: b\n",  # data of another doc
        "api_key: ${{ secrets.WANDB }}",
        "image: trm@sha256:" + "ab" * 32,
        "password_file: /run/secrets/registry_password",
        'read -rsp "W&B key: " WANDB_API_' + "KEY",
    ],
)
def test_placeholders_and_references_are_not_secrets(text: str):
    assert scan_text(text, "doc.md") == []


def _git_repo(tmp_path: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    return tmp_path


def test_repo_scan_and_allowlist(tmp_path: Path):
    repo = _git_repo(tmp_path, {"runbook.md": SECRETS["wandb-key"] + "\n", "ok.md": "nothing here\n"})
    findings = scan_repo(repo)
    assert [(f.path, f.rule) for f in findings] == [("runbook.md", "wandb-key")]
    (repo / ALLOWLIST).write_text("# deliberate example\n" + findings[0].allow_line + "\n")
    assert scan_repo(repo) == []
    (repo / "other.md").write_text(SECRETS["wandb-key"] + "\n")  # same text elsewhere: not allowed
    assert [f.path for f in scan_repo(repo)] == ["other.md"]


def test_ignored_files_are_not_scanned_but_untracked_ones_are(tmp_path: Path):
    repo = _git_repo(tmp_path, {".gitignore": "secret.env\n", "secret.env": SECRETS["github-token"]})
    assert scan_repo(repo) == []
    (repo / "new.txt").write_text(SECRETS["github-token"])
    assert [f.path for f in scan_repo(repo)] == ["new.txt"]


def test_malformed_allowlist_names_the_fix(tmp_path: Path):
    repo = _git_repo(tmp_path, {ALLOWLIST: "runbook.md wandb-key not-a-hash\n"})
    with pytest.raises(TRMError, match=r"--print-allowlist"):
        read_allowlist(repo)


def test_the_repository_holds_no_secret():
    findings = scan_repo(ROOT)
    assert findings == [], "\n".join(map(str, findings))


def test_cli_exit_codes(tmp_path: Path):
    repo = _git_repo(tmp_path, {"a.md": SECRETS["slack-token"]})
    cmd = [sys.executable, "-m", "trm", "scan-secrets", "--root", str(repo)]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 1 and "a.md:1: slack-token" in proc.stdout
    allow = subprocess.run([*cmd, "--print-allowlist"], capture_output=True, text=True, check=True, cwd=ROOT)
    (repo / ALLOWLIST).write_text(allow.stdout)
    assert subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT).returncode == 0
