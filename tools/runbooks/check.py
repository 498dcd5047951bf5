"""Static checks of the runbooks and the documentation pages, and `stamp`, which bumps versions when a
procedure changed.

Versioning: each runbook header records `procedure_sha256`, the hash of its body. A check fails when
the body no longer matches it, or when `runbooks/CHANGELOG.md` has no entry `## <runbook> v<version>`
listing that hash, or when the header's image is not the one in docker/images.lock.json. `stamp`
bumps the version of every runbook whose procedure or image changed and writes the CHANGELOG entry.
"""

from __future__ import annotations

import argparse
import datetime
import re
import subprocess
from collections.abc import Mapping
from pathlib import Path

from tools.images.imagelock import LOCK_PATH, LockedImage, read_lock
from tools.runbooks.journey import journey_problems, stop_timeout_problems
from tools.runbooks.links import broken_links
from tools.runbooks.measured import stale as stale_figures
from tools.runbooks.pages import reference_pages
from tools.runbooks.runbook import Runbook, load_all, procedure_hash, render_header
from tools.shell.refs import RefChecker
from trm.errors import TRMError
from trm.io import atomic_write_text

RUNBOOKS_DIR = Path("runbooks")
CHANGELOG = RUNBOOKS_DIR / "CHANGELOG.md"
_ENTRY = re.compile(r"^## (?P<name>[a-z0-9-]+) v(?P<version>\d+) — (?P<date>\d{4}-\d{2}-\d{2})\s*$", re.M)
# Header value of `image` / `image_digest` while the lock file has no pushed image of the variant yet
# (nothing pushed to a registry): the runbook then claims no image, and pushing one forces a re-stamp.
UNRELEASED = "unreleased"
_HASH_LINE = re.compile(r"procedure sha256 `(?P<hash>[0-9a-f]{64})`")
_SHELL_BLOCK = re.compile(r"^```(?:bash|sh)\b[^\n]*\n(?P<code>.*?)^```", re.S | re.M)


def changelog_entries(text: str) -> dict[tuple[str, int], str]:
    """(runbook, version) → the procedure hash recorded in its CHANGELOG entry ('' when missing)."""
    entries: dict[tuple[str, int], str] = {}
    matches = list(_ENTRY.finditer(text))
    for i, match in enumerate(matches):
        end = matches[i + 1].start() if i + 1 < len(matches) else len(text)
        found = _HASH_LINE.search(text, match.end(), end)
        entries[(match["name"], int(match["version"]))] = found["hash"] if found else ""
    return entries


def bash_syntax(code: str) -> str | None:
    """`bash -n` on a snippet: None when it parses, else bash's message."""
    proc = subprocess.run(["bash", "-n"], input=code, capture_output=True, text=True, check=False)
    return None if proc.returncode == 0 else proc.stderr.strip()


def lock_images(root: Path) -> dict[str, LockedImage]:
    """The lock file's images, or none when nothing has been pushed yet (no lock file)."""
    return read_lock(root) if (root / LOCK_PATH).exists() else {}


def validated_image(images: dict[str, LockedImage], variant: str) -> tuple[str, str]:
    """(image, image_digest) a header must carry for `variant` given the lock file."""
    image = images.get(variant)
    return (image.tagged, image.digest) if image else (UNRELEASED, UNRELEASED)


def header_problems(book: Runbook, images: dict[str, LockedImage], changelog: dict) -> list[str]:
    """Version, hash, date and image of one runbook's header."""
    header, where = book.header, str(book.path)
    problems = []
    if not isinstance(header["version"], int) or header["version"] < 1:
        problems.append(f"{where}: version must be a positive integer")
        return problems
    try:
        datetime.date.fromisoformat(str(header["date"]))
    except ValueError:
        problems.append(f"{where}: date {header['date']!r} is not YYYY-MM-DD")
    actual = procedure_hash(book.body)
    if header["procedure_sha256"] != actual:
        problems.append(
            f"{where}: the procedure changed since v{book.version} was stamped; run "
            "`python -m tools.runbooks stamp --message '<what changed>'` to bump its version"
        )
    recorded = changelog.get((book.name, book.version))
    if recorded is None:
        problems.append(f"{where}: {CHANGELOG} has no entry `## {book.name} v{book.version} — <date>`")
    elif recorded != header["procedure_sha256"]:
        problems.append(f"{where}: {CHANGELOG} entry for {book.name} v{book.version} records another hash")
    wanted = validated_image(images, str(header["image_variant"]))
    if (header["image"], header["image_digest"]) != wanted:
        problems.append(
            f"{where}: validated against {header['image']}@{header['image_digest']}, but the lock file now "
            f"has {wanted[0]}@{wanted[1]} for {header['image_variant']}; re-validate, then "
            "`python -m tools.runbooks stamp`"
        )
    return problems


