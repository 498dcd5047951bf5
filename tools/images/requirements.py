"""Hash-locked requirement files per lock group and the host-side wheelhouse the builds install from.

Each variant names a lock group (`cpu`, `cu130`). A group has two files in `docker/requirements/`:
`runtime-<lock>.txt` (the project's dependencies, torch as the variant needs it) and `build-<lock>.txt`
(pinned pip/setuptools/wheel and, for GPU groups, the CUDA compiler and adam-atan2's sdist), both
written by `uv pip compile --generate-hashes`. `make wheelhouse` downloads both once into
`docker/wheelhouse/<lock>/`; the Dockerfile installs with `--no-index --require-hashes`.
"""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

from tools.images.variants import ImageConfig, Variant
from trm.errors import TRMError
from trm.images.requirement_locks import REQUIREMENTS_DIR, build_lock, runtime_lock
from trm.safe_remove import remove_own_temp

WHEELHOUSE_DIR = Path("docker/wheelhouse")
PLATFORM = "x86_64-manylinux_2_28"
# Every tag a glibc 2.28+ x86_64 image accepts (pip's --platform matches tags exactly).
PIP_PLATFORMS = (
    *(f"manylinux_2_{minor}_x86_64" for minor in range(28, 16, -1)),
    "manylinux2014_x86_64",
    "linux_x86_64",
)
_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;\\]+)", re.MULTILINE)


def lock_groups(variants: list[Variant]) -> dict[str, Variant]:
    """One representative variant per lock group, in first-use order."""
    groups: dict[str, Variant] = {}
    for variant in variants:
        groups.setdefault(variant.lock, variant)
    return groups


def normalize_name(name: str) -> str:
    """PEP 503 name normalization (`Hydra_Core` → `hydra-core`)."""
    return re.sub(r"[-_.]+", "-", name.strip()).lower()


def read_pins(path: Path) -> dict[str, str]:
    """`{normalized name: version}` of a compiled requirements file."""
    if not path.is_file():
        raise TRMError(f"lock file {path} is missing: run `make lock` (needs network) and commit it")
    text = path.read_text(encoding="utf-8")
    return {normalize_name(m.group(1)): m.group(2) for m in _PIN.finditer(text)}


def check_torch_pin(config: ImageConfig, variant: Variant, root: Path) -> None:
    """The runtime lock must hold exactly the torch build the variant advertises."""
    path = runtime_lock(root, variant.lock)
    want = variant.torch_pin()
    got = read_pins(path).get("torch")
    if got != want:
        raise TRMError(
            f"{path} pins torch=={got} but variant '{variant.name}' needs torch=={want} "
            f"([families.{variant.lock}].torch or [image].torch in {config.path}); rerun `make lock`"
        )


def _uv(root: Path) -> list[str]:
    exe = Path(sys.executable).parent / "uv"
    if not exe.exists():
        raise TRMError("uv is not installed in this venv: `pip install uv` (pinned in the dev extra)")
    return [str(exe)]


def compile_commands(
    config: ImageConfig, variant: Variant, root: Path, override: Path, find_links: list[str]
) -> list[list[str]]:
    """The two `uv pip compile` command lines for a lock group (runtime first: build uses it)."""
    common = [
        "--generate-hashes",
        "--python-version",
        config.python,
        "--python-platform",
        PLATFORM,
        "--custom-compile-command",
        "make lock",
        "--quiet",
    ]
    for link in find_links:
        common += ["--find-links", link]
    if variant.index:  # PyTorch's CUDA index holds this torch build (and its nvidia-* wheels)
        common += ["--extra-index-url", variant.index]
    runtime = [*_uv(root), "pip", "compile", str(root / "pyproject.toml"), "--override", str(override)]
    for extra in variant.extras:
        runtime += ["--extra", extra]
    runtime += [*common, "-o", str(runtime_lock(root, variant.lock))]
    build_in = root / REQUIREMENTS_DIR / f"build-{variant.lock}.in"
    if not build_in.is_file():
        raise TRMError(f"{build_in} is missing: write the build tools for lock '{variant.lock}' there")
    build = [*_uv(root), "pip", "compile", str(build_in), "-c", str(runtime_lock(root, variant.lock))]
    build += [*common, "-o", str(build_lock(root, variant.lock))]
    return [runtime, build]


