"""`python -m trm jobs render|check|pin`: the Kubernetes manifests under jobs/."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import yaml


def _render(args: argparse.Namespace) -> int:
    from trm.ops import k8s

    objects = k8s.render(args.directory)
    yaml.safe_dump_all(objects, sys.stdout, sort_keys=False, default_flow_style=False, width=200)
    return 0


def _check(args: argparse.Namespace) -> int:
    from trm.commands import build_parser
    from trm.ops import k8s

    problems = k8s.check_jobs(args.root, build_parser(), version=args.kubernetes_version)
    for problem in problems:
        print(problem)
    print(f"jobs: {len(problems)} problem(s) (Kubernetes {args.kubernetes_version} schemas, strict)")
    return 1 if problems else 0


def _pin(args: argparse.Namespace) -> int:
    from trm.ops import k8s, skytasks
    from trm.ops.imagelock import read_lock

    changed = k8s.pin_images(args.root, check=args.check)
    for directory in changed:
        print(f"{'stale' if args.check else 'pinned'}: {directory}/kustomization.yaml")
    tasks = skytasks.pin_tasks(args.root, read_lock(args.root), check=args.check)
    for path in tasks:
        print(f"{'stale' if args.check else 'pinned'}: {path} (image_id)")
    changed += tasks
    if args.check and changed:
        print("run `python -m trm jobs pin` to write the digests from docker/images.lock.json")
        return 1
    print(f"jobs: {len(changed)} overlay(s) and task(s) {'stale' if args.check else 'updated'}")
    return 0


def configure(parser: argparse.ArgumentParser) -> None:
    from trm.ops.k8s import KUBERNETES_VERSION

    sub = parser.add_subparsers(dest="jobs_command", metavar="ACTION", required=True)
    render = sub.add_parser("render", help="print the objects a kustomization directory renders to")
    render.add_argument("directory", type=Path, help="e.g. jobs/overlays/prod-8xh200")
    render.set_defaults(func=_render)
    check = sub.add_parser("check", help="schema-validate every overlay offline and check the job rules")
    check.add_argument(
        "--kubernetes-version", default=KUBERNETES_VERSION, help="schema version (default %(default)s)"
    )
    check.set_defaults(func=_check)
    pin = sub.add_parser(
        "pin",
        help="write each overlay's image digest and each SkyPilot task's image_id from docker/images.lock.json",
    )
    pin.add_argument("--check", action="store_true", help="only report stale overlays (exit 1)")
    pin.set_defaults(func=_pin)
    for p in (check, pin):
        p.add_argument("--root", type=Path, default=Path("."), help="repository root (default: .)")
