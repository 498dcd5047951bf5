"""`python -m trm infer`: offline ARC inference from a Kaggle bundle to submission.json."""

from __future__ import annotations

import argparse


def _run(args: argparse.Namespace) -> int:
    from trm.kaggle.infer import run_inference

    report = run_inference(
        args.weights,
        args.challenges,
        args.out,
        num_aug=args.num_aug,
        batch_size=args.batch_size,
        device=args.device,
        max_minutes=args.max_minutes,
        early_halt=args.early_halt,
        seed=args.seed,
        save_predictions=args.save_predictions,
        progress=not args.quiet,
    )
    print(
        f"{report.tasks} tasks, {report.test_inputs} test inputs: ran {report.rows_run}/{report.rows_planned} "
        f"rows on {report.device} in {report.seconds:.1f} s ({report.rounds_complete} augmentation round(s) "
        "for every task)"
    )
    for task_id, why in sorted(report.skipped.items()):
        print(f"  task {task_id}: fallback attempts ({why})")
    for note in report.notes:
        print(f"  note: {note}")
    print(f"submission: {args.out}")
    return 0


def configure(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Single-process inference (CPU or one GPU): augment the test inputs in memory, run the model, "
        "vote, and write a submission with two attempts for every test input."
    )
    parser.add_argument("--challenges", required=True, help="arc-agi_test_challenges.json (Kaggle format)")
    parser.add_argument(
        "--weights",
        required=True,
        help="bundle folder from `python -m trm package kaggle`, or hf://ORG/NAME[/DIR][@REVISION] (a bundle, "
        "or a checkpoint of ours or upstream's, packaged once into ~/.cache/trm-stack/hub-bundles/)",
    )
    parser.add_argument("--out", required=True, help="submission.json to write")
    parser.add_argument("--num-aug", type=int, default=1000, help="variants per task incl. the original")
    parser.add_argument(
        "--batch-size",
        type=int,
        default=None,
        help="rows per forward (default 256 on GPU, 16 on CPU; halved on OOM)",
    )
    parser.add_argument("--device", default="auto", help="auto | cpu | cuda | cuda:N")
    parser.add_argument(
        "--max-minutes",
        type=float,
        default=None,
        help="time budget; when short, fewer augmentations run (every task keeps its attempts)",
    )
    parser.add_argument(
        "--early-halt", action="store_true", help="stop a row once q_halt > 0 instead of all ACT steps"
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of unseen tasks' augmentation plans")
    parser.add_argument("--save-predictions", default=None, help="also write every row's prediction (.npz)")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    parser.set_defaults(func=_run)
