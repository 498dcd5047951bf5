"""`python -m trm data …`: build, verify and import ARC, Sudoku and Maze datasets."""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from trm.data import formats
from trm.data.arc_source import DEFAULT_PREFIX


def _build_arc(args: argparse.Namespace) -> int:
    from trm.data.build_arc import build_arc_dataset

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
        subsample_size=args.subsample_size,
        puzzle_identifiers_start=args.puzzle_identifiers_start,
        form=args.form,
        workers=args.workers,
        overwrite=args.overwrite,
        progress=not args.quiet,
    )
    return _finished(args.output_dir, manifest, started, wall_started)


def _finished(output_dir: str, manifest: dict, started: float, wall_started: float) -> int:
    """The build's summary, then whether it built (and in how long) or found the dataset already built."""
    from trm.data.manifest import MANIFEST

    _summary(output_dir, manifest)
    if (Path(output_dir) / MANIFEST).stat().st_mtime < wall_started:
        print(
            "already built with these arguments and inputs: nothing to do (files checked against manifest.json)"
        )
    else:
        print(f"done in {time.perf_counter() - started:.1f} s")
    return 0


def _build_grid(args: argparse.Namespace) -> int:
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
    return _finished(args.output_dir, manifest, started, wall_started)


def _build_sweep(args: argparse.Namespace) -> int:
    from trm.data.sweep import build_sweep

    started = time.perf_counter()
    results = build_sweep(
        args.output_root,
        subsample_sizes=args.subsample_size,
        num_augs=args.num_aug,
        source_repo=args.source_repo,
        source_dir=args.source_dir,
        revision=args.revision,
        min_difficulty=args.min_difficulty,
        seed=args.seed,
        form=args.form,
        overwrite=args.overwrite,
        progress=not args.quiet,
    )
    for r in results:
        train = r.manifest["counts"]["train"]
        state = "built" if r.built else "already complete, skipped"
        print(
            f"{r.path}: {train['groups']} puzzles x {1 + r.num_aug} = {train['puzzles']} train puzzles ({state})"
        )
    built = sum(r.built for r in results)
    print(f"{built} built, {len(results) - built} skipped, in {time.perf_counter() - started:.1f} s")
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
        "--output-dir", default=output_dir, help=f"dataset directory to create (default {output_dir})"
    )
    parser.add_argument(
        "--subsample-size",
        type=int,
        default=None,
        help="keep a random N of the train puzzles (seeded by --seed)",
    )
    _source_flags(parser, repo)
    parser.set_defaults(func=_build_grid)
    return parser


def _source_flags(parser: argparse.ArgumentParser, repo: str) -> None:
    """Where the CSVs come from, the form, the seed and --overwrite (build-sudoku, build-maze, build-sweep)."""
    parser.add_argument(
        "--form",
        choices=formats.FORMS,
        default=formats.COMPACT,
        help="compact (default, small) or materialized (upstream's layout); the loader reads the same rows",
    )
    parser.add_argument(
        "--source-repo",
        default=repo,
        help=f"Hugging Face hub dataset to download the CSVs from (default {repo}; needs the hub extra: in every trm image; pip install -e '.[hub]' in a checkout), "
        "or a local directory holding train.csv and test.csv",
    )
    parser.add_argument(
        "--source-dir", default=None, help="read train.csv/test.csv from this directory instead of the hub"
    )
    parser.add_argument("--revision", default=None, help="hub revision (commit, tag or branch) to download")
    parser.add_argument(
        "--seed",
        type=int,
        default=0,
        help="seed of numpy's RandomState for the subsample and augmentations (upstream leaves it unseeded; "
        "the same seed in upstream's np.random.seed gives the same arrays)",
    )
    parser.add_argument(
        "--overwrite", action="store_true", help="replace an existing different dataset at the output path"
    )


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


