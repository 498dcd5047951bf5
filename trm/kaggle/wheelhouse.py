"""Offline wheelhouse: trm-stack's pinned runtime dependencies as wheels for a target Python, plus our wheel.

The pins are the exact versions of the dependency closure installed here (the environment the tests ran
in), walked from trm-stack's declared requirements with markers evaluated for the target (Linux, the
target Python). torch and its own dependencies are left out by default: Kaggle images ship torch.
"""

from __future__ import annotations

import base64
import hashlib
import importlib.metadata as md
import importlib.util
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Iterable
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from tqdm import tqdm

from trm.errors import TRMError
from trm.io import scratch_directory

DIST_NAME = "trm-stack"
REQUIREMENTS = "requirements.txt"
# Kaggle's hosts are x86_64 with glibc 2.35. pip does not expand a `manylinux_2_X` tag to older ones,
# so every glibc level up to 2.35 is listed (plus the legacy aliases).
DEFAULT_PLATFORMS = (
    *(f"manylinux_2_{minor}_x86_64" for minor in range(35, 4, -1)),
    "manylinux2014_x86_64",
    "manylinux2010_x86_64",
    "manylinux1_x86_64",
)
SOURCE_FILES = ("pyproject.toml", "README.md", "LICENSE", "setup.cfg", "MANIFEST.in")


def _environment(python_version: str) -> dict[str, str]:
    major_minor = ".".join(python_version.split(".")[:2])
    return {
        "python_version": major_minor,
        "python_full_version": f"{major_minor}.0" if python_version.count(".") == 1 else python_version,
        "sys_platform": "linux",
        "platform_system": "Linux",
        "os_name": "posix",
        "platform_machine": "x86_64",
        "implementation_name": "cpython",
        "platform_python_implementation": "CPython",
        "extra": "",
    }


def _requirements(dist: str, env: dict[str, str]) -> list[Requirement]:
    reqs = []
    for text in md.requires(dist) or []:
        req = Requirement(text)
        if req.marker is None or req.marker.evaluate(env):
            reqs.append(req)
    return reqs


def runtime_pins(python_version: str, *, include_torch: bool = False) -> dict[str, str]:
    """`{distribution: version}` of trm-stack's runtime closure as installed here (trm-stack excluded)."""
    env = _environment(python_version)
    try:
        roots = _requirements(DIST_NAME, env)
    except md.PackageNotFoundError:
        raise TRMError(
            f"{DIST_NAME} is not installed in this Python, so its pinned dependencies are unknown: "
            "`pip install -e .` in the repository first, or pass --no-wheels"
        ) from None
    skip = set() if include_torch else {"torch"}
    pins: dict[str, str] = {}
    queue = [r for r in roots if canonicalize_name(r.name) not in skip]
    while queue:
        req = queue.pop()
        name = canonicalize_name(req.name)
        if name in pins:
            continue
        try:
            version = md.version(req.name)
        except md.PackageNotFoundError:
            raise TRMError(
                f"{req.name} (needed by {DIST_NAME}) is not installed here: `pip install -e .` first"
            ) from None
        if not req.specifier.contains(version, prereleases=True):
            raise TRMError(
                f"installed {req.name} {version} does not satisfy {req}: reinstall with `pip install -e .`"
            )
        pins[name] = version
        queue.extend(_requirements(req.name, env))
    return dict(sorted(pins.items()))


def source_root() -> Path | None:
    """The repository holding this package's pyproject.toml, or None for an installed wheel (the images)."""
    root = Path(__file__).resolve().parents[2]
    return root if (root / "pyproject.toml").is_file() else None


# Files pip adds at install time; a wheel must not carry them (RECORD is rewritten).
INSTALL_ONLY = ("INSTALLER", "REQUESTED", "direct_url.json", "RECORD")
ZIP_TIME = (1980, 1, 1, 0, 0, 0)


def _record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def wheel_from_installed(dest: Path, dist: md.Distribution | None = None) -> Path:
    """Re-pack the installed trm-stack (a wheel install, as in the trm images) into a wheel in `dest`.

    Every file listed in the installed RECORD is checked against its recorded sha256 first, so a wheel
    is never made from a modified install; the result is byte-for-byte reproducible (fixed timestamps).
    """
    dist = dist or md.distribution(DIST_NAME)
    files = list(dist.files or [])
    info_dirs = {f.parts[0] for f in files if f.parts[0].endswith(".dist-info")}
    if len(info_dirs) != 1:
        raise TRMError(
            f"the installed {DIST_NAME} {dist.version} has no RECORD of its files (an editable or egg "
            "install?): package from its source checkout, or pass --no-wheels"
        )
    (info_dir,) = info_dirs
    entries: list[tuple[str, bytes]] = []
    for f in files:
        name = f.as_posix()
        if "__pycache__" in f.parts or name.endswith(".pyc") or name.startswith(".."):
            continue
        if f.parts[0] == info_dir and f.name in INSTALL_ONLY:
            continue
        path = Path(str(f.locate()))
        data = path.read_bytes()
        if f.hash is not None and _record_hash(data) != f"{f.hash.mode}={f.hash.value}":
            raise TRMError(
                f"{path} differs from the installed {DIST_NAME} RECORD (modified after install); "
                "reinstall the package or package from a source checkout"
            )
        entries.append((name, data))
    if not any(name == f"{info_dir}/WHEEL" for name, _ in entries):
        raise TRMError(f"the installed {DIST_NAME} has no {info_dir}/WHEEL file; reinstall it from a wheel")
    entries.sort()
    record = "".join(f"{name},{_record_hash(data)},{len(data)}\n" for name, data in entries)
    record += f"{info_dir}/RECORD,,\n"
    entries.append((f"{info_dir}/RECORD", record.encode()))
    wheel = dest / f"{DIST_NAME.replace('-', '_')}-{dist.version}-py3-none-any.whl"
    tmp = wheel.with_name(f".{wheel.name}.partial")
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in entries:
            info = zipfile.ZipInfo(name, ZIP_TIME)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            zf.writestr(info, data)
    tmp.replace(wheel)
    return wheel


