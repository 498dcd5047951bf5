"""Steps of the image's venv stage (stdlib only; copied into the build before trm is installed).

    python3 venvtools.py subset-lock LOCK NAME... [--exclude]   the named pins of a hash-locked file
    python3 venvtools.py split-layers SRC DEST --slots N --max-bytes B [--link]
    python3 venvtools.py python-facts OUT      record what a venv depends on of its base interpreter
    python3 venvtools.py check-python FACTS    (runtime stage) this base's interpreter can run that venv

Kept apart from buildtools.py so that changing the adam-atan2 or runtime checks does not invalidate the
(multi-GB) venv layer in the build cache.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import sys
import sysconfig
import tempfile
from pathlib import Path

_REQ_START = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==")


class BuildCheckError(RuntimeError):
    """A build-time assertion failed."""


def normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def subset_lock(text: str, names: list[str], *, exclude: bool = False) -> str:
    """The entries (pin line + hash continuation lines) of `names` from a hash-locked file.

    With `exclude`, every entry except `names` (e.g. the toolchain without the sdist built later).
    """
    wanted = {normalize(n) for n in names}
    out: list[str] = []
    keep = False
    found: set[str] = set()
    for line in text.splitlines():
        match = _REQ_START.match(line)
        if match:
            name = normalize(match.group(1))
            keep = (name in wanted) != exclude
            if name in wanted:
                found.add(name)
        elif not line.startswith(" "):
            keep = False
        if keep and not line.lstrip().startswith("#"):
            out.append(line)
    missing = wanted - found
    if missing:
        raise BuildCheckError(f"lock file has no pin for {', '.join(sorted(missing))}")
    return "\n".join(out) + "\n"


def split_layers(src: Path, dest: Path, slots: int, max_bytes: int, *, link: bool = False) -> list[int]:
    """Move the tree `src` (absolute) into `dest/<slot>/<src path>`, each slot below `max_bytes`.

    Files go to the first slot with room, largest first, so each slot becomes one COPY layer of
    bounded size. Directories keep their modes; empty ones land in slot 0. With `link`, files are
    hard-linked instead of moved (free when done in the same build step that wrote them) and `src`
    stays intact.
    """
    if not src.is_absolute():
        raise BuildCheckError(f"split-layers needs an absolute source path, got {src}")
    entries = []
    for dirpath, dirnames, filenames in os.walk(src):
        for name in filenames + [d for d in dirnames if os.path.islink(os.path.join(dirpath, d))]:
            path = Path(dirpath, name)
            size = 0 if path.is_symlink() else path.stat().st_size
            entries.append((size, path))
        if not dirnames and not filenames:
            entries.append((0, Path(dirpath)))
    entries.sort(key=lambda e: (-e[0], str(e[1])))
    for i in range(slots):
        # A marker in every slot: the classic builder fails on consecutive COPYs of empty layers.
        marker = dest / str(i) / src.relative_to("/") / f".layer-{i}"
        _make_parents(marker.parent, dest / str(i))
        marker.write_text(f"layer {i} of {src}\n")
    sizes = [0] * slots
    for size, path in entries:
        slot = next((i for i in range(slots) if sizes[i] + size <= max_bytes), None)
        if slot is None:
            total = sum(e[0] for e in entries)
            raise BuildCheckError(
                f"{src} ({total / 1e9:.2f} GB) does not fit in {slots} layers of {max_bytes / 1e9:.2f} GB; "
                "raise the slot count in the Dockerfile or [image].max_layer_bytes"
            )
        sizes[slot] += size
        target = dest / str(slot) / path.relative_to("/")
        _make_parents(target.parent, dest / str(slot))
        if path.is_dir() and not path.is_symlink():
            target.mkdir(exist_ok=True)
            shutil.copystat(path, target)
        elif not link:
            os.rename(path, target)
        elif path.is_symlink():
            os.symlink(os.readlink(path), target)
        else:
            os.link(path, target)
    return sizes


def _make_parents(parent: Path, slot_root: Path) -> None:
    """Create `parent` inside a slot, copying each directory's mode from the source tree."""
    slot_root.mkdir(parents=True, exist_ok=True)
    missing = []
    while not parent.exists():
        missing.append(parent)
        parent = parent.parent
    for path in reversed(missing):
        path.mkdir()
        original = Path("/") / path.relative_to(slot_root)
        if original.exists():
            shutil.copystat(original, path)


