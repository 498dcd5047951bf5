"""`python -m tools.release` (`make release`): build, push, pin the lock by registry digest, re-stamp runbooks
and jobs (tools.release.publish)."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from trm.errors import TRMError


def run(args: argparse.Namespace) -> int:
    from tools.images.cli import overrides, variant_names
    from tools.images.driver import ImageDriver, connect, parse_registry
    from tools.images.variants import load_config
    from tools.release.publish import (
        EnginePublisher,
        pin,
        push_variants,
        read_pushed,
        release,
        require_clean,
        write_pushed,
    )

    root = Path(args.root).resolve()
    if args.push_only and not args.pushed_out:
        raise TRMError("--push-only records what it pushed: add --pushed-out FILE (outside the checkout)")
    if args.pin_from and args.push_only:
        raise TRMError("--pin-from pins images pushed earlier; --push-only pushes new ones: give one of them")
    config = load_config(root / args.config)
    require_clean(root)
    if args.pin_from:
        publisher = EnginePublisher(ImageDriver(connect(), config, root))
        pin(root, read_pushed(args.pin_from, publisher))
        return 0
    variants = config.select(variant_names(args))
    parse_registry(args.registry)  # the cheap refusals come before the engine is contacted
    publisher = EnginePublisher(ImageDriver(connect(), config, root), **overrides(args))
    if args.push_only:
        pushed = push_variants(root, args.registry, variants, publisher)
        write_pushed(Path(args.pushed_out), pushed)
        for image in pushed:
            print(f"{image.variant}\t{image.reference}")
        print(f"pushed {len(pushed)} image(s), recorded in {args.pushed_out}; pin them with --pin-from")
        return 0
    release(root, args.registry, variants, publisher)
    return 0


def configure(parser: argparse.ArgumentParser) -> None:
    from tools.images.cli import add_base_args, add_variant_args

    parser.description = (
        "Build the selected image variants, push them to REGISTRY, read each digest back from the registry, "
        "pin docker/images.lock.json (one atomic write), re-stamp the runbooks and pin the Kubernetes "
        "overlays of those variants, and print the references. Needs a clean git checkout."
    )
    parser.add_argument("--root", default=".", help="repository checkout to release from (default: .)")
    parser.add_argument("--config", default="docker/images.toml", help="variants file, relative to --root")
    parser.add_argument(
        "--registry",
        default=os.environ.get("REGISTRY", ""),
        help="host[:port][/path…] to push to, e.g. ghcr.io/my-org (or $REGISTRY)",
    )
    parser.add_argument(
        "--push-only",
        action="store_true",
        help="build, push and read back the selected variants, record them in --pushed-out; pin nothing "
        "(one variant per machine: the release workflow's matrix)",
    )
    parser.add_argument(
        "--pushed-out", metavar="FILE", help="with --push-only: where to record the pushed images"
    )
    parser.add_argument(
        "--pin-from",
        metavar="FILE",
        nargs="+",
        type=Path,
        help="pin images recorded by --push-only runs: read each back from the registry, write the lock, "
        "re-stamp and pin in one step (no build)",
    )
    add_variant_args(parser)
    add_base_args(parser)
    parser.set_defaults(func=run)


def main(argv: list[str] | None = None) -> int:
    """`python -m tools.release ARGS`: parse `argv` (default: sys.argv[1:]) and run (tools.cli.TASKS)."""
    from tools.cli import main as run_task

    return run_task("release", argv)
