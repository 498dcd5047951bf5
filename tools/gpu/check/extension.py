"""The `extension-build` part (adam-atan2 built in the background, or picked up from an earlier call) and
the environment of the parts that must train or test on that extension."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from tools.gpu.check.core import NOT_WANTED, ROOT, Context, Outcome, upstream_checkout
from tools.gpu.extension import ExtensionBuild, prerequisite_problem
from trm.optim.backend import REQUIRE_EXTENSION_ENV

EXTENSION_WAIT_S = 180  # the longest a part waits for the background build (65-89 s on the first H100)


def extension_imports(python: str, env: dict[str, str]) -> bool:
    code = subprocess.run([python, "-c", "import adam_atan2, adam_atan2_backend"], env=env, cwd=ROOT,
                          capture_output=True).returncode  # fmt: skip
    return code == 0


def extension_build(ctx: Context) -> Outcome:
    """Start the build in the background, or pick up the one an earlier call left in ctx.extension_dir."""
    if extension_imports(ctx.python, ctx.env):
        return Outcome("skip", "adam_atan2 already imports here: nothing to build", skipped=NOT_WANTED)
    assert ctx.extension_dir is not None
    earlier = ExtensionBuild.find(ctx.extension_dir)
    if earlier is not None:
        state = earlier.state()
        if state == "running" or (
            state == "built" and extension_imports(ctx.python, site_env(ctx.env, earlier.site))
        ):
            ctx.extension = earlier
            return Outcome(
                "pass",
                f"picked up the build an earlier call started {earlier.seconds():.0f} s ago ({state}, pid "
                f"{earlier.record['pid']}); log {earlier.log}",
                {"picked_up": True, "state": state, "command": earlier.cmd},
            )
    sdist = ctx.adam_sdist
    if sdist is None or not sdist.is_file():
        why = f"no adam-atan2 sdist at {sdist} (make gpu-kit puts it there)"
        return Outcome(
            "fail" if ctx.require_extension else "skip",
            why,
            skipped=None if ctx.require_extension else NOT_WANTED,
        )
    import torch

    from trm.images.buildtools import visible_gpu_archs

    problem = prerequisite_problem(ctx.env, torch.version.cuda, visible_gpu_archs())
    if problem is not None:
        return Outcome(
            "fail" if ctx.require_extension else "skip",
            f"cannot build the extension: {problem}",
            skipped=None if ctx.require_extension else NOT_WANTED,
        )
    jobs = max(1, (os.cpu_count() or 2) // 2)  # collect and the first gpu tests use the other half
    site = ctx.extension_dir / "site"
    cmd = [ctx.python, "-m", "trm.images.buildtools", "install-adam-atan2", "--sdist", str(sdist),
           "--target", str(site), "--jobs", str(jobs)]  # fmt: skip
    ctx.extension = ExtensionBuild.start(ctx.extension_dir, cmd, ctx.env, ROOT)
    return Outcome(
        "pass",
        f"started in the background with {jobs} job(s) (pid {ctx.extension.record['pid']}); log {ctx.extension.log}",
        {"command": cmd, "picked_up": False},
    )


def site_env(env: dict[str, str], site: Path) -> dict[str, str]:
    """`env` with `site` first on PYTHONPATH."""
    path = [str(site), env.get("PYTHONPATH", "")]
    return {**env, "PYTHONPATH": os.pathsep.join(p for p in path if p)}


def with_extension(ctx: Context) -> dict[str, str]:
    """The environment of later commands: the built extension (if any) on PYTHONPATH."""
    if ctx.extension is None or not ctx.extension.site.is_dir():
        return ctx.env
    return site_env(ctx.env, ctx.extension.site)


def extension_required(ctx: Context) -> bool:
    """Whether training and the gpu tests must use the extension: asked for, or built (started) in this run."""
    return ctx.require_extension or ctx.extension is not None


def extension_env(ctx: Context, wait_s: float) -> tuple[dict[str, str], str | None]:
    """(environment, problem) for the parts that train or run the gpu tests. When the extension is required,
    this waits up to `wait_s` for the build, puts it on PYTHONPATH and sets TRM_REQUIRE_ADAM_EXT=1, which
    every child inherits (the trainer then refuses the torch fallback); problem says why it cannot."""
    if not extension_required(ctx):
        return ctx.env, None
    if extension_imports(ctx.python, ctx.env):
        return {**ctx.env, REQUIRE_EXTENSION_ENV: "1"}, None
    if ctx.extension is None:
        return ctx.env, "the extension is required but no build was started (see extension-build)"
    built, note = ctx.extension.wait(wait_s)
    env = {**with_extension(ctx), REQUIRE_EXTENSION_ENV: "1"}
    if not built:
        return env, f"the adam_atan2 extension this run builds is not ready: {note}"
    if not extension_imports(ctx.python, env):
        return env, f"the adam_atan2 extension was built but does not import ({note})"
    return env, None


def part_env(ctx: Context) -> dict[str, str] | Outcome:
    """The environment of a part that trains or runs the gpu tests (extension_env, waiting for the build at
    most EXTENSION_WAIT_S within the part's limit), or the part's `not run` Outcome when it cannot have it."""
    env, problem = extension_env(ctx, ctx.limit(EXTENSION_WAIT_S))
    if problem is not None:
        return Outcome("fail", f"not run: {problem}", {"extension_required": True})
    return env


def upstream_part_env(ctx: Context) -> tuple[str, dict[str, str]] | Outcome:
    """(upstream checkout, part_env with TRM_UPSTREAM set to it) for a part that runs upstream's trainer beside
    ours, or the part's failing Outcome: no upstream checkout, or no extension where one is required."""
    upstream = upstream_checkout(ctx.env, ctx.kit)
    if upstream is None:
        return Outcome(
            "fail", "no upstream checkout: build the kit with `make gpu-kit UPSTREAM=DIR` or set TRM_UPSTREAM"
        )
    env = part_env(ctx)
    if isinstance(env, Outcome):
        return env
    return upstream, {**env, "TRM_UPSTREAM": upstream}
