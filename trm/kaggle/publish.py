"""`python -m trm kaggle publish BUNDLE --owner OWNER`: a bundle as two Kaggle datasets and a kernel.

The publish folder (OUT, default `BUNDLE-publish` beside the bundle) is staged and renamed into place
atomically, carries the creation marker, and holds one upload folder per Kaggle object:

  weights/  the bundle's model.pt, config.json, identifiers.json, README.md, manifest.json and
            dataset-metadata.json: the weights dataset OWNER/SLUG-weights
  wheels/   the bundle's wheelhouse (requirements.txt, the wheels) and dataset-metadata.json:
            the wheelhouse dataset OWNER/SLUG-wheels (a separate dataset: it changes with the
            dependencies, not with every checkpoint)
  kernel/   SLUG-submission.ipynb (trm.kaggle.notebook) and kernel-metadata.json: the notebook
            OWNER/SLUG-submission, GPU on, internet off, both datasets and the competition attached

Bundle files are hard links where the filesystem allows (copies otherwise), after every file of the
bundle was checked against its manifest's sha256. Every metadata file is checked against Kaggle's
documented format (trm.kaggle.metadata) and the folder by the secret scan before anything is sent.

Then the kaggle client (trm.kaggle.client) creates each dataset, or versions it when it exists, waits
until both are ready, and pushes the kernel. `--dry-run` stages the folder and prints the client calls
instead, without loading the client or any credentials.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trm.errors import TRMError
from trm.io import atomic_directory, atomic_write_json, atomic_write_text, sha256_file
from trm.kaggle import bundle as B
from trm.kaggle import metadata as M
from trm.kaggle.notebook import KernelSettings, render_notebook

KIND = "kaggle-publish"  # the kind of output in the publish folder's creation marker (trm.safe_remove)
WEIGHTS_DIR, WHEELS_DIR, KERNEL_DIR = "weights", "wheels", "kernel"
OWN_WHEEL = "trm_stack-"
DEFAULT_COMPETITION = "arc-prize-2025"
DEFAULT_SLUG = "trm-arc"
KERNEL_SUFFIX = "-submission"
SLUG_LONGEST = 50 - len(KERNEL_SUFFIX)  # Kaggle slugs are at most 50 characters
POLL_SECONDS = 10.0


@dataclass(frozen=True)
class PublishOptions:
    """What to publish under which names (the flags of `python -m trm kaggle publish`)."""

    owner: str
    slug: str = DEFAULT_SLUG
    competition: str | None = DEFAULT_COMPETITION
    challenges_name: str = "arc-agi_test_challenges.json"
    max_minutes: float = 600
    adapt_minutes: float | None = 300
    license_name: str = "other"
    public: bool = False
    machine_shape: str | None = None
    version_notes: str | None = None


@dataclass(frozen=True)
class Plan:
    """The staged publish folder: the upload folders, their Kaggle ids, and how to version them."""

    folder: Path
    weights: str
    wheels: str
    kernel: str
    version_notes: str
    public: bool

    def dataset_folders(self) -> list[tuple[str, Path]]:
        return [(self.weights, self.folder / WEIGHTS_DIR), (self.wheels, self.folder / WHEELS_DIR)]

    @property
    def kernel_folder(self) -> Path:
        return self.folder / KERNEL_DIR


def check_options(opts: PublishOptions) -> tuple[str, str, str]:
    """The flags checked (TRMError naming the flag) before anything is read or sent; returns the
    (weights dataset, wheelhouse dataset, kernel) ids: OWNER/SLUG-weights, -wheels, -submission."""
    owner = M.check_owner(opts.owner)
    slug = M.check_slug(opts.slug, "--slug", longest=SLUG_LONGEST)
    if opts.license_name not in M.LICENSES:
        raise TRMError(f"--license {opts.license_name!r}: use one of Kaggle's: {', '.join(M.LICENSES)}")
    if opts.competition is not None:
        M.check_slug(opts.competition, "--competition", longest=50)
    if not math.isfinite(opts.max_minutes) or opts.max_minutes <= 0:
        raise TRMError(f"--max-minutes {opts.max_minutes}: must be a positive number of minutes")
    if opts.adapt_minutes is not None and not 0 < opts.adapt_minutes < opts.max_minutes:
        raise TRMError(
            f"--adapt-minutes {opts.adapt_minutes}: must be positive and below --max-minutes "
            f"{opts.max_minutes:g} (it counts within it), or 0 for no adaptation"
        )
    if not opts.challenges_name or "/" in opts.challenges_name:
        raise TRMError(
            f"--challenges-name {opts.challenges_name!r}: a file name, e.g. arc-agi_test_challenges.json"
        )
    return f"{owner}/{slug}-weights", f"{owner}/{slug}-wheels", f"{owner}/{slug}{KERNEL_SUFFIX}"


def _verified_manifest(bundle: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """(config, manifest) of a bundle whose every listed file matches its sha256, wheelhouse included."""
    config = B.read_config(bundle)  # format, and the files inference reads
    manifest = json.loads((bundle / B.MANIFEST).read_text(encoding="utf-8"))
    fix = f"re-run `python -m trm package kaggle CHECKPOINT {bundle} --overwrite`"
    for name, entry in manifest["files"].items():
        path = bundle / name
        if not path.is_file() or not isinstance(entry, dict) or sha256_file(path) != entry.get("sha256"):
            raise TRMError(f"{path}: missing or its sha256 differs from {bundle}/{B.MANIFEST}; {fix}")
    wheels = [n for n in manifest["files"] if n.startswith(f"{B.WHEELS}/")]
    if f"{B.WHEELS}/requirements.txt" not in wheels or not any(
        n.split("/", 1)[1].startswith(OWN_WHEEL) and n.endswith(".whl") for n in wheels
    ):
        raise TRMError(
            f"{bundle}: no wheelhouse (wheels/ with requirements.txt and the trm-stack wheel), so an offline "
            f"kernel could not install trm-stack; re-run `python -m trm package kaggle` without --no-wheels"
        )
    return config, manifest


def _link(src: Path, dst: Path) -> None:
    """`dst` as a hard link to `src` (a copy across filesystems or where links are not allowed)."""
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


def _descriptions(config: dict[str, Any], bundle: Path, plan_refs: tuple[str, str, str]) -> tuple[str, str]:
    weights, wheels, kernel = plan_refs
    src, arch = config["source"], config["arch"]
    weights_text = (
        f"Weights of a {config.get('arch_name', 'trm').upper()} model (hidden_size {arch['hidden_size']}) from "
        f"`{src['checkpoint']}` (step {src['step']}), packaged by trm-stack {config['created']['trm_stack']} "
        f"as a Kaggle bundle (`{bundle.name}`): model.pt, config.json, identifiers.json when shipped, and "
        "manifest.json with the sha256 of every file. The offline wheelhouse is the dataset "
        f"`{wheels}`; the notebook `{kernel}` installs it and writes the submission with "
        "`python -m trm infer`. Licence: as chosen by the publisher (see the licence field)."
    )
    wheels_text = (
        "trm-stack and its pinned runtime dependencies as wheels for CPython on manylinux x86_64, installed "
        f"offline with `pip install --no-index` by the notebook `{kernel}` (weights: `{weights}`). Each "
        "wheel keeps its own licence."
    )
    return weights_text, wheels_text


def _write_dataset(folder: Path, meta: dict[str, Any]) -> None:
    path = folder / M.DATASET_METADATA
    M.require_valid(M.dataset_problems(meta, creating=True), path)
    atomic_write_json(path, meta)


def stage(
    bundle: str | Path, out: str | Path | None, opts: PublishOptions, *, overwrite: bool = False
) -> Plan:
    """Write the publish folder for `bundle` (see the module doc); returns the plan of what to send."""
    from trm.secrets import require_no_secrets

    bundle = Path(bundle)
    weights_ref, wheels_ref, kernel_ref = check_options(opts)
    config, manifest = _verified_manifest(bundle)
    out = Path(out) if out is not None else bundle.with_name(f"{bundle.name}-publish")
    src = config["source"]
    notes = (
        opts.version_notes
        or f"trm-stack {config['created']['trm_stack']}: {src['checkpoint']} step {src['step']}"
    )
    weights_text, wheels_text = _descriptions(config, bundle, (weights_ref, wheels_ref, kernel_ref))
    staging = {"kind": KIND, "tool": "trm kaggle publish", "sources": [bundle]}
    with atomic_directory(out, overwrite=overwrite, flag="--out", **staging) as tmp:
        for sub in (WEIGHTS_DIR, WHEELS_DIR, KERNEL_DIR):
            (tmp / sub).mkdir()
        for name in [*manifest["files"], B.MANIFEST]:
            inside_wheels = name.startswith(f"{B.WHEELS}/")
            target = tmp / (WHEELS_DIR if inside_wheels else WEIGHTS_DIR) / name.split("/")[-1]
            _link(bundle / name, target)
        _write_dataset(
            tmp / WEIGHTS_DIR,
            M.dataset_metadata(
                weights_ref,
                f"{opts.slug} weights",
                "Tiny Recursive Model weights for offline ARC Prize inference",
                weights_text,
                opts.license_name,
            ),
        )
        _write_dataset(
            tmp / WHEELS_DIR,
            M.dataset_metadata(
                wheels_ref,
                f"{opts.slug} wheels",
                "trm-stack and its pinned dependencies as offline wheels",
                wheels_text,
                "other",
            ),
        )
        settings = KernelSettings(
            weights_ref, wheels_ref, opts.challenges_name, opts.max_minutes, opts.adapt_minutes
        )
        code_file = f"{kernel_ref.split('/')[1]}.ipynb"
        atomic_write_text(tmp / KERNEL_DIR / code_file, render_notebook(settings, kernel_ref.split("/")[1]))
        kernel_meta = M.kernel_metadata(
            kernel_ref,
            code_file,
            [weights_ref, wheels_ref],
            opts.competition,
            private=not opts.public,
            machine_shape=opts.machine_shape,
        )
        M.require_valid(
            M.kernel_problems(kernel_meta, tmp / KERNEL_DIR), tmp / KERNEL_DIR / M.KERNEL_METADATA
        )
        atomic_write_json(tmp / KERNEL_DIR / M.KERNEL_METADATA, kernel_meta)
        require_no_secrets(tmp, f"kaggle publish {out}", skip=B.wheel_files(tmp, WHEELS_DIR))
    return Plan(out, weights_ref, wheels_ref, kernel_ref, notes, opts.public)


# The client calls, as (method, keyword arguments): what the publisher makes and --dry-run prints.
def create_call(plan: Plan, folder: Path, quiet: bool) -> tuple[str, dict[str, Any]]:
    return "dataset_create_new", {
        "folder": str(folder),
        "public": plan.public,
        "quiet": quiet,
        "dir_mode": "skip",
    }


def version_call(plan: Plan, folder: Path, quiet: bool) -> tuple[str, dict[str, Any]]:
    kwargs = {"folder": str(folder), "version_notes": plan.version_notes, "quiet": quiet, "dir_mode": "skip"}
    return "dataset_create_version", kwargs


def push_call(plan: Plan) -> tuple[str, dict[str, Any]]:
    return "kernels_push", {"folder": str(plan.kernel_folder)}


def _shown(call: tuple[str, dict[str, Any]]) -> str:
    name, kwargs = call
    return f"KaggleApi.{name}({', '.join(f'{k}={v!r}' for k, v in kwargs.items())})"


def dry_run_lines(plan: Plan, wait_minutes: float, quiet: bool) -> list[str]:
    """What a publish would call on the kaggle client, in order, and the same by hand with its CLI."""
    lines = ["dry run: nothing was sent; the kaggle client would be called as follows:"]
    for ref, folder in plan.dataset_folders():
        lines += [
            f"  KaggleApi.dataset_status({ref!r}): when {ref} exists, {_shown(version_call(plan, folder, quiet))}",
            f"    else {_shown(create_call(plan, folder, quiet))}",
        ]
    lines += [
        f"  KaggleApi.dataset_status(...) every {POLL_SECONDS:.0f} s until both are 'ready' (at most "
        f"{wait_minutes:g} min)",
        f"  {_shown(push_call(plan))}",
        "by hand with the kaggle CLI (`datasets version` instead of `create` for one that exists):",
    ]
    public = " --public" if plan.public else ""
    for ref, folder in plan.dataset_folders():
        lines.append(
            f"  kaggle datasets create -p {folder}{public}   # or: kaggle datasets version -p {folder} "
            f"-m {plan.version_notes!r}   ({ref})"
        )
    lines.append(f"  kaggle kernels push -p {plan.kernel_folder}")
    return lines


class Publisher:
    """Runs a plan against an authenticated KaggleApi (the real one, or a test's stand-in)."""

    def __init__(
        self,
        api: Any,
        plan: Plan,
        *,
        quiet: bool = False,
        say: Callable[[str], None] = print,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.api, self.plan, self.quiet, self.say, self.sleep, self.clock = (
            api,
            plan,
            quiet,
            say,
            sleep,
            clock,
        )

    def _call(self, what: str, call: tuple[str, dict[str, Any]]) -> Any:
        from trm.kaggle.client import failure

        name, kwargs = call
        try:
            return getattr(self.api, name)(**kwargs)
        except Exception as err:
            raise failure(what, err) from None

    def exists(self, ref: str) -> bool:
        """Whether dataset `ref` exists (the client raises an HTTP 404 when it does not)."""
        from trm.kaggle.client import failure, http_status

        try:
            self.api.dataset_status(ref)
        except Exception as err:
            if http_status(err) == 404:
                return False
            raise failure(f"status of dataset {ref}", err) from None
        return True

    def dataset(self, ref: str, folder: Path) -> str:
        """Create `ref` from `folder`, or version it when it exists; returns its URL."""
        from trm.kaggle.client import PublishFailed

        existed = self.exists(ref)
        call = (version_call if existed else create_call)(self.plan, folder, self.quiet)
        result = self._call(f"{'version' if existed else 'create'} dataset {ref}", call)
        status = str(getattr(result, "status", "") or "").lower()
        error = getattr(result, "error", None) if result is not None else "no answer"
        if result is None or error or status != "ok":
            raise PublishFailed(
                f"{'version' if existed else 'create'} dataset {ref}: Kaggle answered {error!r}"
            )
        url = getattr(result, "url", "") or ""
        self.say(f"{'new version of' if existed else 'created'} dataset {ref}: {url}")
        return url

    def wait_ready(self, refs: list[str], minutes: float) -> None:
        """Poll the datasets' status until every one is 'ready'; PublishFailed after `minutes` or on an error."""
        from trm.kaggle.client import PublishFailed, failure

        deadline = self.clock() + minutes * 60
        pending = list(refs)
        told = False
        while True:
            for ref in list(pending):
                try:
                    status = str(self.api.dataset_status(ref)).lower()
                except Exception as err:
                    raise failure(f"status of dataset {ref}", err) from None
                if status == "ready":
                    pending.remove(ref)
                elif status in ("failed", "deleted"):
                    raise PublishFailed(
                        f"dataset {ref}: Kaggle reports it {status}; look at it on kaggle.com"
                    )
            if not pending:
                return
            if self.clock() >= deadline:
                raise PublishFailed(
                    f"dataset {', '.join(pending)} still processing after {minutes:g} min; push the kernel when "
                    f"it is ready: kaggle kernels push -p {self.plan.kernel_folder}"
                )
            if not told:  # one line, so a quiet terminal for minutes is not taken for a hang
                self.say(
                    f"waiting for Kaggle to process dataset {', '.join(pending)}: checked every "
                    f"{POLL_SECONDS:.0f} s, at most {minutes:g} min (--wait-minutes)"
                )
                told = True
            self.sleep(POLL_SECONDS)

    def kernel(self) -> str:
        """Push the kernel; returns its URL."""
        from trm.kaggle.client import PublishFailed

        result = self._call(f"push kernel {self.plan.kernel}", push_call(self.plan))
        if result is None or getattr(result, "error", None):
            error = getattr(result, "error", None) if result is not None else "no answer"
            raise PublishFailed(f"push kernel {self.plan.kernel}: Kaggle answered {error!r}")
        invalid = [s for s in getattr(result, "invalid_dataset_sources", None) or []]
        invalid += [s for s in getattr(result, "invalid_competition_sources", None) or []]
        if invalid:
            raise PublishFailed(
                f"push kernel {self.plan.kernel}: Kaggle could not attach {', '.join(invalid)}; check the "
                "dataset ids and that you joined the competition"
            )
        version = getattr(result, "version_number", None)
        url = getattr(result, "url", "") or ""
        self.say(
            f"pushed kernel {self.plan.kernel}" + (f" (version {version})" if version else "") + f": {url}"
        )
        return url

    def run(self, wait_minutes: float) -> None:
        for ref, folder in self.plan.dataset_folders():
            self.dataset(ref, folder)
        self.wait_ready([self.plan.weights, self.plan.wheels], wait_minutes)
        self.kernel()