def _pip(args: list[str], what: str) -> None:
    proc = subprocess.run([sys.executable, "-m", "pip", *args], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        tail = "\n".join((proc.stderr or proc.stdout).strip().splitlines()[-5:])
        raise TRMError(f"{what} failed:\n{tail}")


def build_own_wheel(dest: Path) -> Path:
    """`pip wheel --no-deps` of trm-stack from a clean copy of the source (no build/ left in the checkout);
    without a checkout (the trm images install a wheel), the installed package re-packed."""
    root = source_root()
    if root is None:
        return wheel_from_installed(dest)
    with scratch_directory("trm-wheel") as tmp:  # a killed package's copy is cleared by the next one
        src = tmp / "src"
        src.mkdir()
        for name in SOURCE_FILES:
            if (root / name).is_file():
                shutil.copy2(root / name, src / name)
        shutil.copytree(root / "trm", src / "trm", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        out = tmp / "out"
        # Build with this environment's setuptools when it has one (no index needed), else isolated.
        isolation = ["--no-build-isolation"] if importlib.util.find_spec("setuptools") else []
        _pip(
            ["wheel", "--no-deps", *isolation, "-q", "-w", str(out), str(src)],
            "building the trm-stack wheel (`pip wheel --no-deps .`)",
        )
        (wheel,) = out.glob("*.whl")
        return Path(shutil.copy2(wheel, dest / wheel.name))


def download_pinned(
    pins: dict[str, str],
    dest: Path,
    *,
    python_version: str,
    platforms: Iterable[str] = DEFAULT_PLATFORMS,
    progress: bool = True,
) -> list[Path]:
    """Binary wheels of each pin for the target; a pin published only as an sdist (antlr4-python3-runtime)
    is built here with `pip wheel` and accepted only when the result is pure Python (`none-any`)."""
    target = ["--python-version", python_version, "--implementation", "cp", "--only-binary=:all:"]
    for plat in platforms:
        target += ["--platform", plat]
    bar = tqdm(pins.items(), desc="wheels", unit="pkg", disable=not progress, file=sys.stderr)
    for name, version in bar:
        spec = f"{name}=={version}"
        before = set(dest.iterdir())
        try:
            _pip(["download", "--no-deps", "-q", "-d", str(dest), *target, spec], f"pip download {spec}")
        except TRMError as binary_error:
            with scratch_directory("trm-sdist") as tmp:
                try:
                    _pip(["wheel", "--no-deps", "-q", "-w", str(tmp), spec], f"pip wheel {spec}")
                except TRMError:
                    raise binary_error from None
                built = list(tmp.glob("*.whl"))
                if len(built) != 1 or not built[0].name.endswith("-none-any.whl"):
                    raise TRMError(
                        f"{spec} has no wheel for Python {python_version} on {', '.join(platforms)} and is not "
                        "pure Python; pick another --python-version/--platform or a version with wheels"
                    ) from None
                shutil.copy2(built[0], dest / built[0].name)
        if len(set(dest.iterdir()) - before) != 1:
            raise TRMError(f"pip download {spec} did not add exactly one wheel to {dest}; clear it and retry")
    return sorted(dest.glob("*.whl"))


def build_wheelhouse(
    dest: Path,
    *,
    python_version: str = "3.11",
    platforms: Iterable[str] = DEFAULT_PLATFORMS,
    include_torch: bool = False,
    progress: bool = True,
) -> dict[str, str]:
    """Fill `dest` with the pinned wheels, our wheel and `requirements.txt`; returns the pins."""
    dest.mkdir(parents=True, exist_ok=True)
    pins = runtime_pins(python_version, include_torch=include_torch)
    download_pinned(pins, dest, python_version=python_version, platforms=platforms, progress=progress)
    build_own_wheel(dest)
    lines = [f"{name}=={version}" for name, version in pins.items()]
    (dest / REQUIREMENTS).write_text("\n".join(lines) + "\n", encoding="utf-8")
    return pins
