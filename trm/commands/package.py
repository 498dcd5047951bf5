"""`python -m trm package kaggle CHECKPOINT OUT_DIR`: an offline Kaggle dataset from a checkpoint."""

from __future__ import annotations

import argparse


def _kaggle(args: argparse.Namespace) -> int:
    from pathlib import Path

    from trm.hub.ref import is_hub_ref, refuse_best
    from trm.kaggle.package import newest_in_run_dir, package_kaggle

    refuse_best(args.checkpoint, args.best)
    if is_hub_ref(args.checkpoint):
        checkpoint = args.checkpoint  # resolved (downloaded, commit recorded) by package_kaggle
    elif args.best:
        from trm.training.checkpointing.best import best_checkpoint

        best = best_checkpoint(Path(args.checkpoint), args.metric)
        checkpoint = best.info.path
        print(
            f"packaging {checkpoint}, the best checkpoint of run {args.checkpoint} ({best.metric} = {best.value:.6g})"
        )
    else:
        checkpoint = newest_in_run_dir(Path(args.checkpoint))
        if checkpoint != Path(args.checkpoint):
            print(f"packaging {checkpoint}, the newest complete checkpoint of run {args.checkpoint}")
    manifest = package_kaggle(
        checkpoint,
        args.out_dir,
        overrides=args.overrides,
        data_path=args.data_path,
        identifiers=not args.no_identifiers,
        wheels=not args.no_wheels,
        python_version=args.python_version,
        platforms=tuple(args.platform) if args.platform else None,
        include_torch=args.include_torch,
        overwrite=args.overwrite,
        progress=not args.quiet,
        out_name="OUT_DIR",  # the positional argument, so named in the usage line
    )
    files = manifest["files"]
    total = sum(f["bytes"] for f in files.values())
    wheels = sum(1 for name in files if name.endswith(".whl"))
    print(f"wrote {args.out_dir}: {len(files)} files, {total / 2**20:.1f} MiB ({wheels} wheels)")
    if "identifiers.json" not in files:
        print(
            "note: no identifiers.json: every task uses the mean puzzle-embedding row (pass --data-path "
            "DATASET to let tasks seen in training use their trained rows)"
        )
    print(f"next: upload it as a Kaggle dataset; see {args.out_dir}/README.md")
    return 0


class _IntermixedParser(argparse.ArgumentParser):
    """Accepts `key=value` overrides anywhere, also after flags (argparse stops at the first flag)."""

    _inside = False

    def parse_known_args(self, args=None, namespace=None):  # type: ignore[override]
        if self._inside:
            return super().parse_known_args(args, namespace)
        self._inside = True
        try:
            return self.parse_known_intermixed_args(args, namespace)
        finally:
            self._inside = False


def configure(parser: argparse.ArgumentParser) -> None:
    targets = parser.add_subparsers(
        dest="package_target", metavar="TARGET", required=True, parser_class=_IntermixedParser
    )
    kaggle = targets.add_parser(
        "kaggle",
        help="weights + config + offline wheelhouse as a Kaggle dataset folder",
        description=(
            "Write OUT_DIR (atomically): model.pt (EMA weights when present), config.json, identifiers.json, "
            "wheels/ for the target Python, README.md and manifest.json with sha256s."
        ),
    )
    kaggle.add_argument(
        "checkpoint",
        metavar="CHECKPOINT",
        help="our step_N/ folder (or a run directory: its newest complete one), an upstream step_N file, or "
        "hf://ORG/NAME[/DIR][@REVISION] (our published layout or upstream's step_N layout)",
    )
    kaggle.add_argument("out_dir", metavar="OUT_DIR", help="folder to create")
    kaggle.add_argument(
        "overrides",
        nargs="*",
        help="config overrides for upstream files (e.g. arch.hidden_size=512 arch.L_layers=2)",
    )
    kaggle.add_argument(
        "--data-path",
        default=None,
        help="dataset folder the checkpoint was trained on (identifiers.json; default: its data_paths); its "
        "files read must match its manifest, and its fingerprint the checkpoint's",
    )
    kaggle.add_argument(
        "--no-identifiers",
        action="store_true",
        help="ship only the mean puzzle-embedding row (small; every task is treated as unseen)",
    )
    kaggle.add_argument("--no-wheels", action="store_true", help="skip the offline wheelhouse")
    kaggle.add_argument("--python-version", default="3.11", help="target Python of the wheels (default 3.11)")
    kaggle.add_argument(
        "--platform",
        action="append",
        help="wheel platform tag, repeatable (default: every manylinux x86_64 tag up to glibc 2.35, as on Kaggle)",
    )
    kaggle.add_argument(
        "--include-torch", action="store_true", help="also ship torch (Kaggle images already have it)"
    )
    kaggle.add_argument(
        "--best",
        action="store_true",
        help="CHECKPOINT is a run directory: package its best checkpoint by --metric (`python -m trm best`)",
    )
    kaggle.add_argument(
        "--metric", default=None, help="with --best: the eval metric to rank by (default: the run's own)"
    )
    kaggle.add_argument(
        "--overwrite",
        action="store_true",
        help="replace an earlier bundle this command wrote at OUT_DIR (never a folder holding anything else, "
        "a run, a checkpoint or a dataset)",
    )
    kaggle.add_argument("--quiet", action="store_true", help="no progress bars")
    kaggle.set_defaults(func=_kaggle)
