"""Optional dependencies: the advice names what works (trm-stack is not on a package index), and the images
carry the extras their documented commands need (the hub for build-sudoku / build-maze)."""

from __future__ import annotations

import re
import subprocess
import tomllib
from pathlib import Path

from tools.runbooks.pages import reference_pages
from trm.extras import extra_pins, install_hint

ROOT = Path(__file__).resolve().parents[1]


def test_the_hint_installs_from_the_checkout_with_the_pins():
    hint = install_hint("hub")
    assert "pip install -e '.[hub]'" in hint and "trm images include it" in hint
    assert extra_pins("hub") == ["huggingface_hub==2.4.0"]
    assert "'huggingface_hub==2.4.0'" in hint


def test_no_text_tells_users_to_install_trm_stack_from_an_index():
    files = subprocess.run(
        ["git", "ls-files", "*.py", "*.md", "*.sh", "*.yaml", "*.toml"], cwd=ROOT, capture_output=True, text=True,
        check=True,
    ).stdout.split()  # fmt: skip
    index_install = re.compile(r"pip install ['\"]?trm-stack\[")
    offenders = [
        f
        for f in files
        if f not in ("pyproject.toml", "tests/test_extras.py")
        and index_install.search((ROOT / f).read_text())
    ]
    assert offenders == [], f"`pip install 'trm-stack[...]'` finds no package on an index: {offenders}"


def test_every_image_variant_ships_the_hub_and_its_lock_has_it():
    config = tomllib.loads((ROOT / "docker" / "images.toml").read_text())
    for name, variant in config["variants"].items():
        assert "hub" in variant["extras"], f"variant {name}: build-sudoku/build-maze need the hub extra"
        lock = (ROOT / "docker" / "requirements" / f"runtime-{variant['lock']}.txt").read_text()
        assert re.search(r"^huggingface-hub==2\.4\.0 ", lock, re.M), (
            f"runtime-{variant['lock']}.txt: re-run make lock"
        )


def test_every_test_file_the_docs_name_exists():
    named = {
        (doc.relative_to(ROOT).as_posix(), path)
        for doc in reference_pages(ROOT)
        for path in re.findall(r"`(tests/[\w/]+\.py)", doc.read_text())
    }
    missing = sorted((doc, path) for doc, path in named if not (ROOT / path).is_file())
    assert named and missing == [], f"stale test paths: {missing}"
