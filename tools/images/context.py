"""The build context of one variant (only the files its build reads) and the hash of the build inputs."""

from __future__ import annotations

import fnmatch
import hashlib
import json
import tarfile
import tomllib
from collections.abc import Iterator
from pathlib import Path

from tools.images.requirements import WHEELHOUSE_DIR, build_lock, runtime_lock
from tools.images.variants import ImageConfig, Variant
from trm.errors import TRMError
from trm.gitinfo import UNKNOWN, checkout_sha

DOCKERFILE = Path("docker/Dockerfile")
SOURCE_FILES = (Path("pyproject.toml"), Path("README.md"))
SOURCE_TREES = (Path("trm"),)
# Names of credential files (environment files, keys, registry and cloud logins): one in a source tree would be
# baked into the image and pushed with it, so the build refuses it (the context is never the repository root).
SECRET_NAMES = (".env", ".env.*", "*.env", ".netrc", ".git-credentials", ".pypirc", ".npmrc", ".dockercfg",
                "*.pem", "*.key", "*.p12", "*.pfx", "id_rsa*", "id_ed25519*", "id_ecdsa*", "credentials*",
                "kubeconfig", "*.kubeconfig", "service-account*.json")  # fmt: skip
# Arguments that label the image but do not change what is in it.
LABEL_ONLY_ARGS = frozenset({"GIT_SHA", "CONTENT_HASH"})


def project_version(root: Path) -> str:
    """`[project].version` of the checkout being built."""
    with open(root / "pyproject.toml", "rb") as f:
        return tomllib.load(f)["project"]["version"]


def git_sha(root: Path) -> str:
    """HEAD's commit, with `-dirty` when tracked files differ from it; `unknown` outside git.

    Baked into the image as TRM_IMAGE_GIT_SHA, which trm.gitinfo.code_git_sha reads at run time.
    """
    return checkout_sha(root) or UNKNOWN


def build_args(
    config: ImageConfig,
    variant: Variant,
    root: Path,
    *,
    build_base: str | None = None,
    runtime_base: str | None = None,
    max_jobs: int = 1,
) -> dict[str, str]:
    """The Dockerfile's build arguments for `variant` (bases overridable for local test builds)."""
    return {
        "BUILD_BASE": build_base or variant.build_base,
        "RUNTIME_BASE": runtime_base or variant.runtime_base,
        "LOCK": variant.lock,
        "CUDA_ARCHS": ";".join(variant.archs),
        "SM_LIST": " ".join(variant.sm_list),
        "VARIANT": variant.name,
        "CUDA_VERSION": variant.cuda,
        "TORCH_VERSION": variant.torch,
        "OPTIMIZER_BACKEND": variant.optimizer_backend,
        "ADAM_ATAN2_VERSION": config.adam_atan2 if variant.optimizer_backend == "ext" else "none",
        "TRM_VERSION": project_version(root),
        "MAX_JOBS": str(max_jobs),
        "MAX_LAYER_BYTES": str(config.max_layer_bytes),
        "GIT_SHA": git_sha(root),
        **variant.container_env,
    }


def hashed_files(variant: Variant, root: Path) -> list[Path]:
    """Context files whose bytes define the image (the wheelhouse is covered by the locks' hashes)."""
    files = [DOCKERFILE, *SOURCE_FILES]
    files += [
        runtime_lock(root, variant.lock).relative_to(root),
        build_lock(root, variant.lock).relative_to(root),
    ]
    for tree in SOURCE_TREES:
        files += sorted(
            p.relative_to(root)
            for p in (root / tree).rglob("*")
            if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc"
        )
    for path in files:
        if any(fnmatch.fnmatch(path.name.lower(), pattern) for pattern in SECRET_NAMES):
            raise TRMError(
                f"build input {root / path} is named like a credential file: the image would carry it to every "
                "registry it is pushed to; move it out of the checkout's source tree, then build again"
            )
    for path in files:
        if not (root / path).is_file():
            raise TRMError(f"build input {root / path} is missing (run `make lock` for lock files)")
    return files


def wheelhouse_files(variant: Variant, root: Path) -> list[Path]:
    wheelhouse = root / WHEELHOUSE_DIR / variant.lock
    files = sorted(
        p.relative_to(root) for p in wheelhouse.glob("*") if p.is_file() and not p.name.startswith(".")
    )
    if not files:
        raise TRMError(
            f"{wheelhouse} is empty: run `make wheelhouse VARIANTS={variant.name}` first (downloads the "
            "locked packages once; the image build itself has no network)"
        )
    return files


def content_hash(variant: Variant, root: Path, args: dict[str, str]) -> str:
    """sha256 over the build inputs and arguments: equal hashes mean equal image contents."""
    digest = hashlib.sha256()
    for path in hashed_files(variant, root):
        digest.update(f"{path.as_posix()}\0".encode())
        digest.update(hashlib.sha256((root / path).read_bytes()).digest())
    relevant = {k: v for k, v in sorted(args.items()) if k not in LABEL_ONLY_ARGS}
    digest.update(json.dumps(relevant, sort_keys=True).encode())
    return digest.hexdigest()


def _normalized(info: tarfile.TarInfo) -> tarfile.TarInfo:
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    info.mtime = 0
    return info


def context_members(variant: Variant, root: Path) -> Iterator[Path]:
    yield from hashed_files(variant, root)
    yield from wheelhouse_files(variant, root)


def write_context(variant: Variant, root: Path, fileobj) -> int:
    """Write the variant's build context as an uncompressed tar to `fileobj`; returns its file count."""
    count = 0
    with tarfile.open(fileobj=fileobj, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for path in context_members(variant, root):
            tar.add(root / path, arcname=path.as_posix(), recursive=False, filter=_normalized)
            count += 1
    return count
