"""`python -m trm infer`: offline ARC inference from a Kaggle bundle to submission.json."""

from __future__ import annotations

import argparse
from typing import Any

from trm.adapt.flags import add_budget_flags


def adapt_flags_given(args: argparse.Namespace) -> list[str]:
    """The --adapt-* flags on the command line (budget, --adapt-dir, --adapt-override)."""
    from trm.adapt.flags import given_flags

    extra = [
        flag
        for flag, value in (("--adapt-dir", args.adapt_dir), ("--adapt-override", args.adapt_override))
        if value
    ]
    return [*given_flags(args, "adapt-"), *extra]


def _adapt_settings(args: argparse.Namespace) -> Any:
    """AdaptSettings when --adapt-minutes or --adapt-steps is given, else None (no adaptation); checked
    before anything is loaded, with infer's flag names. Other --adapt-* flags without a budget are refused."""
    from trm.adapt.flags import settings_from
    from trm.errors import TRMError

    if args.adapt_minutes is None and args.adapt_steps is None:
        given = adapt_flags_given(args)
        if given:
            raise TRMError(
                f"{', '.join(given)} without a budget: nothing would be adapted; add --adapt-minutes M "
                "and/or --adapt-steps N, or drop them"
            )
        return None
    return settings_from(args, list(args.adapt_override or []), prefix="adapt-")


def _ranks(args: argparse.Namespace) -> tuple[int, int]:
    """(ranks, groups) of --ranks / --groups: groups default to the ranks."""
    import os

    from trm.errors import TRMError
    from trm.kaggle.infer import resolve_device
    from trm.kaggle.ranks import gpu_devices, resolve_ranks

    resolve_device(args.device)  # a bad --device is named before --ranks is checked against the GPUs
    gpus = [] if args.device == "cpu" else gpu_devices(os.environ)
    ranks = resolve_ranks(args.ranks, args.device, gpus)
    groups = ranks if args.groups is None else args.groups
    if groups < 1:
        raise TRMError(f"--groups {groups}: must be at least 1 (default: --ranks)")
    if (ranks > 1 or groups > 1) and args.save_predictions:
        raise TRMError(
            "--save-predictions works with one rank and one group only: drop it or --ranks/--groups"
        )
    return ranks, groups


def _time_plan(args: argparse.Namespace, adapt: Any, ranks: int, groups: int) -> Any:
    """The competition's time plan for this bundle and challenges file (trm.kaggle.plan); reads the
    bundle's config.json and identifiers only."""
    from trm.kaggle.competition import competition
    from trm.kaggle.package import local_bundle
    from trm.kaggle.plan import plan_for_bundle
    from trm.kaggle.testset import read_challenges

    comp = competition(args.competition, gpus=args.gpus, hours=args.hours)
    bundle, _ = local_bundle(args.weights, not args.quiet)
    return plan_for_bundle(
        comp,
        bundle,
        read_challenges(args.challenges),
        num_aug=args.num_aug,
        adapt_steps=None if adapt is None else adapt.steps,
        adapt_minutes=None if adapt is None else adapt.minutes,
        max_minutes=args.max_minutes,
        ranks=ranks,
        groups=groups,
    )


def _inference_options(args: argparse.Namespace, plan: Any, adapt: Any) -> dict[str, Any]:
    """The keyword arguments one process (run_inference) and the ranks (run_sharded) both take: the flags,
    the plan's inference budget and the adaptation settings the plan fitted into the hours."""
    from trm.kaggle.plan import planned_settings

    return {
        "num_aug": args.num_aug,
        "batch_size": args.batch_size,
        "device": args.device,
        "max_minutes": plan.budget_minutes,
        "early_halt": args.early_halt,
        "seed": args.seed,
        "progress": not args.quiet,
        "adapt": planned_settings(plan, adapt),
        "adapt_dir": args.adapt_dir,
    }


def _run(args: argparse.Namespace) -> int:
    import sys

    from trm.errors import TRMError
    from trm.kaggle.infer import run_inference

    if args.out is None and not args.plan_only:
        raise TRMError("--out is required: the submission.json to write (or --plan-only to print the plan)")
    adapt = _adapt_settings(args)  # bad --adapt-* values stop here, before the bundle is read
    ranks, groups = _ranks(args)
    plan = _time_plan(args, adapt, ranks, groups)
    print(plan.describe(), flush=True)
    if args.plan_only:
        return 0
    if ranks > 1 or groups > 1:
        return _run_sharded(args, plan, adapt, ranks, groups)
    report = run_inference(
        args.weights, args.challenges, args.out, save_predictions=args.save_predictions,
        **_inference_options(args, plan, adapt),
    )  # fmt: skip
    if report.adapted is not None:
        a = report.adapted
        print(
            f"adapted to {a.tasks} task(s) in {a.seconds:.1f} s ({a.step} step(s), {a.rows_from_mean} new "
            f"puzzle rows): {a.checkpoint}"
        )
    elif report.unseen_tasks:
        print(f"WARNING: {report.notes[-1]}", file=sys.stderr)
    elif adapt is not None:
        print(
            f"WARNING: {', '.join(adapt_flags_given(args))} ignored: every task of {args.challenges} has a "
            "trained puzzle-embedding row, so nothing was adapted (adaptation is for tasks without one)",
            file=sys.stderr,
        )
    if report.trained_tasks:
        from trm.adapt.rows import trained_warning

        print(f"WARNING: {trained_warning(report.trained_tasks, report.tasks)}", file=sys.stderr)
    _print_report(report, args.out)
    return 0