def compile_locks(config: ImageConfig, variants: list[Variant], root: Path) -> list[Path]:
    """Re-resolve the lock files of the selected variants' groups (needs the package index)."""
    # A CPU torch wheel is only on the PyTorch CPU index or a local directory: reuse pip's settings.
    find_links = os.environ.get("PIP_FIND_LINKS", "").split()
    written = []
    for variant in lock_groups(variants).values():
        torch_pin = variant.torch_pin()
        with tempfile.TemporaryDirectory() as tmp:
            override = Path(tmp) / "override.txt"
            override.write_text(f"torch=={torch_pin}\n", encoding="utf-8")
            links = [] if variant.is_gpu else find_links  # a local `+cpu` wheel satisfies ==X too
            for cmd in compile_commands(config, variant, root, override, links):
                print("+", " ".join(cmd), flush=True)
                if subprocess.run(cmd, cwd=root).returncode != 0:
                    raise TRMError(
                        f"`uv pip compile` failed for lock '{variant.lock}' (see above); for the CPU "
                        "torch wheel set PIP_FIND_LINKS or PIP_EXTRA_INDEX_URL to a source of "
                        f"torch=={torch_pin}"
                    )
        written += [runtime_lock(root, variant.lock), build_lock(root, variant.lock)]
    return written


def _locks_digest(locks: tuple[Path, ...]) -> str:
    digest = hashlib.sha256()
    for path in locks:
        digest.update(path.read_bytes() if path.is_file() else b"missing")
    return digest.hexdigest()[:16]


def download_command(lock_file: Path, dest: Path, python: str, index: str = "") -> list[str]:
    """`pip download` of one hash-locked file for the image platform, binaries except sdist-only pins."""
    cmd = [sys.executable, "-m", "pip", "download", "--require-hashes", "--no-deps", "-r", str(lock_file)]
    if index:
        cmd += ["--extra-index-url", index]
    cmd += ["-d", str(dest), "--python-version", python, "--implementation", "cp"]
    cmd += ["--abi", "cp" + python.replace(".", ""), "--abi", "abi3", "--abi", "none"]
    for platform in PIP_PLATFORMS:
        cmd += ["--platform", platform]
    return cmd


def fill_wheelhouse(config: ImageConfig, variants: list[Variant], root: Path) -> list[Path]:
    """Download every locked file of the selected groups into `docker/wheelhouse/<lock>/` (once)."""
    dirs = []
    for variant in lock_groups(variants).values():
        check_torch_pin(config, variant, root)
        dest = root / WHEELHOUSE_DIR / variant.lock
        dest.mkdir(parents=True, exist_ok=True)
        locks = (runtime_lock(root, variant.lock), build_lock(root, variant.lock))
        stamp = dest / f".complete-{_locks_digest(locks)}"
        if stamp.exists():
            print(f"{dest.relative_to(root)}: complete for the current locks", flush=True)
            dirs.append(dest)
            continue
        for lock_file in locks:
            read_pins(lock_file)
            cmd = download_command(lock_file, dest, config.python, variant.index)
            print("+", " ".join(cmd), flush=True)
            if subprocess.run(cmd, cwd=root).returncode != 0:
                raise TRMError(
                    f"downloading {lock_file} into {dest} failed (see pip's message above): check the "
                    "package index is reachable, or rerun `make lock` if a pinned file disappeared"
                )
        for old in dest.glob(".complete-*"):
            remove_own_temp(old)
        stamp.touch()
        dirs.append(dest)
    return dirs
