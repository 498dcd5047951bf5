"""`python -m tools.release` (`make release`): build, push, pin the lock by registry digest, re-stamp runbooks
and jobs (tools.release.publish)."""

from __future__ import annotations

import argparse
import os
from pathlib import Path


def run(args: argparse.Namespace) -> int:
    from tools.images.cli import overrides, variant_names
    from tools.images.driver import ImageDriver, connect, parse_registry
    from tools.images.variants import load_config
    from tools.release.publish import EnginePublisher, release, require_clean

    root = Path(args.root).resolve()
    config = load_config(root / args.config)
    variants = config.select(variant_names(args))
    parse_registry(args.registry)  # the cheap refusals come before the engine is contacted
    require_clean(root)
    publisher = EnginePublisher(ImageDriver(connect(), config, root), **overrides(args))
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
    add_variant_args(parser)
    add_base_args(parser)
    parser.set_defaults(func=run)


def main(argv: list[str] | None = None) -> int:
    """`python -m tools.release ARGS`: parse `argv` (default: sys.argv[1:]) and run (tools.cli.TASKS)."""
    from tools.cli import main as run_task

    return run_task("release", argv)
