"""trm.secrets: the detector core that staged Hub and Kaggle folders are scanned with (and tools/secrets uses)."""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import pytest

from trm.errors import TRMError
from trm.secrets import (
    TOKEN_PATTERNS,
    Finding,
    may_redact,
    redact_found,
    redact_object,
    require_no_secrets,
    scan_folder,
)

# Token-shaped values built at run time (literal ones would trip the repository's own scan).
HF = "hf_" + "".join(chr(ord("a") + (3 * i) % 26) for i in range(34))
HEX = "".join("0123456789abcdef"[(5 * i + 3) % 16] for i in range(40))


def test_json_findings_name_the_key_path_and_never_the_value(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(
        json.dumps(
            {
                "train": {"project_name": HF, "wandb": HEX, "tags": ["ok", HF]},
                "git_sha": HEX,  # a commit id under a plain key is not a secret
                "api_key": "$WANDB_API_KEY",  # a reference, not a value
                "hub_token": "abcdefgh12345678",
            }
        )
    )
    found = scan_folder(tmp_path)
    assert found == sorted(
        [
            Finding("config.json", "key train.project_name", "Hugging Face Token"),
            Finding("config.json", "key train.wandb", "W&B API Key"),
            Finding("config.json", "key train.tags[1]", "Hugging Face Token"),
            Finding("config.json", "key hub_token", "value of a secret-named key"),
        ]
    )
    with pytest.raises(TRMError) as err:
        require_no_secrets(tmp_path, "package kaggle out")
    message = str(err.value)
    assert "config.json: key train.project_name (Hugging Face Token)" in message and "\n" not in message
    assert HF not in message and HEX not in message and "abcdefgh12345678" not in message


def test_text_lines_binary_pickles_and_skipped_folders(tmp_path: Path) -> None:
    (tmp_path / "README.md").write_text(f"# card\n\ncommit {HEX}\nexport WANDB_API_KEY={HEX}\n")
    (tmp_path / "state.pt").write_bytes(
        b"\x80\x04" + pickle.dumps({"config": {"run_name": HF}}) + bytes(range(256))
    )
    (tmp_path / "wheels").mkdir()
    (tmp_path / "wheels" / "x.txt").write_text(HF)
    assert scan_folder(tmp_path, skip=("wheels",)) == [
        Finding("README.md", "line 4", "W&B API Key"),
        Finding("state.pt", "binary content", "Hugging Face Token"),
    ]
    assert Finding("wheels/x.txt", "line 1", "Hugging Face Token") in scan_folder(tmp_path)


def test_a_clean_folder_passes(tmp_path: Path) -> None:
    (tmp_path / "manifest.json").write_text(
        json.dumps({"files": {"model.pt": {"sha256": "ab" * 32, "bytes": 3}}})
    )
    (tmp_path / "model.pt").write_bytes(bytes(range(256)) * 64)
    require_no_secrets(tmp_path, "publish-checkpoint run")


def test_the_repository_scan_uses_the_same_token_formats() -> None:
    pytest.importorskip("detect_secrets")
    from tools.secrets import detectors

    for plugin in (
        detectors.HuggingFaceTokenDetector,
        detectors.PrimeIntellectTokenDetector,
        detectors.GoogleApiKeyDetector,
        detectors.BearerTokenDetector,
    ):
        assert plugin.denylist[0] is TOKEN_PATTERNS[plugin.secret_type]  # one definition, not a copy


def test_redact_object_replaces_secret_values_and_keeps_references_commit_ids_and_hub_pins() -> None:
    pin = f"hf://org/tokenizer-run@{HEX}"
    shown, count = redact_object(
        {
            "env": {"WANDB_API_KEY": HEX, "HF_TOKEN": "$HF_TOKEN", "hub_password": "abcdefgh" + "12345678"},
            "command": [f"wandb_key={HEX}", f"init_from={pin}", f"Bearer {HF}"],
            "git_sha": HEX,
            "steps": 3,
        }
    )
    assert shown == {
        "env": {"WANDB_API_KEY": "***", "HF_TOKEN": "$HF_TOKEN", "hub_password": "***"},
        "command": ["wandb_key=***", f"init_from={pin}", "Bearer ***"],
        "git_sha": HEX,
        "steps": 3,
    }
    assert count == 4
    assert redact_found(f"token for {pin} and key {HEX}") == f"token for {pin} and key ***"


def test_a_secret_used_as_a_key_is_redacted_and_no_two_keys_merge() -> None:
    other = HF[:-1] + "z"  # a second token: both keys redact to the same text
    shown, count = redact_object(
        {
            HF: 1,
            "***": 0,  # a key the mapping already has: the redacted ones do not take it
            other: 2,
            "by_commit": {
                HEX: "kept",
                f"wandb_{HEX}": "v",
            },  # a commit id as a key stays; a key word with it not
            "nested": {f"Bearer {HF}": [HF]},
        }
    )
    assert shown == {
        "*** (2)": 1,
        "***": 0,
        "*** (3)": 2,
        "by_commit": {HEX: "kept", "wandb_***": "v"},
        "nested": {"Bearer ***": ["***"]},
    }
    assert count == 5  # four keys and one value
    assert list(shown) == ["*** (2)", "***", "*** (3)", "by_commit", "nested"]  # the order is kept


def test_the_scan_finds_a_secret_used_as_a_key_and_names_it_by_its_path(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps({"train": {HF: {"value": "ok"}}, "git": {HEX: "sha"}}))
    assert scan_folder(tmp_path) == [Finding("config.json", "key name train.***", "Hugging Face Token")]
    with pytest.raises(TRMError) as err:
        require_no_secrets(tmp_path, "publish-checkpoint")
    assert "config.json: key name train.*** (Hugging Face Token)" in str(err.value)
    assert HF not in str(err.value)


def test_may_redact_passes_every_line_redact_found_changes_and_skips_a_plain_log() -> None:
    # One line per thing redact_found replaces, built at run time; each must reach the per-line redaction.
    alnum = "".join(chr(ord("a") + (7 * i) % 26) for i in range(48))
    lines = [
        f"logged in with {HF}",
        "key pit_" + alnum[:30],
        "maps AIza" + alnum[:35],
        "Authorization: Bearer " + alnum[:30],
        "ghp_" + alnum[:40],
        "github_pat_" + alnum,
        "AKIA" + alnum[:16].upper(),
        "sk-proj-" + alnum[:40],
        "xoxb-" + alnum[:20],
        "-----BEGIN RSA " + "PRIVATE KEY-----",
        "remote s3://user:" + "pass@bucket/runs",
        "GET /runs?x_token=abcdef123456&page=2",
        f"wandb: key {HEX}",
        f"WANDB_API_KEY={HEX[:-1]}f",
    ]
    for line in lines:
        assert redact_found(line) != line, line  # the sample is one redact_found changes
        assert may_redact(line), line
        assert may_redact("train: step 5, loss=2.1\n" * 50 + line + "\n" + "lr=0.001\n" * 50), line
    plain = (
        "train:  42%|████▏  | 200/475 [00:04<00:17, 15.56step/s, loss=2.476] eval ARC/pass@2 0.125\n" * 1000
    )
    assert not may_redact(plain) and redact_found(plain) == plain
    assert not may_redact(f"sha256 {HEX[:39]}")  # a run shorter than 40: nothing to find
