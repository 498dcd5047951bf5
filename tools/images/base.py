"""Local stand-ins for the pinned base images, made with debootstrap where no registry is reachable.

`trm-base-devel:bookworm` (Debian bookworm minbase + python3 + venv + g++, libc6-dev, python3-dev) stands
in for the pinned full python image of both stages (the image test builds on it), `trm-base:bookworm`
(without the toolchain) for a base that lacks what torch.compile needs at run time. Root filesystems are cached as tarballs keyed
by their package list, so a second run only re-imports (or finds the image already present).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path

from trm.errors import TRMError
from trm.safe_remove import remove_own_temp

SUITE = "bookworm"
RUNTIME_PACKAGES = ("python3", "python3-venv", "ca-certificates")
DEVEL_PACKAGES = (*RUNTIME_PACKAGES, "g++", "libc6-dev", "python3-dev")
CHANGES = ["ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "ENV LANG=C.UTF-8"]


@dataclass(frozen=True)
class LocalBase:
    """One debootstrapped base: its image tag and the packages it adds to minbase."""

    tag: str
    packages: tuple[str, ...]

    @property
    def key(self) -> str:
        return hashlib.sha256(f"{SUITE}|{','.join(sorted(self.packages))}".encode()).hexdigest()[:16]


RUNTIME = LocalBase(f"trm-base:{SUITE}", RUNTIME_PACKAGES)
DEVEL = LocalBase(f"trm-base-devel:{SUITE}", DEVEL_PACKAGES)


def default_cache_dir() -> Path:
    root = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(root) / "trm-stack" / "base-images"


def debootstrap_command(base: LocalBase, target: Path) -> list[str]:
    """The debootstrap call (Debian's default mirror, or the one in $DEBOOTSTRAP_MIRROR)."""
    cmd = ["debootstrap", "--variant=minbase", f"--include={','.join(base.packages)}", SUITE, str(target)]
    mirror = os.environ.get("DEBOOTSTRAP_MIRROR")
    return [*cmd, mirror] if mirror else cmd


def build_rootfs_tar(base: LocalBase, cache_dir: Path) -> Path:
    """The cached rootfs tarball of `base`, creating it with debootstrap when missing."""
    tar_path = cache_dir / f"{SUITE}-{base.key}.tar"
    if tar_path.is_file():
        return tar_path
    if shutil.which("debootstrap") is None:
        raise TRMError("debootstrap is not installed: `apt-get install -y debootstrap` (needs root)")
    cache_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache_dir) as tmp:
        root = Path(tmp) / "rootfs"
        print(f"debootstrap {SUITE} for {base.tag} (about a minute) …", flush=True)
        proc = subprocess.run(debootstrap_command(base, root), capture_output=True, text=True)
        if proc.returncode != 0:
            raise TRMError(f"debootstrap for {base.tag} failed:\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}")
        # No apt lists or caches in the image; they are large and only make it less reproducible.
        for junk in ("var/cache/apt/archives", "var/lib/apt/lists"):
            remove_own_temp(root / junk)
        partial = Path(tmp) / "rootfs.tar"
        with tarfile.open(partial, "w") as tar:
            tar.add(root, arcname=".")
        os.replace(partial, tar_path)
    return tar_path


def ensure_local_base(client, base: LocalBase, cache_dir: Path | None = None) -> str:
    """Make sure `base.tag` exists in the engine (import from cache or debootstrap); returns its id."""
    import docker.errors

    try:
        return client.images.get(base.tag).id
    except docker.errors.ImageNotFound:
        pass
    tar_path = build_rootfs_tar(base, cache_dir or default_cache_dir())
    repository, tag = base.tag.split(":")
    client.api.import_image_from_file(str(tar_path), repository=repository, tag=tag, changes=CHANGES)
    return client.images.get(base.tag).id
