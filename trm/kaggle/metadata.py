"""Kaggle's `dataset-metadata.json` and `kernel-metadata.json`: written for a publish, checked against the
fields and values Kaggle's client documentation gives (docs/datasets_metadata.md and
docs/kernels_metadata.md of the kaggle-api repository), and the limits its client enforces before it
sends anything.

Datasets (`kaggle datasets create` / `version`): `id` is `owner/slug`; `title` 6-50 characters; the slug
6-50 characters (the documentation says 3-50, the client refuses fewer than 6); `subtitle`, when given,
20-80 characters; `licenses` exactly one entry whose `name` is one of the documented licence names;
`keywords` a list of strings; other documented keys: `description`, `id_no`, `resources`,
`expectedUpdateFrequency`, `userSpecifiedSources`, `image`. Kernels (`kaggle kernels push`): `id`
`owner/slug`, `title` (at least 5 characters; the slug is the title lowercased with dashes), `code_file`
relative to the metadata file, `language` python | r | rmarkdown, `kernel_type` script | notebook,
`is_private` / `enable_gpu` / `enable_tpu` / `enable_internet` booleans (true/false or "true"/"false"),
`dataset_sources` `owner/slug` strings, `competition_sources` slugs, `kernel_sources`, `model_sources`,
`machine_shape` a string. Unknown keys are refused: a typo would otherwise be ignored silently.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from trm.errors import TRMError

DATASET_METADATA = "dataset-metadata.json"
KERNEL_METADATA = "kernel-metadata.json"

# The licence names Kaggle's dataset metadata documentation lists.
LICENSES = (
    "CC0-1.0", "CC-BY-SA-3.0", "CC-BY-SA-4.0", "CC-BY-NC-SA-4.0", "GPL-2.0", "ODbL-1.0", "DbCL-1.0",
    "copyright-authors", "other", "unknown", "CC-BY-4.0", "CC-BY-NC-4.0", "PDDL", "CC-BY-3.0",
    "CC-BY-3.0-IGO", "US-Government-Works", "CC-BY-NC-SA-3.0-IGO", "CDLA-Permissive-1.0",
    "CDLA-Sharing-1.0", "CC-BY-ND-4.0", "CC-BY-NC-ND-4.0", "ODC-BY-1.0", "LGPL-3.0", "AGPL-3.0",
    "FDL-1.3", "EU-ODP-Legal-Notice", "apache-2.0", "GPL-3.0",
)  # fmt: skip
DATASET_KEYS = (
    "title", "subtitle", "description", "id", "id_no", "licenses", "resources", "keywords",
    "expectedUpdateFrequency", "userSpecifiedSources", "image",
)  # fmt: skip
UPDATE_FREQUENCIES = (
    "not specified",
    "never",
    "annually",
    "quarterly",
    "monthly",
    "weekly",
    "daily",
    "hourly",
)
KERNEL_KEYS = (
    "id", "id_no", "title", "code_file", "language", "kernel_type", "is_private", "enable_gpu", "enable_tpu",
    "enable_internet", "dataset_sources", "competition_sources", "kernel_sources", "model_sources",
    "machine_shape", "keywords", "docker_image_pinning_type",
)  # fmt: skip
LANGUAGES = ("python", "r", "rmarkdown")
KERNEL_TYPES = ("script", "notebook")
BOOLEANS = ("is_private", "enable_gpu", "enable_tpu", "enable_internet")
# Our slugs: lowercase letters, digits and single dashes, so a title equal to the slug maps to itself.
SLUG = re.compile(r"^[a-z0-9]+(-[a-z0-9]+)*$")


def _ref_problem(value: Any, key: str) -> str | None:
    if not isinstance(value, str) or value.count("/") != 1 or not all(value.split("/")):
        return f"`{key}` {value!r} is not `owner/slug`"
    return None


def _length_problem(value: Any, key: str, low: int, high: int) -> str | None:
    if not isinstance(value, str) or not low <= len(value) <= high:
        return f"`{key}` {value!r} must be a string of {low}-{high} characters"
    return None


def dataset_problems(meta: dict[str, Any], *, creating: bool) -> list[str]:
    """What in a dataset-metadata.json Kaggle's documentation (or its client) does not accept."""
    problems = [
        f"unknown key `{k}` (documented: {', '.join(DATASET_KEYS)})" for k in meta if k not in DATASET_KEYS
    ]
    if "id" not in meta and "id_no" not in meta:
        problems.append("one of `id` or `id_no` is required")
    if "id" in meta:
        if (why := _ref_problem(meta["id"], "id")) is not None:
            problems.append(why)
        else:
            problems.append(_length_problem(meta["id"].split("/")[1], "id's slug", 6, 50) or "")
    if creating or "title" in meta:
        problems.append(_length_problem(meta.get("title"), "title", 6, 50) or "")
    if "subtitle" in meta:
        problems.append(_length_problem(meta["subtitle"], "subtitle", 20, 80) or "")
    if "description" in meta and not isinstance(meta["description"], str):
        problems.append("`description` must be a string")
    licenses = meta.get("licenses")
    if creating or licenses is not None:
        if not isinstance(licenses, list) or len(licenses) != 1 or not isinstance(licenses[0], dict):
            problems.append('`licenses` must hold exactly one entry {"name": …}')
        elif licenses[0].get("name") not in LICENSES:
            problems.append(
                f"licence {licenses[0].get('name')!r} is not one of Kaggle's: {', '.join(LICENSES)}"
            )
    keywords = meta.get("keywords", [])
    if not isinstance(keywords, list) or not all(isinstance(k, str) for k in keywords):
        problems.append("`keywords` must be a list of strings")
    if meta.get("expectedUpdateFrequency", "never") not in UPDATE_FREQUENCIES:
        problems.append(f"`expectedUpdateFrequency` must be one of {', '.join(UPDATE_FREQUENCIES)}")
    return [p for p in problems if p]


