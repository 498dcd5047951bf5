"""`python -m trm data …`: build, verify and import ARC, Sudoku and Maze datasets."""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from trm.data import formats
from trm.data.arc_source import DEFAULT_PREFIX


def _build_arc(args: argparse.Namespace) -> int:
    from trm.data.build_arc import build_arc_dataset
    from trm.data.manifest import MANIFEST

    started, wall_started = time.perf_counter(), time.time()
    manifest = build_arc_dataset(
        args.output_dir,
        input_file_prefix=args.input_file_prefix,
        subsets=args.subsets,
        test_set_name=args.test_set_name,
        test_set_name2=args.test_set_name2,
        seed=args.seed,
        num_aug=args.num_aug,
        max_puzzles=args.max_puzzles,
        puzzle_identifiers_start=args.puzzle_identifiers_start,
        form=args.form,
        workers=args.workers,
        overwrite=args.overwrite,
        progress=not args.quiet,
    )
    _summary(args.output_dir, manifest)
    if (Path(args.output_dir) / MANIFEST).stat().st_mtime < wall_started:
        print(
            "already built with these arguments and inputs: nothing to do (files checked against manifest.json)"
        )
    else:
        print(f"done in {time.perf_counter() - started:.1f} s")
    return 0


def _build_grid(args: argparse.Namespace) -> int:
    from trm.data.manifest import MANIFEST

    started, wall_started = time.perf_counter(), time.time()
    common = {
        "source_repo": args.source_repo,
        "source_dir": args.source_dir,
        "revision": args.revision,
        "subsample_size": args.subsample_size,
        "seed": args.seed,
        "form": args.form,
        "overwrite": args.overwrite,
    }
    if args.data_command == "build-sudoku":
        from trm.data.sudoku import build_sudoku_dataset

        manifest = build_sudoku_dataset(
            args.output_dir, min_difficulty=args.min_difficulty, num_aug=args.num_aug, **common
        )
    else:
        from trm.data.maze import build_maze_dataset

        manifest = build_maze_dataset(args.output_dir, aug=args.aug, **common)
    _summary(args.output_dir, manifest)
    if (Path(args.output_dir) / MANIFEST).stat().st_mtime < wall_started:
        print(
            "already built with these arguments and inputs: nothing to do (files checked against manifest.json)"
        )
    else:
        print(f"done in {time.perf_counter() - started:.1f} s")
    return 0


def _grid_parser(commands, name: str, what: str, repo: str, output_dir: str) -> argparse.ArgumentParser:
    """The flags build-sudoku and build-maze share (upstream's names and defaults, plus --seed/--source-dir)."""
    parser = commands.add_parser(
        name,
        help=f"build a {what} dataset (upstream's build_{name[6:]}_dataset flags)",
        description=f"Build a {what} dataset dir (atomically; manifest.json written last) from the hub "
        "dataset's train.csv/test.csv: compact (originals + per-puzzle recipes) or upstream's materialized layout.",
    )
    parser.add_argument(
        "--form",
        choices=formats.FORMS,
        default=formats.COMPACT,
        help="compact (default, small) or materialized (upstream's layout); the loader reads the same rows",
    )
    parser.add_argument(
        "--output-dir", default=output_dir, help=f"dataset directory to create (default {output_dir})"
    )
    parser.add_argument(
        "--source-repo",
        default=repo,
        help=f"Hugging Face hub dataset to download the CSVs from (default {repo}; needs trm-stack[hub]), "
        "or a local directory holding train.csv and test.csv",
    )
    parser.add_argument(
        "--source-dir", default=None, help="read train.csv/test.csv from this directory instead of the hub"
    )
    parser.add_argument("--revision", default=None, help="hub revision (commit, tag or branch) to download")
    parser.add_argument(
        "--subsample-size",
        type=int,
        default=None,
        help="keep a random N of the train puzzles (seeded by --seed)",
    )
    parser.add_argument(
        "--seed",
        type=int,
        default=0,
        help="seed of numpy's RandomState for the subsample and augmentations (upstream leaves it unseeded; "
        "the same seed in upstream's np.random.seed gives the same arrays)",
    )
    parser.add_argument(
        "--overwrite", action="store_true", help="replace an existing different dataset at --output-dir"
    )
    parser.set_defaults(func=_build_grid)
    return parser


