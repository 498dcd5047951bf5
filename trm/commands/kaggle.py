"""`python -m trm kaggle publish BUNDLE --owner OWNER`: a bundle as Kaggle datasets and a notebook."""

from __future__ import annotations

import argparse


def _publish(args: argparse.Namespace) -> int:
    import math

    from trm.errors import TRMError
    from trm.kaggle.publish import Publisher, PublishOptions, check_options, dry_run_lines, stage

    opts = PublishOptions(
        owner=args.owner,
        slug=args.slug,
        competition=args.competition or None,
        challenges_name=args.challenges_name,
        max_minutes=args.max_minutes,
        adapt_minutes=args.adapt_minutes or None,
        license_name=args.license,
        public=args.public,
        machine_shape=args.machine_shape,
        version_notes=args.notes,
    )
    check_options(opts)  # bad flags stop here, before the client is loaded or anything is written
    if not math.isfinite(args.wait_minutes) or args.wait_minutes < 0:
        raise TRMError(f"--wait-minutes {args.wait_minutes}: must be a number of minutes, 0 or more")
    api = None
    if not args.dry_run:
        from trm.kaggle.client import load_api

        api = load_api()  # no credentials: one line, exit 2, before anything is written
    plan = stage(args.bundle, args.out, opts, overwrite=args.overwrite)
    print(f"wrote {plan.folder}: {plan.weights} (weights/), {plan.wheels} (wheels/), {plan.kernel} (kernel/)")
    if api is None:
        print("\n".join(dry_run_lines(plan, args.wait_minutes, args.quiet)))
        return 0
    Publisher(api, plan, quiet=args.quiet).run(args.wait_minutes)
    print(f"published: open https://www.kaggle.com/code/{plan.kernel} and submit it to the competition")
    return 0


def configure(parser: argparse.ArgumentParser) -> None:
    targets = parser.add_subparsers(dest="kaggle_command", metavar="SUBCOMMAND", required=True)
    pub = targets.add_parser(
        "publish",
        help="publish a bundle: weights and wheelhouse datasets and an offline notebook, with the kaggle client",
        description=(
            "Stage OUT (atomically): weights/ and wheels/ (the bundle's files, each with Kaggle's "
            "dataset-metadata.json) and kernel/ (a notebook that installs the wheelhouse offline and runs "
            "`python -m trm infer`, with kernel-metadata.json: GPU on, internet off, the datasets and the "
            "competition attached). Then, with the official kaggle client and its own credentials, create or "
            "version OWNER/SLUG-weights and OWNER/SLUG-wheels, wait until they are ready and push "
            "OWNER/SLUG-submission. Exit 2: no credentials, a bad flag or bundle (nothing written); exit 4: a "
            "Kaggle call failed."
        ),
    )
    pub.add_argument(
        "bundle", help="a bundle folder written by `python -m trm package kaggle` (with its wheels/)"
    )
    pub.add_argument(
        "--owner", required=True, help="Kaggle user (or organisation) that owns the datasets and notebook"
    )
    pub.add_argument(
        "--slug",
        default="trm-arc",
        help="base name: datasets SLUG-weights and SLUG-wheels, notebook SLUG-submission (default trm-arc)",
    )
    pub.add_argument(
        "--competition",
        default="arc-prize-2025",
        help="competition whose data the notebook reads (default arc-prize-2025; '' for none)",
    )
    pub.add_argument(
        "--challenges-name",
        default="arc-agi_test_challenges.json",
        help="the competition's challenges file the notebook looks for under /kaggle/input",
    )
    pub.add_argument(
        "--max-minutes", type=float, default=600, help="the notebook's `infer --max-minutes` (default 600)"
    )
    pub.add_argument(
        "--adapt-minutes",
        type=float,
        default=300,
        help="the notebook's `infer --adapt-minutes`, within --max-minutes (default 300; 0: no adaptation)",
    )
    pub.add_argument(
        "--license",
        default="other",
        help="licence name of the weights dataset (Kaggle's names; default other)",
    )
    pub.add_argument(
        "--public", action="store_true", help="make the datasets and the notebook public (default private)"
    )
    pub.add_argument(
        "--machine-shape",
        default=None,
        help="kernel-metadata machine_shape, e.g. NvidiaL4 (default: Kaggle's GPU)",
    )
    pub.add_argument(
        "--notes", default=None, help="version notes of new dataset versions (default: checkpoint and step)"
    )
    pub.add_argument(
        "--out", default=None, help="publish folder to create (default: BUNDLE-publish beside the bundle)"
    )
    pub.add_argument(
        "--overwrite", action="store_true", help="replace an earlier publish folder of this command at OUT"
    )
    pub.add_argument(
        "--wait-minutes",
        type=float,
        default=15,
        help="how long to wait for the datasets to be processed before pushing the notebook (default 15)",
    )
    pub.add_argument(
        "--dry-run",
        action="store_true",
        help="stage OUT and print the kaggle client calls instead of making them (no client, no credentials)",
    )
    pub.add_argument("--quiet", action="store_true", help="no upload progress bars")
    pub.set_defaults(func=_publish)