def _run_sharded(args: argparse.Namespace, plan: Any, adapt: Any, ranks: int, groups: int) -> int:
    """`--ranks N` / `--groups G`: task groups on rank processes (trm.kaggle.sharded)."""
    import sys

    from trm.kaggle.sharded import run_sharded

    report = run_sharded(
        args.weights, args.challenges, args.out, ranks=ranks, groups=groups,
        **_inference_options(args, plan, adapt),
    )  # fmt: skip
    for g in report.groups:
        print(f"group {g['group']} on rank {g['rank']}: {g['tasks']} task(s), {g['result']}")
    if report.trained_tasks:
        from trm.adapt.rows import trained_warning

        print(f"WARNING: {trained_warning(report.trained_tasks, report.tasks)}", file=sys.stderr)
    _print_report(report, args.out)
    return 0


def _print_report(report: Any, out: str) -> None:
    print(
        f"{report.tasks} tasks, {report.test_inputs} test inputs: ran {report.rows_run}/{report.rows_planned} "
        f"rows on {report.device} in {report.seconds:.1f} s ({report.rounds_complete} augmentation round(s) "
        "for every task)"
    )
    for task_id, why in sorted(report.skipped.items()):
        print(f"  task {task_id}: fallback attempts ({why})")
    for note in report.notes:
        print(f"  note: {note}")
    print(f"submission: {out}")


def configure(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Offline inference: augment the test inputs in memory, run the model, vote, and write a submission "
        "with two attempts for every test input. One process (CPU or one GPU) by default; --ranks N splits "
        "the tasks into groups run by N processes, one per GPU."
    )
    parser.add_argument("--challenges", required=True, help="arc-agi_test_challenges.json (Kaggle format)")
    parser.add_argument(
        "--weights",
        required=True,
        help="bundle folder from `python -m trm package kaggle`, or hf://ORG/NAME[/DIR][@REVISION] (a bundle, "
        "or a checkpoint of ours or upstream's, packaged once into ~/.cache/trm-stack/hub-bundles/)",
    )
    parser.add_argument(
        "--out",
        default=None,
        help="submission.json to write (required unless --plan-only); an existing file there is replaced only "
        "when it is a submission infer wrote",
    )
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
    parser.add_argument(
        "--save-predictions",
        default=None,
        help="also write every row's prediction (.npz; an existing file there is replaced only when infer wrote it)",
    )
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    from trm.kaggle.competition import COMPETITIONS, DEFAULT

    plan = parser.add_argument_group(
        "competition time plan",
        "printed before adaptation starts: adaptation steps and minutes, the minutes left for inference and "
        "their share of the competition's hours, step times on the competition GPU (trm.kaggle.plan); "
        "adaptation is shortened when it and inference would not fit, and --max-minutes is capped to the "
        "competition's hours less a reserve",
    )
    plan.add_argument(
        "--competition",
        default=DEFAULT,
        choices=sorted(COMPETITIONS),
        help=f"the competition's hardware and hours (default {DEFAULT}: 4 x L4, 12 h, offline)",
    )
    plan.add_argument("--gpus", type=int, default=None, help="override the competition's GPU count")
    plan.add_argument("--hours", type=float, default=None, help="override the competition's run-time limit")
    plan.add_argument(
        "--ranks",
        default="1",
        help="processes, one per GPU (auto: one per visible GPU, 1 without): the tasks are split into --groups "
        "groups, each adapted and inferred on its own, its attempts kept when another rank fails; the un-adapted "
        "bundle predicts the groups of a rank that fails or runs out of time (default 1: one process)",
    )
    plan.add_argument(
        "--groups",
        type=int,
        default=None,
        help="task groups (default: --ranks); the submission depends on the groups, not on the ranks running them",
    )
    plan.add_argument(
        "--plan-only",
        action="store_true",
        help="print the time plan and exit 0 (reads config.json and the challenges, loads no model)",
    )
    adapt = parser.add_argument_group(
        "test-time training",
        "tasks without a trained puzzle row score about zero unless the model is first adapted to their "
        "demonstrations (`python -m trm adapt`); give a budget to do so (it counts within --max-minutes)",
    )
    add_budget_flags(adapt, prefix="adapt-")
    adapt.add_argument(
        "--adapt-dir",
        default=None,
        help="where the adaptation runs and resumes (default: adapt/ next to --out); with --ranks/--groups the "
        "work folder: each group's adaptation run, its attempts, the ranks' logs and ranks.json",
    )
    adapt.add_argument(
        "--adapt-override",
        action="append",
        metavar="KEY=VALUE",
        help="trainer override for the adaptation, repeatable: micro_batch_size=8 fixes the micro-batch (by "
        "default it is chosen for the GPU from the hardware tier table and halved on out-of-memory), lr=1e-4; "
        "global_batch_size= changes the training math",
    )
    parser.set_defaults(func=_run)
