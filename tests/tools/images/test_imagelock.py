from __future__ import annotations

import json
from pathlib import Path

import pytest

from tools.images.imagelock import locked, read_lock
from trm.errors import TRMError

DIGEST = "sha256:" + "c4" * 32


def _write(tmp_path: Path, data) -> Path:
    (tmp_path / "docker").mkdir(exist_ok=True)
    (tmp_path / "docker" / "images.lock.json").write_text(json.dumps(data))
    return tmp_path


def test_reads_the_pushed_images_schema(tmp_path: Path):
    root = _write(
        tmp_path,
        {
            "schema": 1,
            "images": {
                "sm90": {
                    "reference": f"127.0.0.1:5000/trm@{DIGEST}",
                    "repository": "127.0.0.1:5000/trm",
                    "digest": DIGEST,
                    "tags": ["0.1.0-cu130-sm90", "c0ffee12"],
                }
            },
        },
    )
    image = locked(root, "sm90")
    assert image.repository == "127.0.0.1:5000/trm"  # the registry port is not taken for a tag
    assert image.tag == "0.1.0-cu130-sm90"
    assert image.pinned == f"127.0.0.1:5000/trm@{DIGEST}"
    assert image.tagged == "127.0.0.1:5000/trm:0.1.0-cu130-sm90"


def test_full_tag_references_are_reduced_to_the_tag(tmp_path: Path):
    root = _write(
        tmp_path, {"images": {"cpu": {"reference": f"r.io/trm@{DIGEST}", "tags": ["r.io/trm:0.1.0-cpu"]}}}
    )
    assert read_lock(root)["cpu"].tag == "0.1.0-cpu"


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (
            {"images": {"sm90": {"repository": "r/trm", "tags": ["t"], "digest": "sha256:abc"}}},
            "no sha256 digest",
        ),
        ({"images": {"sm90": {"digest": DIGEST}}}, "lacks its repository and tag"),
        ({"images": {}}, "no `variants` object"),
        ([], "no `variants` object"),
    ],
)
def test_bad_lock_files_name_the_fix(tmp_path: Path, data, message: str):
    root = _write(tmp_path, data)
    with pytest.raises(TRMError, match=message) as err:
        read_lock(root)
    assert "make image push" in str(err.value)


def test_missing_file_and_missing_variant(tmp_path: Path):
    with pytest.raises(TRMError, match="does not exist"):
        read_lock(tmp_path)
    root = _write(tmp_path, {"images": {"cpu": {"reference": f"r/trm@{DIGEST}", "tags": ["0.1.0-cpu"]}}})
    with pytest.raises(TRMError, match=r"no pushed image for variant 'sm90' \(have: cpu\)"):
        locked(root, "sm90")
