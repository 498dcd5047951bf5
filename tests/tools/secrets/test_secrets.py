"""The secret scan (detect-secrets). Secret-like test strings are assembled at run time so this file holds none."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tools.secrets.scan import BASELINE, scan_repo, update_baseline
from trm.errors import TRMError

ROOT = Path(__file__).resolve().parents[3]
HEX32 = "9e3f" + "0123456789abcdef" + "a7c4b2d1e8f6"  # pragma: allowlist secret
HEX40 = "3f" * 4 + "0123456789abcdef" * 2
AWS_SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCY" + "EXAMPLE123"  # pragma: allowlist secret
SLACK = "xoxb-" + "1234567890-abcdefABCDEF"  # pragma: allowlist secret
PART36 = "A1b2C3d4E5f6G7h8I9j0" + "K1l2M3n4" + "O5p6Q7r8"

# file name -> (text, the detect-secrets type that must report it)
SECRETS = {
    "scripts/prime.env": (
        "PI_" + "TOKEN=" + "pit_" + HEX32 + "\n",
        "Prime Intellect Token",
    ),  # the missed case
    "id_ed25519": ("-----BEGIN " + "OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXk=\n", "Private Key"),
    "aws.cfg": ("aws_access_key_id = " + "AKIA" + "Q3EXAMPLEKEYZ7XY\n", "AWS Access Key"),
    "aws.yaml": ("aws_secret_" + "access_key: " + AWS_SECRET + "\n", "Secret Keyword"),
    "ci.sh": ("git clone https://x:" + "ghp_" + PART36 + "@github.com/o/r\n", "GitHub Token"),
    "hub.yaml": ("HF=" + "hf_" + PART36 + "\n", "Hugging Face Token"),
    "notify.sh": ("SLACK=" + SLACK + "\n", "Slack Token"),
    "maps.js": ("const k = '" + "AIza" + "SyA1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q';\n", "Google API Key"),
    "runbook.md": ("export WANDB_API_" + "KEY=" + HEX40 + "\n", "W&B API Key"),
    "job.yaml": ("env:\n- name: WANDB_API_" + "KEY\n  value: " + HEX40 + "\n", "W&B API Key"),
    "netrc": ("machine api.wandb.ai\n  login user\n  password " + HEX40 + "\n", "W&B API Key"),
    "kaggle.json": ('{"username": "someone", "' + 'key": "' + HEX32 + '"}\n', "Hex High Entropy String"),
    "vast.sh": ("curl -H 'Authorization: " + "Bearer " + PART36 + "' https://x\n", "Bearer Token"),
    "secret.yaml": (
        "apiVersion: v1\nkind: " + "Secret\nmetadata:\n  name: trm-wandb\nstringData:\n  api-key: hunter2\n",
        "Kubernetes Secret Data",
    ),
}
NOT_SECRETS = {
    "log.md": "commit " + HEX40 + " fixed the loader",  # a git SHA-1 with no key-like word near it
    "env.sh": "WANDB_API_" + "KEY=$WANDB_API_KEY",
    "howto.md": "WANDB_API_" + "KEY=<your key>",
    "job.yaml": "secretKeyRef:\n  name: trm-wandb\n  key: api-key\n",
    "two.yaml": "kind: "
    + "Secret\nmetadata:\n  name: x\n---\nkind: ConfigMap\ndata:\n  a: b\n",  # another doc
    "ci.yaml": "api_key: ${{ secrets.WANDB }}",
    "pod.yaml": "image: trm@sha256:" + "ab" * 32,
    "prompt.sh": 'read -rsp "W&B key: " WANDB_API_' + "KEY",
    "prime.env": "PI_" + "TOKEN=${PI_TOKEN:?set it in the environment}",
}


def _git_repo(path: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        (path / rel).parent.mkdir(parents=True, exist_ok=True)
        (path / rel).write_text(text)
    subprocess.run(["git", "init", "-q"], cwd=path, check=True)
    return path


@pytest.fixture(scope="module")
def findings_by_file(tmp_path_factory: pytest.TempPathFactory) -> dict[str, set[str]]:
    repo = _git_repo(
        tmp_path_factory.mktemp("leaks"), {rel: "x: 1\n" + text for rel, (text, _) in SECRETS.items()}
    )
    found: dict[str, set[str]] = {}
    for finding in scan_repo(repo):
        found.setdefault(finding.path, set()).add(finding.type)
        assert finding.line >= 2
        assert HEX40 not in str(finding) and PART36 not in str(finding) and HEX32 not in str(finding)
    return found


@pytest.mark.parametrize("rel", sorted(SECRETS))
def test_each_kind_of_secret_is_found(findings_by_file: dict[str, set[str]], rel: str):
    assert SECRETS[rel][1] in findings_by_file.get(rel, set()), findings_by_file.get(rel)


def test_placeholders_and_references_are_not_secrets(tmp_path: Path):
    repo = _git_repo(tmp_path, {rel: text + "\n" for rel, text in NOT_SECRETS.items()})
    assert [str(f) for f in scan_repo(repo)] == []


def test_baseline_holds_audited_false_positives_only(tmp_path: Path):
    text, kind = SECRETS["runbook.md"]
    repo = _git_repo(tmp_path, {"runbook.md": text, "ok.md": "nothing here\n"})
    assert [(f.path, f.type, f.audited) for f in scan_repo(repo)] == [("runbook.md", kind, False)]
    update_baseline(repo)
    # Recorded but not audited: still a failure, now saying so.
    assert [(f.path, f.audited) for f in scan_repo(repo)] == [("runbook.md", True)]
    baseline = json.loads((repo / BASELINE).read_text())
    assert "generated_at" not in baseline and HEX40 not in (repo / BASELINE).read_text()
    assert str(repo) not in (repo / BASELINE).read_text()  # paths relative to the repository
    baseline["results"]["runbook.md"][0]["is_secret"] = False  # what `detect-secrets audit` records
    (repo / BASELINE).write_text(json.dumps(baseline))
    assert scan_repo(repo) == []
    update_baseline(repo)  # a rewrite keeps the audit mark
    assert json.loads((repo / BASELINE).read_text())["results"]["runbook.md"][0]["is_secret"] is False
    (repo / "other.md").write_text(text)  # the same text elsewhere is a new finding
    assert [f.path for f in scan_repo(repo)] == ["other.md"]


def test_a_moved_file_keeps_its_audit_marks(tmp_path: Path):
    text = SECRETS["runbook.md"][0]
    repo = _git_repo(tmp_path, {"tests/test_a.py": text})
    update_baseline(repo)
    baseline = json.loads((repo / BASELINE).read_text())
    baseline["results"]["tests/test_a.py"][0]["is_secret"] = False
    (repo / BASELINE).write_text(json.dumps(baseline))
    (repo / "tests" / "unit").mkdir()
    (repo / "tests" / "test_a.py").rename(repo / "tests" / "unit" / "test_a.py")
    assert [f.path for f in scan_repo(repo)] == ["tests/unit/test_a.py"]  # a new path is a new finding
    update_baseline(repo)
    assert scan_repo(repo) == []
    assert list(json.loads((repo / BASELINE).read_text())["results"]) == ["tests/unit/test_a.py"]


def test_ignored_files_are_not_scanned_but_untracked_ones_are(tmp_path: Path):
    text = SECRETS["hub.yaml"][0]
    repo = _git_repo(tmp_path, {".gitignore": "secret.env\n", "secret.env": text})
    assert scan_repo(repo) == []
    (repo / "new.txt").write_text(text)
    assert [f.path for f in scan_repo(repo)] == ["new.txt"]


def test_files_pinned_by_their_checksums_are_skipped_until_they_change(tmp_path: Path):
    import hashlib

    text = SECRETS["hub.yaml"][0]
    repo = _git_repo(tmp_path, {"data/a.json": text})
    (repo / "data" / "SHA256SUMS").write_text(f"{hashlib.sha256(text.encode()).hexdigest()}  a.json\n")
    assert scan_repo(repo) == []
    (repo / "data" / "a.json").write_text(text + "changed\n")
    assert [f.path for f in scan_repo(repo)] == ["data/a.json"]


def test_malformed_baseline_names_the_fix(tmp_path: Path):
    repo = _git_repo(tmp_path, {BASELINE: "{not json"})
    with pytest.raises(TRMError, match=r"--update-baseline"):
        scan_repo(repo)


# The repository's own scan is `python -m tools.secrets` itself, which `nox -s runbooks` (CI) runs: its exit
# code is the check (test_cli_exit_codes below holds that exit code to the findings).


def test_cli_exit_codes(tmp_path: Path):
    repo = _git_repo(tmp_path, {"a.md": SECRETS["notify.sh"][0]})
    cmd = [sys.executable, "-m", "tools.secrets", "--root", str(repo)]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 1 and "a.md:1: Slack Token (new)" in proc.stdout
    subprocess.run([*cmd, "--update-baseline"], capture_output=True, text=True, check=True, cwd=ROOT)
    assert subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT).returncode == 1  # not audited yet
    baseline = json.loads((repo / BASELINE).read_text())
    baseline["results"]["a.md"][0]["is_secret"] = False
    (repo / BASELINE).write_text(json.dumps(baseline))
    assert subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT).returncode == 0