def _audit(args: argparse.Namespace) -> int:
    from trm.data.audit import audit, check_out, write_report

    out = args.out or Path("audits") / Path(args.dataset_dir).resolve().name
    check_out(out, args.dataset_dir, args.against)  # a bad --out never costs the audit's work
    report = audit(args.dataset_dir, args.against, progress=not args.quiet)
    written, note = write_report(report, out, args.input_file_prefix)
    s = report["summary"]
    for name in ("pairs", "inputs", "outputs"):
        found = s[f"test_{name}_in_train"]
        print(
            f"test {name} in training: {found['exact']} exact, {found['augmented']} up to augmentation "
            f"(+{s[f'test_{name}_in_own_demonstrations']} in their own demonstrations)"
        )
    dups = s["duplicate_task_groups"]
    print(f"duplicate task groups: {dups['exact']} exact, {dups['augmented']} up to augmentation")
    print(f"puzzle-embedding table: {report['embedding_table']['rows']:,} rows")
    clean = s["clean_test_tasks"]
    print(
        f"clean test tasks (no overlap with another training task): {clean['clean']} of {clean['test_tasks']}, "
        f"{clean['clean_without_trained_rows']} of them without trained puzzle-embedding rows"
    )
    if note:
        print(f"note: {note}")
    print(f"wrote {', '.join(str(p) for p in written)}")
    return 0


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
    build.add_argument(
        "--subsample-size",
        type=int,
        default=None,
        help="keep N random tasks of each training subset (every subset but the test ones; seeded by --seed "
        "and the subset name, kept in file order) for data-scaling studies; unlike --max-puzzles (the first N)",
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
    sweep = commands.add_parser(
        "build-sweep",
        help="build every --subsample-size x --num-aug Sudoku dataset (upstream's scaling sweep) at once",
        description="Build every --subsample-size x --num-aug Sudoku dataset (upstream's scaling sweep) under "
        "--output-root as sudoku-extreme-<size>-aug-<aug> (sizes in thousands as 1k): one CSV scan and one "
        "augmentation draw shared by all builds, each build atomic with its manifest and equal to "
        "build-sudoku's with the same flags; complete ones are skipped, so re-running resumes.",
    )
    _source_flags(sweep, "sapientinc/sudoku-extreme")
    sweep.set_defaults(func=_build_sweep)
    sweep.add_argument(
        "--dataset", choices=["sudoku"], default="sudoku", help="the dataset to sweep (sudoku)"
    )
    sweep.add_argument("--output-root", required=True, help="directory to hold the datasets (created)")
    sweep.add_argument(
        "--subsample-size",
        type=int,
        nargs="+",
        required=True,
        help="train puzzle counts, e.g. 100 250 500 1000",
    )
    sweep.add_argument(
        "--num-aug",
        type=int,
        nargs="+",
        required=True,
        help="augmentation factors, e.g. 10 100 500 1000 2000",
    )
    sweep.add_argument(
        "--min-difficulty", type=int, default=None, help="keep only puzzles whose rating is at least this"
    )
    sweep.add_argument("--quiet", action="store_true", help="no progress bar")
    maze = _grid_parser(
        commands, "build-maze", "Maze-Hard 30x30", "sapientinc/maze-30x30-hard-1k", "data/maze-30x30-hard-1k"
    )
    maze.add_argument(
        "--aug",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="add the 8 dihedral transforms of every train maze (default off, as upstream)",
    )

    aud = commands.add_parser(
        "audit",
        help="test/train overlap (exact and up to augmentation), shared identifiers, duplicate tasks, table size",
        description="Report the test pairs, inputs and outputs of DATASET that occur in the training split "
        "(exactly, or up to a dihedral transform and colour permutation), the puzzle identifiers the splits "
        "share and what that means for the puzzle embedding, tasks duplicated across subsets, and the size "
        "of the embedding table; as audit.json and audit.md. Also the clean evaluation split: the test tasks "
        "that overlap no other training task (exactly or up to augmentation), listed in clean_tasks.json "
        "(with whether the training side has trained rows for each) and copied as clean_challenges.json / "
        "clean_solutions.json in Kaggle's format, for `python -m trm.eval --adapt-challenges` and `infer`.",
    )
    aud.add_argument("dataset_dir", help="an ARC dataset built by `python -m trm data build-arc`")
    aud.add_argument(
        "--against",
        default=None,
        help="check DATASET's test split against this dataset's train split instead (what a checkpoint was "
        "trained on), identifiers included",
    )
    aud.add_argument(
        "--out",
        type=Path,
        default=None,
        help="report folder (default: audits/<DATASET name>); an earlier audit there is replaced, a folder "
        "holding anything else is refused",
    )
    aud.add_argument(
        "--input-file-prefix",
        default=str(DEFAULT_PREFIX),
        help="where the clean pair is copied from: the prefix DATASET was built from (build-arc's flag; default: "
        "the shipped data), checked against the sha256s its manifest records",
    )
    aud.add_argument("--quiet", action="store_true", help="no progress bars")
    aud.set_defaults(func=_audit)

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
