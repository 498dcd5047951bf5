"""The plan of the launch the settings name, on the GPUs this host has (the dry run and the launch)."""

from __future__ import annotations

import os

from trm.errors import TRMError
from trm.launch.config.settings import LaunchSettings
from trm.launch.host import cuda_visible
from trm.launch.host.nvidia_smi import GpuInfo, NvidiaSmiMissing, Runner, query_driver_cuda, query_gpus
from trm.launch.plan.plan import LaunchPlan, build_plan
from trm.training.recipes import Recipe

PRODUCTION_RECIPES = ("arc1", "arc2")


def detect_gpus(
    settings: LaunchSettings, runner: Runner | None = None, environ: dict[str, str] | None = None
) -> list[GpuInfo]:
    """The GPUs nvidia-smi lists that `environ`'s CUDA_VISIBLE_DEVICES leaves; none when NUM_GPUS=0.
    Production recipes never fall back to CPU silently."""
    if settings.num_gpus == 0:
        return []
    needs_gpus = bool(settings.num_gpus) or settings.recipe in PRODUCTION_RECIPES
    on_cpu = "to train on CPU on purpose set NUM_GPUS=0 (TASK=debug-tiny is the CPU-sized run)"
    try:
        gpus = query_gpus(runner, environ)
    except NvidiaSmiMissing as err:
        if needs_gpus:
            raise TRMError(f"{err}. TASK={settings.recipe} needs GPUs; {on_cpu}") from None
        return []
    except TRMError:
        # A driver older than every image family (R470 knows no compute_cap query field): its error
        # names the fix; any other failure keeps nvidia-smi's own message.
        from trm.images.families import catalog_families, family_for_driver

        driver, _cuda = query_driver_cuda(runner)
        if driver:
            family_for_driver(driver, catalog_families())
        raise
    hiding = (os.environ if environ is None else environ).get(cuda_visible.ENV)
    if not gpus and hiding is not None and needs_gpus:
        raise TRMError(
            f"{cuda_visible.ENV}={hiding!r} hides every GPU, and TASK={settings.recipe} needs GPUs: "
            f"{cuda_visible.FIX}; {on_cpu}"
        )
    return gpus


def resolve(
    settings: LaunchSettings,
    environ: dict[str, str],
    runner: Runner | None = None,
    recipe: Recipe | None = None,
) -> LaunchPlan:
    """Detect hardware and build the plan (used by the dry run and the real launch)."""
    return build_plan(settings, detect_gpus(settings, runner, environ), environ, recipe)
