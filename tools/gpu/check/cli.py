"""`python -m tools.gpu.check`: the flags, the plan (--dry-run), and one run of the chosen parts."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from tools import checkout_env
from tools.gpu import check as package
from tools.gpu.check.core import (
    ADAM_SDIST,
    DEFAULT_BUDGET_S,
    DEFAULT_KIT,
    DEFAULT_OUT,
    PROFILES,
    ROOT,
    Context,
    Part,
    upstream_checkout,
)
from tools.gpu.check.driver import EXIT_CODES, planned_total, run_parts
from tools.gpu.check.optimizer import compare_optimizer
from tools.gpu.check.outdir import check_out, fresh_work
from tools.gpu.check.plan import CALLS, PARTS
from tools.gpu.check.report import write_report
from tools.gpu.extension import refusal as extension_dir_refusal
from tools.gpu.extension import refusal_message
from trm.errors import TRMError


def cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()


def plan_text(
    parts: Sequence[Part], out: Path, env: dict[str, str], profile: str, budget_s: float, kit: Path
) -> str:
    total, required = planned_total(parts, profile), planned_total(parts, profile, required_only=True)
    fits = "fits" if required <= budget_s else "does NOT fit: later parts will be skipped"
    lines = [
        f"gpu acceptance plan: {len(parts)} part(s), profile {profile}, budget {budget_s:g} s, planned on one "
        f"H100 {total} s, required parts {required} s ({fits}); report: {out / 'report.json'} and "
        f"{out / 'report.md'}"
    ]
    lines += [
        f"  {p.name:15s} ~{p.planned_s[profile]:4d} s (≤{p.limit_s:4d} s)  {p.what}"
        + ("" if p.required else "  [optional: runs when time is left]")
        for p in parts
    ]
    upstream = upstream_checkout(env, kit)
    lines.append(
        f"  upstream: {upstream if upstream else 'not compared (TRM_UPSTREAM unset, no kit checkout)'}"
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None, parts: Sequence[Part] = PARTS) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tools.gpu.check", description=(package.__doc__ or "").split("\n")[0]
    )
    parser.add_argument("--dry-run", action="store_true", help="print the plan; run nothing")
    parser.add_argument(
        "--out", type=Path, default=None,
        help=f"report folder (default {DEFAULT_OUT}, with --call N {DEFAULT_OUT}/call-N); a report there is "
        "replaced only when the check wrote it, an earlier run's work/ is kept as work.earlier-N",
    )  # fmt: skip
    parser.add_argument("--call", type=int, choices=sorted(CALLS), default=None,
                        help="one of the prepared calls of a short GPU loan (1: the gpu tests, the extension, "
                             "training on it; 2: the probe, the step A/B, SDPA, the profile, the learning curves "
                             "when time is left; 3: the learning curves, ours vs upstream on this GPU); implies "
                             "--require-extension")  # fmt: skip
    parser.add_argument("--extension-dir", type=Path, default=None,
                        help="where the extension is built, shared by the calls (default: OUT/../extension with "
                             "--call, else OUT/extension)")  # fmt: skip
    parser.add_argument("--only", nargs="+", metavar="PART", help="run only these parts")
    parser.add_argument("--budget-s", type=float, default=DEFAULT_BUDGET_S,
                        help=f"total seconds (default {DEFAULT_BUDGET_S}: a 10-minute call)")  # fmt: skip
    parser.add_argument("--profile", choices=PROFILES, default="quick",
                        help="quick (default: fits the default budget on one H100) or full")  # fmt: skip
    parser.add_argument("--require-extension", action="store_true",
                        help="fail when the adam-atan2 extension is not built/used (default: record it)")  # fmt: skip
    parser.add_argument(
        "--kit",
        type=Path,
        default=ROOT / DEFAULT_KIT,
        help=f"the GPU kit folder: its adam-atan2 sdist and upstream checkout (default {DEFAULT_KIT})",
    )
    parser.add_argument("--adam-sdist", type=Path, default=None,
                        help=f"the adam-atan2 sdist to build (default: KIT/{ADAM_SDIST})")  # fmt: skip
    parser.add_argument("--compare-optimizer", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.compare_optimizer:  # the optimizer part's child process, with the built extension importable
        print(json.dumps(compare_optimizer()), flush=True)
        return 0
    if args.budget_s <= 0:
        parser.error(f"--budget-s {args.budget_s:g}: give a positive number of seconds")
    out = args.out or (DEFAULT_OUT / f"call-{args.call}" if args.call else DEFAULT_OUT)
    args.out = out.resolve()  # parts run their commands from the repository root
    extension_dir = (
        args.extension_dir or (args.out.parent if args.call else args.out) / "extension"
    ).resolve()
    names = [p.name for p in parts]
    unknown = sorted(set(args.only or []) - set(names))
    if unknown:
        parser.error(f"unknown part(s) {', '.join(unknown)}; choose from {', '.join(names)}")
    by_name = {p.name: p for p in parts}
    if args.call:
        missing = [n for n in CALLS[args.call] if n not in by_name]
        if missing:
            parser.error(f"--call {args.call}: part(s) {', '.join(missing)} are not defined")
        chosen = [by_name[n] for n in CALLS[args.call] if not args.only or n in args.only]
    else:
        chosen = [p for p in parts if not args.only or p.name in args.only]
    env = checkout_env({**os.environ, "PYTHONUNBUFFERED": "1", "WANDB_MODE": "disabled"})
    args.kit = args.kit.resolve()
    args.adam_sdist = args.adam_sdist or args.kit / ADAM_SDIST
    print(plan_text(chosen, args.out, env, args.profile, args.budget_s, args.kit), flush=True)
    if args.call:
        left = "left running for call 2 if unfinished" if args.call == 1 else "picked up from an earlier call"
        print(
            f"  call {args.call}: the extension is required; its build in {extension_dir} ({left})",
            flush=True,
        )
    try:  # before any part runs: a user's files in --out or --extension-dir are never written over
        check_out(args.out)
        why = extension_dir_refusal(extension_dir) if "extension-build" in {p.name for p in chosen} else None
        if why is not None:
            raise TRMError(refusal_message(extension_dir, why))
    except TRMError as err:
        print(f"error: {err}", file=sys.stderr)
        return err.exit_code
    if args.dry_run:
        return 0
    start = time.monotonic()
    args.out.mkdir(parents=True, exist_ok=True)
    work, earlier = fresh_work(args.out)
    if earlier is not None:
        print(f"  the earlier run's work/ is kept as {earlier}", flush=True)
    ctx = Context(
        out=args.out, work=work, python=sys.executable, env=env, profile=args.profile,
        deadline=start + args.budget_s, require_extension=args.require_extension or args.call is not None,
        adam_sdist=args.adam_sdist, kit=args.kit, extension_dir=extension_dir, keep_extension_build=args.call == 1,
    )  # fmt: skip
    report = run_parts(
        chosen, ctx, lambda r: write_report(r, args.out), budget_s=args.budget_s, cuda=cuda_available(),
        call=args.call,
    )  # fmt: skip
    counts = Counter(p["status"] for p in report["parts"])
    print(
        f"gpu-acceptance: {report['status'].upper()} ({', '.join(f'{v} {k}' for k, v in counts.items())});"
        f" report: {args.out / 'report.md'}",
        flush=True,
    )
    return EXIT_CODES[report["status"]]