def page_command_problems(root: Path, refs: RefChecker) -> list[str]:
    """The shell blocks of the READMEs and docs/ pages (not docs/gpu-runs/), checked as a runbook's are:
    `bash -n`, project references, and a trainer's `docker run` given the time to save."""
    problems = []
    for page in reference_pages(root):
        text = page.read_text(encoding="utf-8")
        for match in _SHELL_BLOCK.finditer(text):
            where = f"{page.relative_to(root)}:{text.count(chr(10), 0, match.start()) + 2}"
            error = bash_syntax(match["code"])
            if error:
                problems.append(f"{where}: bash -n: {error}")
                continue
            problems += [f"{where}: {p}" for p in refs.check_code(match["code"])]
            problems += stop_timeout_problems(match["code"], where)
    return problems


def check_runbooks(
    root: str | Path,
    cli: argparse.ArgumentParser,
    tasks: Mapping[str, argparse.ArgumentParser] | None = None,
) -> list[str]:
    """Every problem in every runbook: headers, versions, shell syntax and project references (the
    `python -m trm` commands against `cli`, the full parser of `trm.commands`; `python -m tools.<task>`
    against `tasks`, see RefChecker); and in every documentation page (READMEs, docs/, runbooks): stale
    measured figures, broken relative links, and the shell blocks of the READMEs and docs/."""
    root = Path(root)
    books = load_all(root / RUNBOOKS_DIR)
    images = lock_images(root)
    changelog_path = root / CHANGELOG
    if not changelog_path.exists():
        raise TRMError(f"{changelog_path} is missing; create it with `python -m tools.runbooks stamp`.")
    changelog = changelog_entries(changelog_path.read_text(encoding="utf-8"))
    refs = RefChecker(root, cli, tasks)
    problems = stale_figures(root) + broken_links(root) + page_command_problems(root, refs)
    for book in books:
        problems += header_problems(book, images, changelog)
        problems += journey_problems(book)
        for block in book.blocks:
            if block.tier is None:
                continue
            error = bash_syntax(block.code)
            if error:
                problems.append(f"{block.where}: bash -n: {error}")
                continue
            problems += [f"{block.where}: {p}" for p in refs.check_code(block.code)]
    return problems


def stamp(root: str | Path, message: str, *, today: datetime.date | None = None) -> list[str]:
    """Bump every runbook whose procedure or validated image changed; return what was bumped."""
    root = Path(root)
    today = today or datetime.datetime.now(datetime.UTC).date()
    images = lock_images(root)
    changelog_path = root / CHANGELOG
    text = changelog_path.read_text(encoding="utf-8") if changelog_path.exists() else "# Runbook changelog\n"
    known = changelog_entries(text)
    new_entries = []
    bumped = []
    for book in load_all(root / RUNBOOKS_DIR):
        header = dict(book.header)
        tagged, image_digest = validated_image(images, str(header["image_variant"]))
        digest = procedure_hash(book.body)
        same_image = (header["image"], header["image_digest"]) == (tagged, image_digest)
        if header["procedure_sha256"] == digest and same_image and (book.name, book.version) in known:
            continue
        if (book.name, book.version) in known:
            header["version"] = book.version + 1
        image_line = (
            f"validated against `{tagged}@{image_digest}`"
            if image_digest != UNRELEASED
            else f"no `{header['image_variant']}` image pushed yet (header: unreleased)"
        )
        header.update(
            date=today.isoformat(), image=tagged, image_digest=image_digest, procedure_sha256=digest
        )
        atomic_write_text(book.path, render_header(header) + book.body)
        new_entries.append(
            f"## {book.name} v{header['version']} — {today.isoformat()}\n\n"
            f"- {message}\n- procedure sha256 `{digest}`\n- {image_line}\n"
        )
        bumped.append(f"{book.name} v{header['version']}")
    if new_entries:
        head, sep, rest = text.partition("\n## ")
        body = "\n".join(new_entries) + ("\n## " + rest if sep else "")
        atomic_write_text(changelog_path, head.rstrip("\n") + "\n\n" + body.rstrip("\n") + "\n")
    return bumped