def _is_boolean(value: Any) -> bool:
    return isinstance(value, bool) or value in ("true", "false")


def kernel_problems(meta: dict[str, Any], folder: Path) -> list[str]:
    """What in a kernel-metadata.json (in `folder`) Kaggle's documentation (or its client) does not accept."""
    problems = [
        f"unknown key `{k}` (documented: {', '.join(KERNEL_KEYS)})" for k in meta if k not in KERNEL_KEYS
    ]
    if "id" not in meta and "id_no" not in meta:
        problems.append("one of `id` or `id_no` is required")
    if "id" in meta:
        problems.append(_ref_problem(meta["id"], "id") or "")
    title = meta.get("title")
    if title is not None and (not isinstance(title, str) or len(title) < 5):
        problems.append(f"`title` {title!r} must be a string of at least 5 characters")
    elif isinstance(title, str) and isinstance(meta.get("id"), str) and "/" in meta["id"]:
        slug = re.sub(r"[^a-z0-9]+", "-", title.lower()).strip("-")
        if slug != meta["id"].split("/")[1]:
            problems.append(
                f"`title` {title!r} gives the slug {slug!r}, not the id's {meta['id'].split('/')[1]!r}"
            )
    code = meta.get("code_file")
    if not isinstance(code, str) or not code:
        problems.append("`code_file` is required")
    elif not (folder / code).is_file():
        problems.append(f"`code_file` {code!r}: no such file next to {KERNEL_METADATA}")
    if meta.get("language") not in LANGUAGES:
        problems.append(f"`language` must be one of {', '.join(LANGUAGES)}")
    if meta.get("kernel_type") not in KERNEL_TYPES:
        problems.append(f"`kernel_type` must be one of {', '.join(KERNEL_TYPES)}")
    problems += [f"`{k}` must be true or false" for k in BOOLEANS if k in meta and not _is_boolean(meta[k])]
    for key in ("dataset_sources", "kernel_sources"):
        sources = meta.get(key, [])
        if not isinstance(sources, list):
            problems.append(f"`{key}` must be a list")
        else:
            problems += [why for s in sources if (why := _ref_problem(s, key)) is not None]
    for key in ("competition_sources", "model_sources", "keywords"):
        values = meta.get(key, [])
        if not isinstance(values, list) or not all(isinstance(v, str) and v for v in values):
            problems.append(f"`{key}` must be a list of non-empty strings")
    if "machine_shape" in meta and not isinstance(meta["machine_shape"], str):
        problems.append("`machine_shape` must be a string")
    return [p for p in problems if p]


def require_valid(problems: list[str], path: Path) -> None:
    """TRMError (one line) naming the metadata file and its first problem."""
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise TRMError(
            f"{path}: {problems[0]}{more}; this is Kaggle's documented metadata format: fix the flag"
        )


def check_slug(value: str, flag: str, *, longest: int) -> str:
    """A slug of ours: lowercase letters, digits and dashes, 3..`longest` characters."""
    if not SLUG.match(value) or not 3 <= len(value) <= longest:
        raise TRMError(
            f"{flag} {value!r}: use 3-{longest} lowercase letters, digits and single dashes (Kaggle derives "
            "slugs from titles this way), e.g. trm-arc"
        )
    return value


def check_owner(value: str) -> str:
    """A Kaggle user or organisation name (the first half of every id)."""
    if not value or not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_-]*", value):
        raise TRMError(
            f"--owner {value!r}: pass your Kaggle user name (or an organisation's), e.g. --owner alice"
        )
    return value


def dataset_metadata(
    ref: str, title: str, subtitle: str, description: str, license_name: str
) -> dict[str, Any]:
    """One dataset's metadata (`id`, `title`, `subtitle`, `description`, one licence; no keywords: Kaggle
    drops those that are not existing tags)."""
    return {
        "id": ref,
        "title": title,
        "subtitle": subtitle,
        "description": description,
        "licenses": [{"name": license_name}],
    }


def kernel_metadata(
    ref: str,
    code_file: str,
    datasets: list[str],
    competition: str | None,
    *,
    private: bool,
    machine_shape: str | None,
) -> dict[str, Any]:
    """A notebook kernel with GPU on and internet off, the datasets (and competition) attached; the title
    is the slug, so Kaggle keeps the id. Booleans as the documentation's example writes them."""
    meta: dict[str, Any] = {
        "id": ref,
        "title": ref.split("/")[1],
        "code_file": code_file,
        "language": "python",
        "kernel_type": "notebook",
        "is_private": "true" if private else "false",
        "enable_gpu": "true",
        "enable_tpu": "false",
        "enable_internet": "false",
        "dataset_sources": list(datasets),
        "competition_sources": [competition] if competition else [],
        "kernel_sources": [],
        "model_sources": [],
    }
    if machine_shape:
        meta["machine_shape"] = machine_shape
    return meta
