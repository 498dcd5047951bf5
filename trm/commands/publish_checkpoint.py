"""`python -m trm publish-checkpoint RUN_DIR --repo ORG/NAME`: one checkpoint to the Hugging Face Hub with
its config, dataset identifiers, provenance and a model card (trm.hub.publish)."""

from __future__ import annotations

import argparse
from pathlib import Path


def _run(args: argparse.Namespace) -> int:
    from trm.hub.publish import stage, upload
    from trm.io import scratch_directory

    run_dir = Path(args.run_dir)
    common = {
        "repo_id": args.repo,
        "best": args.best,
        "step": args.step,
        "metric": args.metric,
        "data_paths": args.data_path,
        "handoff": args.handoff,
        "license_id": args.license,
    }
    if args.dry_run:
        out = args.out or Path("hub-publish") / args.repo.replace("/", "--")
        provenance = stage(run_dir, out, overwrite=True, **common)
        print(f"dry run: nothing uploaded; the folder hf://{args.repo} would receive is {out}:")
        from trm.safe_remove import MARKER

        for path in sorted(p for p in out.rglob("*") if p.is_file() and p.name != MARKER):
            print(f"  {path.relative_to(out).as_posix()}  ({path.stat().st_size:,} bytes)")
        print(f"step {provenance['step']} ({provenance['selected']['by']})")
        return 0
    with scratch_directory("trm-publish") as tmp:  # a killed publish's copy is cleared by the next one
        folder = tmp / "upload"
        provenance = stage(run_dir, folder, **common)
        message = f"trm-stack: step {provenance['step']} of run {provenance.get('run_name')}"
        commit = upload(folder, args.repo, private=args.private, message=message)
    print(f"published step {provenance['step']} to hf://{args.repo}@{commit.oid}")
    print(f"  {commit.commit_url}")
    print(f"evaluate it: python -m trm.eval hf://{args.repo}@{commit.oid} data_paths='[DATASET]'")
    return 0


def configure(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Upload one checkpoint of RUN_DIR to the Hugging Face Hub repository ORG/NAME (created if missing): "
        "the trm step folder without optimizer state, the resolved config, the training dataset's manifest "
        "and identifiers.json (the puzzle-embedding rows), trm_provenance.json (selection metrics, dataset "
        "fingerprints, git sha, image digest, torch, hardware, wall clock and cost) and a model card. The "
        "token comes from HF_TOKEN or `hf auth login`; it is never written or printed."
    )
    parser.add_argument("run_dir", help="the run directory (the trainer's checkpoint_path)")
    parser.add_argument("--repo", required=True, help="Hub model repository ORG/NAME")
    pick = parser.add_mutually_exclusive_group()
    pick.add_argument(
        "--best", action="store_true", help="the best checkpoint by --metric (`python -m trm best`)"
    )
    pick.add_argument("--step", type=int, default=None, help="the checkpoint of step N")
    parser.add_argument("--metric", default=None, help="with --best: the metric (default: the run's own)")
    parser.add_argument(
        "--data-path",
        action="append",
        default=None,
        help="the dataset it was trained on, repeatable (default: the run's data_paths); checked by fingerprint",
    )
    parser.add_argument(
        "--handoff",
        type=Path,
        default=None,
        help="handoff.json with hardware, wall clock and cost (default: derived from RUN_DIR/launch/ when present)",
    )
    parser.add_argument("--license", default="mit", help="license id in the card's metadata (default: mit)")
    parser.add_argument("--private", action="store_true", help="create the repository private")
    parser.add_argument(
        "--dry-run", action="store_true", help="write the exact folder it would upload to --out and list it"
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=None,
        help="with --dry-run: the folder (default hub-publish/ORG--NAME); new, empty or an earlier dry run's "
        "(never a folder holding anything else, a run, a checkpoint or a dataset)",
    )
    parser.set_defaults(func=_run)
