"""A small bundle as `python -m trm package kaggle` lays it out, without training or downloading wheels.

Publishing never loads the model: it checks the files against the manifest (the packager's own
`file_entries`) and `config.json`'s format, and uploads bytes. So weights and wheels here are stand-in
bytes; everything the publisher and the client read is in its real form.
"""

from __future__ import annotations

import json
from pathlib import Path

from trm.kaggle import bundle as B

OWN_WHEEL = "trm_stack-0.1.0-py3-none-any.whl"


def fake_bundle(root: Path, *, wheels: bool = True) -> Path:
    """A bundle folder at `root` with config.json, model.pt, identifiers, README, wheels/ and manifest.json."""
    root.mkdir(parents=True)
    config = {
        "format": B.FORMAT,
        "format_version": B.FORMAT_VERSION,
        "arch_name": "trm",
        "arch": {"hidden_size": 16, "L_layers": 1, "H_cycles": 1, "L_cycles": 1, "halt_max_steps": 2},
        "loss_type": "stablemax_cross_entropy",
        "dataset": {"seq_len": 900, "vocab_size": 12},
        "identifiers": {"shipped": True, "trained_rows": 3, "unseen_id": 3},
        "source": {"checkpoint": "step_42", "kind": "trm checkpoint", "step": 42},
        "created": {"trm_stack": "0.1.0", "torch": "2.13.0"},
    }
    (root / B.CONFIG).write_text(json.dumps(config))
    (root / B.WEIGHTS).write_bytes(bytes(range(256)) * 64)
    (root / B.IDENTIFIERS).write_text(json.dumps(["<blank>", "t1", "t2"]))
    (root / B.README).write_text("# weights\n")
    if wheels:
        (root / B.WHEELS).mkdir()
        (root / B.WHEELS / "requirements.txt").write_text("numpy==2.4.6\n")
        (root / B.WHEELS / OWN_WHEEL).write_bytes(b"PK\x05\x06" + bytes(18))
        (root / B.WHEELS / "numpy-2.4.6-cp311-cp311-manylinux_2_28_x86_64.whl").write_bytes(
            b"PK\x05\x06" + bytes(18)
        )
    manifest = {"format": B.FORMAT, "format_version": B.FORMAT_VERSION, "files": B.file_entries(root)}
    (root / B.MANIFEST).write_text(json.dumps(manifest))
    return root
