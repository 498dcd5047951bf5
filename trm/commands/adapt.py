"""`python -m trm adapt CHECKPOINT --challenges FILE --out DIR`: test-time training on a task file."""

from __future__ import annotations

import argparse

from trm.adapt.flags import add_budget_flags, settings_from

SHOWN_TASKS = 5  # left-out tasks named per reason (a file of evaluation tasks may leave out hundreds)


def _run(args: argparse.Namespace) -> int:
    from trm.adapt.run import adapt
    from trm.adapt.source import source_from_checkpoint

    settings = settings_from(args, args.overrides)  # bad flags stop before the checkpoint is read
    source = source_from_checkpoint(args.checkpoint, args.overrides)
    result = adapt(
        source,
        args.challenges,
        args.out,
        settings,
        solutions=args.solutions,
        unseen_only=args.unseen_only,
    )
    print(
        f"adapted to {result.tasks} task(s) in {result.seconds:.1f} s: {result.checkpoint} (step {result.step}); "
        f"{result.rows_copied} puzzle row(s) from trained rows, {result.rows_from_mean} from the mean row"
    )
    by_reason: dict[str, list[str]] = {}
    for task_id, why in sorted(result.skipped.items()):
        by_reason.setdefault(why, []).append(task_id)
    for why, tasks in by_reason.items():
        shown = ", ".join(tasks[:SHOWN_TASKS]) + (
            f", … ({len(tasks)} in all)" if len(tasks) > SHOWN_TASKS else ""
        )
        print(f"  task(s) {shown}: left out ({why})")
    for note in result.notes:
        print(f"  note: {note}")
    print(
        f"next: python -m trm.eval {result.checkpoint}  |  python -m trm package kaggle {result.out} BUNDLE"
    )
    return 0


def configure(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Test-time training: build the task file's augmented demonstration set as `data build-arc` does, "
        "give each new identifier a puzzle-embedding row (its trained row when the checkpoint has one, else "
        "the mean trained row), fine-tune within the budget and write an adapted checkpoint under --out. "
        "Resumable: the same command continues an interrupted run (exit 75 after SIGTERM/SIGINT)."
    )
    parser.add_argument(
        "checkpoint", help="our step_N/ folder, or an upstream step_N file (with arch.* overrides)"
    )
    parser.add_argument(
        "overrides",
        nargs="*",
        help="trainer overrides for the adaptation run, e.g. lr=1e-4 device=cpu micro_batch_size=8 (by default "
        "the micro-batch is chosen for the GPU from the hardware tier table, the global batch kept, and halved "
        "on out-of-memory)",
    )
    parser.add_argument("--challenges", required=True, help="ARC task file (Kaggle challenges format)")
    parser.add_argument(
        "--solutions",
        default=None,
        help="its solutions (default: X_solutions.json next to X_challenges.json, if there); only scored, "
        "never trained on",
    )
    parser.add_argument(
        "--out",
        required=True,
        help="run directory of the adaptation: created (new or empty folder) or resumed (an earlier adaptation's, "
        "with the same task file, --num-aug and --seed); a folder holding anything else, or one another "
        "adaptation is using (its run lock), is refused",
    )
    parser.add_argument(
        "--unseen-only",
        action="store_true",
        help="leave out the tasks that have trained puzzle-embedding rows in the checkpoint (listed as left out)",
    )
    add_budget_flags(parser)
    parser.add_argument("--quiet", action="store_true", help="no progress bars")
    parser.set_defaults(func=_run)