# What a venv built on one base needs from the interpreter of the base it is copied onto: the venv's
# `bin/python` is a symlink to the base executable and its compiled extensions are built for one ABI.
# The interpreter's build date and compiler (the tail of `sys.version`) differ between separately
# built images of one CPython release and do not matter.
PYTHON_FACTS = {
    "version": "CPython release (major.minor.micro, release level)",
    "implementation": "interpreter implementation",
    "soabi": "extension-module ABI tag (SOABI)",
    "executable": "real path of the base interpreter, which the venv's bin/python links to",
    "prefix": "installation prefix (sys.base_prefix: where the standard library is)",
    "ldlibrary": "libpython the interpreter is linked with (LDLIBRARY)",
}


def python_facts() -> dict[str, str]:
    """The facts of PYTHON_FACTS for the running interpreter, plus its `build` (informational)."""
    info = sys.version_info
    return {
        "version": f"{info.major}.{info.minor}.{info.micro}-{info.releaselevel}{info.serial}",
        "implementation": sys.implementation.name,
        "soabi": str(sysconfig.get_config_var("SOABI")),
        "executable": os.path.realpath(sys.executable),
        "prefix": sys.base_prefix,
        "ldlibrary": str(sysconfig.get_config_var("LDLIBRARY")),
        "build": " ".join(platform.python_build()),
    }


def python_mismatches(built: dict[str, str], here: dict[str, str]) -> list[str]:
    """Human-readable differences in the facts a venv depends on (build date and compiler ignored)."""
    return [
        f"{key} ({meaning}): build base {built.get(key)!r}, runtime base {here.get(key)!r}"
        for key, meaning in PYTHON_FACTS.items()
        if built.get(key) != here.get(key)
    ]


def write_python_facts(out: Path) -> dict[str, str]:
    """Record `python_facts()` as JSON at `out` (written atomically)."""
    facts = python_facts()
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=out.parent, prefix=f".{out.name}.")
    with os.fdopen(fd, "w") as f:
        json.dump(facts, f, indent=1, sort_keys=True)
    os.replace(tmp, out)
    return facts


def check_python(facts_path: Path) -> str:
    """Compare this interpreter with the one the venv was built on; raise on a difference that matters."""
    try:
        built = json.loads(facts_path.read_text())
    except (OSError, ValueError) as err:
        raise BuildCheckError(f"cannot read the build base's interpreter facts {facts_path}: {err}") from None
    if not isinstance(built, dict) or not all(key in built for key in PYTHON_FACTS):
        raise BuildCheckError(
            f"{facts_path} lacks some of {', '.join(PYTHON_FACTS)}: it was written by another "
            "venvtools.py; rebuild without cache"
        )
    here = python_facts()
    problems = python_mismatches(built, here)
    if problems:
        raise BuildCheckError(
            "the runtime base's Python cannot run the venv built on the build base:\n  "
            + "\n  ".join(problems)
            + "\npin [image].build_base and [image].runtime_base in docker/images.toml to images of the "
            "same CPython release (the full and the slim image of one tag)"
        )
    note = f"runtime base Python {here['version']} ({here['soabi']}, {here['executable']}) matches the build base"
    if built.get("build") != here["build"]:
        note += (
            f"; interpreter builds differ ({built.get('build')} vs {here['build']}), which does not matter"
        )
    return note


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="venvtools.py", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("subset-lock")
    p.add_argument("lock", type=Path)
    p.add_argument("names", nargs="+")
    p.add_argument("--exclude", action="store_true", help="print every entry except NAMES")
    p = sub.add_parser("split-layers")
    p.add_argument("src", type=Path)
    p.add_argument("dest", type=Path)
    p.add_argument("--slots", type=int, required=True)
    p.add_argument("--max-bytes", type=int, required=True)
    p.add_argument("--link", action="store_true", help="hard-link instead of moving")
    p = sub.add_parser("python-facts")
    p.add_argument("out", type=Path)
    p = sub.add_parser("check-python")
    p.add_argument("facts", type=Path)
    args = parser.parse_args(argv)
    try:
        if args.cmd == "subset-lock":
            sys.stdout.write(subset_lock(args.lock.read_text(), args.names, exclude=args.exclude))
        elif args.cmd == "python-facts":
            print("build base Python:", json.dumps(write_python_facts(args.out), sort_keys=True))
        elif args.cmd == "check-python":
            print(check_python(args.facts))
        else:
            sizes = split_layers(args.src, args.dest, args.slots, args.max_bytes, link=args.link)
            print("layer sizes (MB):", " ".join(f"{s / 1e6:.0f}" for s in sizes))
    except BuildCheckError as err:
        print(f"build check failed: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