def _summary(path: str, manifest: dict) -> None:
    counts = manifest["counts"]
    print(f"dataset {path} ({manifest['form']}), fingerprint {manifest['fingerprint'][:16]}")
    for split in ("train", "test"):
        c = counts[split]
        print(f"  {split}: {c['examples']} examples, {c['puzzles']} puzzles, {c['groups']} groups")
    print(f"  identifiers: {counts['identifiers']['total']}")
    aug = counts.get("augmentation")
    if aug and aug["tasks_short_of_target"]:
        print(
            f"  note: {aug['tasks_short_of_target']} tasks have fewer distinct augmentations than --num-aug "
            f"(fewest: {aug['min_variants']} incl. the original); they use few colours or are symmetric"
        )


def _verify(args: argparse.Namespace) -> int:
    from trm.data.formats import SplitData
    from trm.data.manifest import read_verified_manifest

    manifest = read_verified_manifest(args.dataset_dir, full=True)
    for split in ("train", "test"):
        data = SplitData(args.dataset_dir, split, manifest["form"])
        if data.num_examples != manifest["counts"][split]["examples"]:
            print(f"{args.dataset_dir}/{split}: example count differs from the manifest")
            return 1
    _summary(args.dataset_dir, manifest)
    print("OK: every file matches manifest.json")
    return 0


def _import_upstream(args: argparse.Namespace) -> int:
    from trm.data.upstream_import import import_upstream

    manifest = import_upstream(args.dataset_dir)
    _summary(args.dataset_dir, manifest)
    print(f"wrote {args.dataset_dir}/manifest.json; the dataset can now be used for training")
    return 0


def configure(parser: argparse.ArgumentParser) -> None:
    commands = parser.add_subparsers(dest="data_command", metavar="SUBCOMMAND", required=True)

    build = commands.add_parser(
        "build-arc",
        help="build an ARC dataset (upstream's build_arc_dataset flags)",
        description="Build an augmented ARC dataset dir (atomically; manifest.json written last).",
    )
    build.add_argument(
        "--input-file-prefix",
        default=str(DEFAULT_PREFIX),
        help="reads <prefix>_<subset>_challenges.json (default: the shipped data; upstream's kaggle/combined/arc-agi maps to it)",
    )
    build.add_argument("--output-dir", required=True, help="dataset directory to create")
    build.add_argument(
        "--subsets", nargs="+", default=["training2", "evaluation2", "concept"], help="subsets to include"
    )
    build.add_argument(
        "--test-set-name", default="evaluation2", help="subset whose test pairs form the test split"
    )
    build.add_argument(
        "--test-set-name2", default="your_test_set", help="a second test subset (e.g. Kaggle's hidden test)"
    )
    build.add_argument("--seed", type=int, default=42)
    build.add_argument("--num-aug", type=int, default=1000, help="augmentations per task (default 1000)")
    build.add_argument(
        "--max-puzzles",
        type=int,
        default=None,
        help="keep only the first N tasks of each subset (smoke sets)",
    )
    build.add_argument("--puzzle-identifiers-start", type=int, default=1)
    build.add_argument(
        "--form",
        choices=formats.FORMS,
        default=formats.COMPACT,
        help="compact (default, small) or materialized (upstream layout)",
    )
    build.add_argument(
        "--workers",
        type=int,
        default=0,
        help="threads rendering a materialized build (0 = auto; output is identical)",
    )
    build.add_argument(
        "--overwrite", action="store_true", help="replace an existing different dataset at --output-dir"
    )
    build.add_argument("--quiet", action="store_true", help="no progress bars")
    build.set_defaults(func=_build_arc)

    sudoku = _grid_parser(
        commands, "build-sudoku", "Sudoku-Extreme", "sapientinc/sudoku-extreme", "data/sudoku-extreme-full"
    )
    sudoku.add_argument(
        "--min-difficulty", type=int, default=None, help="keep only puzzles whose rating is at least this"
    )
    sudoku.add_argument(
        "--num-aug",
        type=int,
        default=0,
        help="shuffled copies per train puzzle (default 0; upstream's README: 1000)",
    )
    maze = _grid_parser(
        commands, "build-maze", "Maze-Hard 30x30", "sapientinc/maze-30x30-hard-1k", "data/maze-30x30-hard-1k"
    )
    maze.add_argument(
        "--aug",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="add the 8 dihedral transforms of every train maze (default off, as upstream)",
    )

    verify = commands.add_parser("verify", help="re-hash every file of a dataset against its manifest")
    verify.add_argument("dataset_dir")
    verify.set_defaults(func=_verify)

    imp = commands.add_parser(
        "import-upstream",
        help="check a dataset built by upstream TinyRecursiveModels or URM and write its manifest "
        "(a URM build's dataset.json gains total_puzzles, derived from group_indices)",
    )
    imp.add_argument("dataset_dir")
    imp.set_defaults(func=_import_upstream)
