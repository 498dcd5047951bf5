"""`python -m tools.images …`: lock, wheelhouse, build, push and look up the trm-stack container images."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from trm.errors import TRMError


def add_variant_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--variants", nargs="*", metavar="NAME", help="variants (space or comma separated; default: all)"
    )


def add_base_args(p: argparse.ArgumentParser) -> None:
    env = os.environ
    p.add_argument(
        "--build-base",
        default=env.get("TRM_IMAGE_BUILD_BASE") or None,
        help="override the build stage base image (tests: a local debootstrap image)",
    )
    p.add_argument(
        "--runtime-base",
        default=env.get("TRM_IMAGE_RUNTIME_BASE") or None,
        help="override the runtime stage base image",
    )
    p.add_argument(
        "--max-jobs", type=int, default=int(env.get("MAX_JOBS", "1")), help="nvcc jobs (~3 GB each)"
    )


def variant_names(args: argparse.Namespace) -> list[str]:
    names: list[str] = []
    for item in args.variants or []:
        names += item.replace(",", " ").split()
    return names


def overrides(args: argparse.Namespace) -> dict[str, str | int | None]:
    return {"build_base": args.build_base, "runtime_base": args.runtime_base, "max_jobs": args.max_jobs}


def variant_for_driver(config, name: str, driver: str) -> str:
    """The variant for `name`'s GPUs in the family the host's `driver` runs (trm.images.families): `sm90`
    on driver 550 is `sm90-cu128`. Says the choice on stderr."""
    import sys

    from trm.images.families import variant_for_host

    (variant,) = config.select([name])
    if not variant.is_gpu:
        raise TRMError(f"--driver picks among GPU variants; {name!r} is the CPU image, which needs no driver")
    sms = {int(arch.replace(".", "")) for arch in variant.archs}
    catalog = tuple(
        (v.name, v.cuda, v.driver_cuda_floor, v.min_driver, v.archs, v.name, v.lock)
        for v in config.variants.values()
        if v.is_gpu
    )
    families = tuple(
        (f.name, f.cuda, f.torch, f.min_driver, f.optimizer_backend) for f in config.families.values()
    )
    family, chosen, _tag = variant_for_host(sms, driver, catalog, families)
    print(
        f"driver {driver}: family {family.name} (CUDA {family.cuda}, torch {family.torch}, optimizer backend "
        f"{family.optimizer_backend}) -> variant {chosen}",
        file=sys.stderr,
    )
    return chosen


def run(args: argparse.Namespace) -> int:
    from tools.images import docs, requirements
    from tools.images.context import project_version
    from tools.images.variants import load_config

    root = Path(args.root).resolve()
    config = load_config(root / args.config)
    variants = config.select(variant_names(args)) if hasattr(args, "variants") else []

    if args.action == "lock":
        for path in requirements.compile_locks(config, variants, root):
            print(f"wrote {path.relative_to(root)}")
    elif args.action == "wheelhouse":
        for path in requirements.fill_wheelhouse(config, variants, root):
            print(f"wheelhouse ready: {path.relative_to(root)}")
    elif args.action == "docs":
        changed_paths = docs.write_image_tables(config, project_version(root), root, check=args.check)
        print(
            f"image table: {', '.join(map(str, changed_paths)) + ' updated' if changed_paths else 'up to date'}"
        )
        changed = docs.write_catalog(
            config, project_version(root), root / docs.CATALOG_PATH, check=args.check
        )
        print(f"{docs.CATALOG_PATH}: {'updated' if changed else 'up to date'}")
        changed_paths = docs.write_driver_tables(config, root, check=args.check)
        print(
            f"driver table: {', '.join(map(str, changed_paths)) + ' updated' if changed_paths else 'up to date'}"
        )
    elif args.action == "ref":
        from tools.images.lockfile import image_reference

        name = args.variant
        if args.driver:
            name = variant_for_driver(config, name, args.driver)
        print(
            image_reference(
                name, root / args.lock_file if args.lock_file else root / "docker/images.lock.json"
            )
        )
    elif args.action in ("build", "push"):
        from tools.images.driver import ImageDriver, connect

        driver = ImageDriver(connect(), config, root)
        for variant in variants:
            if args.action == "build":
                driver.build(variant, nocache=args.no_cache, target=args.target, **overrides(args))
            else:
                lock_path = root / args.lock_file
                driver.push(variant, args.registry, lock_path=lock_path, **overrides(args))
    else:  # pragma: no cover - argparse restricts the choices
        raise TRMError(f"unknown image action {args.action}")
    return 0


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--root", default=".", help="repository checkout to build from (default: .)")
    parser.add_argument("--config", default="docker/images.toml", help="variants file, relative to --root")
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")

    p = actions.add_parser("lock", help="re-resolve docker/requirements/*.txt with uv (needs the index)")
    add_variant_args(p)
    p = actions.add_parser("wheelhouse", help="download the locked packages into docker/wheelhouse/<lock>/")
    add_variant_args(p)
    p = actions.add_parser("build", help="build the variants (docker SDK, no network inside the build)")
    add_variant_args(p)
    add_base_args(p)
    p.add_argument("--no-cache", action="store_true", help="ignore the engine's layer cache")
    p.add_argument(
        "--target",
        default="runtime",
        help="last Dockerfile stage to build (e.g. adam-atan2; default runtime)",
    )
    p = actions.add_parser("push", help="push the built variants and record digests in the lock file")
    add_variant_args(p)
    add_base_args(p)
    p.add_argument(
        "--registry",
        default=os.environ.get("REGISTRY", ""),
        help="host[:port][/path…], e.g. ghcr.io/my-org (or $REGISTRY)",
    )
    p.add_argument("--lock-file", default="docker/images.lock.json", help="where pushed digests are recorded")
    p = actions.add_parser("ref", help="print the pinned reference (repo@sha256:…) of a pushed variant")
    p.add_argument("variant", help="e.g. sm90; with --driver, the GPUs whose variant the driver picks")
    p.add_argument(
        "--driver",
        default=None,
        metavar="VERSION",
        help="the host's NVIDIA driver (e.g. 550.127.05): the reference of the variant for these GPUs in "
        "the image family that driver runs (R580+: CUDA 13.0, R525-R575: CUDA 12.8)",
    )
    p.add_argument("--lock-file", default=None, help="lock file (default docker/images.lock.json)")
    p = actions.add_parser(
        "docs",
        help="regenerate the tag table (docker/README.md, docs/images.md), trm/images/catalog.py (preflight's) and the "
        "host driver table (docs/images.md, docker/README, runbooks 01 and 08)",
    )
    p.add_argument("--check", action="store_true", help="fail (exit 2) when the table is stale instead")
    parser.set_defaults(func=run)


def main(argv: list[str] | None = None) -> int:
    """`python -m tools.images ARGS`: parse `argv` (default: sys.argv[1:]) and run (tools.cli.TASKS)."""
    from tools.cli import main as run_task

    return run_task("images", argv)
