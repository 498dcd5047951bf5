"""Host preflight: every check reports what it found and, on failure, the fix. Inputs are injectable."""

from __future__ import annotations

import importlib.util
import os
import shutil
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path

from trm import exit_codes
from trm.errors import TRMError
from trm.images import catalog as image_catalog
from trm.images import compat
from trm.images.families import variant_for_host
from trm.launch.host import cuda_visible
from trm.launch.host.nvidia_smi import (
    GpuInfo,
    NvidiaSmiMissing,
    Runner,
    query_driver_cuda,
    query_gpus,
    system_runner,
)
from trm.versions import collect_versions

GIB = 1024**3
MIN_SHM_BYTES = 1 * GIB
SHM_FIX = (
    "/dev/shm is what NCCL and DataLoader workers use for shared memory; give the container more: "
    "`docker run --shm-size=8g …` (Vast.ai: add `--shm-size=8g` to the docker options), or in Kubernetes "
    "mount `emptyDir: {medium: Memory, sizeLimit: 8Gi}` at /dev/shm"
)


# What a failed check says about the cause: the configuration (the image, the container's or pod's
# settings, the volume: the same failure on any machine) or this node's hardware (another node may pass).
CONFIG = "config"
NODE = "node"


@dataclass
class CheckResult:
    """Outcome of one check: status is ok, warn, fail or skip; `cause` says what a failure is (CONFIG or NODE)."""

    name: str
    status: str
    found: str
    fix: str = ""
    cause: str = CONFIG

    def line(self) -> str:
        """One report line, with the fix (or note) underneath."""
        tag = {"ok": " ok ", "warn": "warn", "fail": "FAIL", "skip": "skip"}[self.status]
        text = f"[{tag}] {self.name:<18} {self.found}"
        if self.fix and self.status in ("fail", "warn"):
            text += f"\n       {'fix' if self.status == 'fail' else 'note'}: {self.fix}"
        return text


@dataclass
class PreflightContext:
    """Everything preflight reads from the machine; tests replace the parts they simulate."""

    smi: Runner = field(default_factory=system_runner)
    shm_path: Path = Path("/dev/shm")
    disk_path: Path = Path(".")
    fs_size: Callable[[Path], int] | None = None  # total bytes of the filesystem at a path
    fs_free: Callable[[Path], int] | None = None  # free bytes at a path
    memlock: Callable[[], int] | None = None  # soft RLIMIT_MEMLOCK in bytes (-1: unlimited)
    image_cuda: str | None = None
    image_sm_list: str | None = None
    adam_sm_list: str | None = None
    torch_cuda: Callable[[], tuple[str | None, int]] | None = None
    adam_backend_importable: Callable[[], bool] | None = None
    allreduce: Callable[[int], tuple[bool, str]] | None = None
    matmul: Callable[[int], tuple[bool, str, float]] | None = None
    # GPU image variants (trm/images/catalog.py, generated from docker/images.toml) for the driver's fix.
    catalog: tuple = image_catalog.VARIANTS
    families: tuple = image_catalog.FAMILIES
    image_variant: str | None = None
    # The AdamATan2 backend the image ships (label org.trm-stack.optimizer-backend): "ext" or "torch".
    image_optimizer_backend: str | None = None
    # (the C compiler Triton would use or None, the include directory it reads, whether Python.h is there)
    c_toolchain: Callable[[], tuple[str | None, Path, bool]] | None = None
    # The environment whose CUDA_VISIBLE_DEVICES says which GPUs torch sees (None: this process's).
    environ: Mapping[str, str] | None = None

    @classmethod
    def from_env(
        cls, env: dict[str, str] | os._Environ[str] = os.environ, **kwargs: object
    ) -> PreflightContext:
        """Image facts come from the labels the image exports as environment variables."""
        return cls(
            image_cuda=env.get("TRM_IMAGE_CUDA") or None,
            image_sm_list=env.get("TRM_IMAGE_SM_LIST") or None,
            adam_sm_list=env.get("TRM_ADAM_ATAN2_SM_LIST") or None,
            image_variant=env.get("TRM_IMAGE_VARIANT") or None,
            image_optimizer_backend=env.get("TRM_IMAGE_OPTIMIZER_BACKEND") or None,
            environ=env,
            **kwargs,  # type: ignore[arg-type]
        )


@dataclass
class PreflightReport:
    """All results plus the environment facts the handoff bundle records."""

    mode: str
    checks: list[CheckResult]
    environment: dict[str, object]

    @property
    def ok(self) -> bool:
        """True when no check failed (warnings allowed)."""
        return all(c.status != "fail" for c in self.checks)

    @property
    def exit_code(self) -> int:
        """OK; NODE_FAULT when only hardware checks failed (retry on another node); else CONFIG_ERROR
        (a configuration failure must be fixed first, wherever the run goes)."""
        failed = [c for c in self.checks if c.status == "fail"]
        if not failed:
            return exit_codes.OK
        if all(c.cause == NODE for c in failed):
            return exit_codes.NODE_FAULT
        return exit_codes.CONFIG_ERROR

    def to_dict(self) -> dict[str, object]:
        """The report as JSON-ready data (written to launch/preflight.json)."""
        return {
            "ok": self.ok,
            "exit_code": self.exit_code,
            "mode": self.mode,
            "checks": [asdict(c) for c in self.checks],
            **self.environment,
        }


def _torch_cuda() -> tuple[str | None, int]:
    import torch

    return torch.version.cuda, torch.cuda.device_count() if torch.cuda.is_available() else 0


def _adam_backend_importable() -> bool:
    return importlib.util.find_spec("adam_atan2_backend") is not None


def _allreduce(n: int) -> tuple[bool, str]:
    from trm.launch.host.gpu_checks import allreduce_check

    result = allreduce_check(n, backend="nccl")
    return result.ok, result.detail


def _matmul(index: int) -> tuple[bool, str, float]:
    from trm.launch.host.gpu_checks import matmul_check

    r = matmul_check(f"cuda:{index}")
    return r.ok, f"uuid {r.uuid}, max rel error {r.max_rel_error:.1e}", r.tflops


def fs_total_bytes(path: Path) -> int:
    """Size of the filesystem holding `path`."""
    st = os.statvfs(path)
    return st.f_blocks * st.f_frsize


def fs_free_bytes(path: Path) -> int:
    """Free bytes on the filesystem holding `path`."""
    return shutil.disk_usage(path).free


def check_shm(path: Path, size: Callable[[Path], int] = fs_total_bytes) -> CheckResult:
    """/dev/shm must hold at least 1 GiB (NCCL, DataLoader workers)."""
    try:
        total = size(path)
    except OSError as err:
        return CheckResult("shm", "fail", f"{path}: cannot stat ({err})", SHM_FIX)
    found = f"{path}: {total / GIB:.2f} GiB"
    if total < MIN_SHM_BYTES:
        return CheckResult("shm", "fail", f"{found} (< 1 GiB)", SHM_FIX)
    return CheckResult("shm", "ok", f"{found} (>= 1 GiB)")


MIN_MEMLOCK_BYTES = 64 * 1024**2


def memlock_limit() -> int:
    """Soft `ulimit -l` in bytes; -1 when unlimited."""
    import resource

    soft, _hard = resource.getrlimit(resource.RLIMIT_MEMLOCK)
    return -1 if soft == resource.RLIM_INFINITY else int(soft)


def check_memlock(limit: int) -> CheckResult:
    """`ulimit -l`: NCCL pins host memory; a tiny limit breaks or slows its transports."""
    if limit < 0:
        return CheckResult("ulimit -l", "ok", "locked memory unlimited")
    found = f"locked memory limited to {limit / 1024**2:.1f} MiB"
    if limit < MIN_MEMLOCK_BYTES:
        return CheckResult(
            "ulimit -l",
            "warn",
            found,
            "NCCL pins host buffers; raise the limit: `docker run --ulimit memlock=-1 …`, or in Kubernetes "
            "set it in the container runtime's default ulimits",
        )
    return CheckResult("ulimit -l", "ok", found)


def check_disk(
    path: Path,
    checkpoint_bytes: int,
    keep: int,
    free_fn: Callable[[Path], int] = fs_free_bytes,
    keep_best: int | None = None,
) -> CheckResult:
    """Free disk at the checkpoint directory >= checkpoint size x the most checkpoints a run holds at once
    with CHECKPOINT_KEEP=keep and `keep_best` best ones (trm.training.config.checkpoints_held: 2 x keep +
    best + 1 in flight; default best: checkpoint.keep_best's default)."""
    from trm.training.config import checkpoints_held

    probe = path.absolute()
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    free = free_fn(probe)
    held = checkpoints_held(keep, keep_best)
    need = checkpoint_bytes * held
    best = "the best" if held - 2 * keep - 1 == 1 else f"the best {held - 2 * keep - 1}"
    found = (
        f"{free / GIB:.1f} GiB free at {probe}; need {need / GIB:.1f} GiB (checkpoint "
        f"{checkpoint_bytes / GIB:.2f} GiB x {held}: newest {keep} rolling + {keep} evaluation, {best}, one in flight)"
    )
    if free < need:
        return CheckResult(
            "disk",
            "fail",
            found,
            "free space, lower CHECKPOINT_KEEP, or rent a bigger disk (Vast.ai: `--disk 200`; Kubernetes: a "
            "larger PVC for the checkpoint directory)",
        )
    return CheckResult("disk", "ok", found)


def covering_variants(sms: set[int], catalog: tuple = image_catalog.VARIANTS) -> list[str]:
    """The image variants (trm/images/catalog.py) whose builds run on every one of `sms`: sm_86 -> sm80
    and sm80-cu128 (an sm_80 cubin runs on 8.6)."""
    return [
        name
        for name, _cuda, _floor, _min, archs, _tag, _lock in catalog
        if all(compat.sm_covered(sm, compat.parse_sm_list(" ".join(archs))) for sm in sms)
    ]


def _check_sm(
    gpus: list[GpuInfo], sm_list: str, label: str, source: str, catalog: tuple = image_catalog.VARIANTS
) -> CheckResult:
    built = compat.parse_sm_list(sm_list)
    missing = sorted({g.sm for g in gpus if not compat.sm_covered(g.sm, built)})
    found = f"GPU SM {sorted({g.sm for g in gpus})}; {label} built for {sm_list!r} ({source})"
    if missing:
        names = sorted({g.name for g in gpus if g.sm in missing})
        variants = covering_variants(set(missing), catalog)
        use = (
            f"use the image variant {' or '.join(variants)} (the driver picks which: `python -m tools.images "
            f"ref {variants[0]} --driver <version>`)"
            if variants
            else "no trm image variant covers them (the launch plan's image line names the nearest and the "
            "torch-backend fallback)"
        )
        return CheckResult(
            f"{label} sm",
            "fail",
            found,
            f"{', '.join(names)} need SM {missing}, which this {label} lacks ('no kernel image is available' "
            f"later): {use}, or rebuild with TORCH_CUDA_ARCH_LIST including "
            + " ".join(f"{m // 10}.{m % 10}" for m in missing),
        )
    return CheckResult(f"{label} sm", "ok", found)


def run_preflight(
    ctx: PreflightContext,
    *,
    mode: str = "auto",
    num_gpus: int | None = None,
    checkpoint_bytes: int = 6 * GIB,
    keep: int = 3,
    keep_best: int | None = None,
    collectives: bool = True,
) -> PreflightReport:
    """Run every check; mode is auto (GPU when nvidia-smi exists), gpu (require GPUs) or cpu."""
    if mode not in ("auto", "gpu", "cpu"):
        raise TRMError(f"preflight mode must be auto, gpu or cpu (got {mode!r})")
    checks: list[CheckResult] = []
    env: dict[str, object] = dict(collect_versions())
    gpus: list[GpuInfo] = []
    visible_value = (os.environ if ctx.environ is None else ctx.environ).get(cuda_visible.ENV)
    if mode != "cpu":
        try:
            gpus = query_gpus(ctx.smi, ctx.environ)
            if not gpus and visible_value is not None:
                hidden = f"{cuda_visible.ENV}={visible_value!r} hides every GPU nvidia-smi lists"
                if mode == "gpu":
                    checks.append(CheckResult("nvidia-smi", "fail", hidden, cuda_visible.FIX))
                else:
                    mode = "cpu"
                    checks.append(
                        CheckResult("nvidia-smi", "skip", f"{hidden}: CPU mode, GPU checks skipped")
                    )
            elif not gpus:
                raise TRMError(
                    "nvidia-smi answered but lists no GPU; check `nvidia-smi -L` and the device plugin"
                )
        except NvidiaSmiMissing as err:
            if mode == "gpu":
                checks.append(
                    CheckResult("nvidia-smi", "fail", "not found on PATH", str(err).split(": ", 1)[1])
                )
            else:
                mode = "cpu"
                checks.append(
                    CheckResult("nvidia-smi", "skip", "not found on PATH: CPU mode, GPU checks skipped")
                )
        except cuda_visible.VisibleDevicesError as err:
            checks.append(
                CheckResult("nvidia-smi", "fail", "CUDA_VISIBLE_DEVICES names GPUs wrongly", str(err))
            )
        except TRMError as err:
            # The tool is there but the driver or a GPU does not answer: a fault of this machine.
            checks.append(CheckResult("nvidia-smi", "fail", "did not answer", str(err), cause=NODE))
    if mode == "cpu" and not checks:
        checks.append(CheckResult("nvidia-smi", "skip", "CPU mode requested (--cpu): GPU checks skipped"))
    if gpus:
        mode = "gpu"
        visible = "" if visible_value is None else f" ({cuda_visible.ENV}={visible_value!r})"
        if num_gpus is not None and num_gpus > len(gpus):
            checks.append(
                CheckResult(
                    "nvidia-smi",
                    "fail",
                    f"{len(gpus)} GPU(s){visible}, {num_gpus} requested",
                    "lower NUM_GPUS or start the container with every GPU (`--gpus all`)"
                    + (f", and list them in {cuda_visible.ENV} or unset it" if visible else ""),
                )
            )
        gpus = gpus[: num_gpus or len(gpus)]
        env["gpus"] = [g.to_dict() for g in gpus]
        checks.append(
            CheckResult(
                "nvidia-smi",
                "ok",
                "; ".join(f"{g.index}: {g.name} {g.memory_gib:.0f} GiB sm{g.sm} {g.uuid}" for g in gpus)
                + visible,
            )
        )
        checks += _gpu_checks(ctx, gpus, env, collectives)
    elif mode == "gpu" and not any(c.status == "fail" for c in checks):
        checks.append(CheckResult("nvidia-smi", "fail", "no GPU", "start the container with `--gpus all`"))
    size_fn = ctx.fs_size or fs_total_bytes
    checks.append(check_shm(ctx.shm_path, size_fn))
    try:
        env["dev_shm_bytes"] = size_fn(ctx.shm_path)
    except OSError:
        env["dev_shm_bytes"] = None
    checks.append(check_disk(ctx.disk_path, checkpoint_bytes, keep, ctx.fs_free or fs_free_bytes, keep_best))
    return PreflightReport(mode=mode, checks=checks, environment=env)


def _gpu_checks(
    ctx: PreflightContext, gpus: list[GpuInfo], env: dict[str, object], collectives: bool
) -> list[CheckResult]:
    """The GPU checks in order; a torch that cannot see the GPUs ends them before any CUDA work."""
    torch_cuda, visible = (ctx.torch_cuda or _torch_cuda)()
    driver, driver_cuda = query_driver_cuda(ctx.smi)
    driver = driver or gpus[0].driver_version
    env.update(driver_version=driver, driver_cuda=driver_cuda, torch_cuda=torch_cuda)
    adam = check_adam_atan2(gpus, ctx)
    # the extension where it imports (the trainer's "auto" then uses it), else trm's AdamATan2
    env["optimizer_backend"] = (
        "ext" if (ctx.adam_backend_importable or _adam_backend_importable)() else "torch"
    )
    checks = [
        check_image_family(gpus, driver, ctx),
        check_driver(gpus, driver, driver_cuda, ctx.image_cuda or torch_cuda, ctx.catalog, ctx.families),
        check_image_sm(gpus, ctx.image_sm_list, torch_cuda),
        adam,
        check_c_toolchain((ctx.c_toolchain or _c_toolchain)()),
    ]
    seen = check_torch_sees_gpus(gpus, torch_cuda, visible)
    checks.append(seen)
    if seen.status == "fail":
        return checks
    checks.append(check_memlock((ctx.memlock or memlock_limit)()))
    if not collectives:
        checks.append(CheckResult("nccl all-reduce", "skip", "collectives disabled (--no-collectives)"))
        return checks
    checks.append(check_allreduce(len(gpus), ctx.allreduce or _allreduce))
    checks += check_matmuls(gpus, ctx.matmul or _matmul)
    return checks


def _driver_runs(floor_cuda: str, min_driver: str, driver: str | None, driver_cuda: str | None) -> bool:
    """Whether a driver reports (or, by version, has) at least CUDA `floor_cuda`."""
    if driver_cuda:
        return compat.cuda_major_minor(driver_cuda) >= compat.cuda_major_minor(floor_cuda)
    return bool(driver and min_driver) and compat.version_tuple(driver) >= compat.version_tuple(min_driver)


def variants_for_host(
    gpus: list[GpuInfo],
    driver: str | None,
    catalog: tuple = image_catalog.VARIANTS,
    families: tuple = image_catalog.FAMILIES,
) -> list[str]:
    """The tag of the image variant for this host: its driver picks the family (trm.images.families, the
    one decision the bootstrap and `python -m tools.images ref --driver` also make), its GPUs the variant; [] if none."""
    if not driver or not gpus:
        return []
    try:
        return [variant_for_host({g.sm for g in gpus}, driver, catalog, families)[2]]
    except TRMError:
        return []


def check_image_family(gpus: list[GpuInfo], driver: str | None, ctx: PreflightContext) -> CheckResult:
    """Names the image variant that runs on this driver (and this image's, when inside one)."""
    if not driver:
        return CheckResult("image family", "skip", "nvidia-smi reports no driver version")
    running = f"; this is {ctx.image_variant}" if ctx.image_variant else ""
    try:
        family, variant, tag = variant_for_host({g.sm for g in gpus}, driver, ctx.catalog, ctx.families)
    except TRMError as err:
        return CheckResult("image family", "fail", f"driver {driver}{running}", str(err))
    backend = "adam-atan2 extension" if family.optimizer_backend == "ext" else "trm AdamATan2 (torch)"
    return CheckResult(
        "image family",
        "ok",
        f"driver {driver} runs {variant} ({tag}: CUDA {family.cuda}, torch {family.torch}, optimizer "
        f"{backend}){running}",
    )


def driver_fix(
    gpus: list[GpuInfo],
    driver: str | None,
    driver_cuda: str | None,
    image_cuda: str,
    catalog: tuple,
    families: tuple = image_catalog.FAMILIES,
) -> str:
    """What to do when the driver is too old for the image: the variant tags that run here, or the driver
    the host needs (with the offer filter)."""
    need = compat.min_driver_for(f"{compat.cuda_major_minor(image_cuda)[0]}.0") or compat.min_driver_for(
        image_cuda
    )
    head = (
        f"this host's driver {driver or '?'} runs CUDA <= {driver_cuda or '?'}; CUDA {image_cuda} needs driver "
        f">= {need or 'the one in the CUDA release notes'}. "
    )
    tags = variants_for_host(gpus, driver, catalog, families)
    if tags:
        return (
            head
            + f"Use the image variant {' or '.join(tags)} (launch it by digest: python -m tools.images ref)"
        )
    covering = [
        (min_driver, tag)
        for _n, _c, _f, min_driver, archs, tag, _family in catalog
        if min_driver and all(compat.sm_covered(g.sm, compat.parse_sm_list(" ".join(archs))) for g in gpus)
    ]
    wanted = min(covering, key=lambda entry: compat.version_tuple(entry[0]), default=None)
    target = f"driver >= {wanted[0]} (for {wanted[1]})" if wanted else f"driver >= {need or '?'}"
    return head + (
        f"No trm image variant runs on this driver: rent a host with {target} (filter offers by driver "
        "version, runbooks/v1/01-provision.md), or have the driver upgraded"
    )


def check_driver(
    gpus: list[GpuInfo],
    driver: str | None,
    driver_cuda: str | None,
    image_cuda: str | None,
    catalog: tuple = image_catalog.VARIANTS,
    families: tuple = image_catalog.FAMILIES,
) -> CheckResult:
    """The driver runs the image's CUDA: natively (driver CUDA >= image CUDA), or through CUDA minor-version
    compatibility (same major release, driver >= that release's first driver; warned)."""
    if not image_cuda:
        return CheckResult(
            "driver", "skip", f"driver {driver}; image CUDA unknown (CPU torch, no TRM_IMAGE_CUDA)"
        )
    ok, found = compat.driver_supports(image_cuda=image_cuda, driver_cuda=driver_cuda, driver_version=driver)
    if ok:
        return CheckResult("driver", "ok", found)
    major = compat.cuda_major_minor(image_cuda)[0]
    floor = f"{major}.0"
    floor_driver = compat.min_driver_for(floor) or ""
    same_major = driver_cuda is not None and compat.cuda_major_minor(driver_cuda)[0] == major
    if ok is False and same_major and _driver_runs(floor, floor_driver, driver, driver_cuda):
        return CheckResult(
            "driver",
            "warn",
            f"{found}: runs through CUDA minor-version compatibility (same major release {major})",
            f"CUDA {image_cuda} code runs on any CUDA {major} driver >= {floor_driver}; only PTX newer than the "
            f"driver cannot be JIT-compiled (the images ship SASS for their GPUs). Full support: driver >= "
            f"{compat.min_driver_for(image_cuda) or '?'}",
        )
    fix = driver_fix(gpus, driver, driver_cuda, image_cuda, catalog, families)
    return CheckResult("driver", "warn" if ok is None else "fail", found, fix)


def check_image_sm(gpus: list[GpuInfo], image_sm_list: str | None, torch_cuda: str | None) -> CheckResult:
    """The GPUs' compute capability is covered by the image (its label, else torch's arch list)."""
    image_sm, source = image_sm_list, "TRM_IMAGE_SM_LIST"
    if not image_sm and torch_cuda:
        import torch

        image_sm = " ".join(a for a in torch.cuda.get_arch_list() if a.startswith(("sm_", "compute_")))
        source = "torch.cuda.get_arch_list()"
    if not image_sm:
        return CheckResult("image sm", "skip", "no SM list (set TRM_IMAGE_SM_LIST from the image label)")
    return _check_sm(gpus, image_sm, "image", source)


def check_adam_atan2(gpus: list[GpuInfo], ctx: PreflightContext) -> CheckResult:
    """The adam-atan2 CUDA extension imports and was built for these GPUs (else: slower torch backend)."""
    if not (ctx.adam_backend_importable or _adam_backend_importable)():
        from trm.optim.backend import EXTENSION_INSTALL

        if ctx.image_optimizer_backend == "torch":
            return CheckResult(
                "adam-atan2",
                "ok",
                f"optimizer backend torch: {ctx.image_variant or 'this image'} ships no adam-atan2 extension "
                "(no CUDA 12 nvcc on PyPI); trm's AdamATan2 runs the same update, slower",
            )
        return CheckResult(
            "adam-atan2",
            "warn",
            "adam_atan2_backend is not importable: the optimizer uses its torch backend (same update, slower)",
            f"use the trm image (it bakes the CUDA extension), or `{EXTENSION_INSTALL}`",
        )
    if ctx.adam_sm_list or ctx.image_sm_list:
        source = "TRM_ADAM_ATAN2_SM_LIST" if ctx.adam_sm_list else "TRM_IMAGE_SM_LIST"
        return _check_sm(gpus, ctx.adam_sm_list or ctx.image_sm_list or "", "adam-atan2", source)
    return CheckResult("adam-atan2", "ok", "adam_atan2_backend importable (SM list unknown)")


def _c_toolchain() -> tuple[str | None, Path, bool]:
    from trm.images.buildtools import find_c_compiler, python_include_dir

    include = python_include_dir()
    return find_c_compiler(), include, (include / "Python.h").is_file()


def check_c_toolchain(toolchain: tuple[str | None, Path, bool]) -> CheckResult:
    """torch.compile on CUDA (compile=auto, every GPU tier) needs what Triton builds its C helpers with."""
    cc, include, has_python_h = toolchain
    fix = (
        "torch.compile's Triton compiles C helpers at the first step: use the trm GPU image (it has them), or "
        "install gcc, libc6-dev and the Python headers (`apt-get install gcc libc6-dev python3-dev`), or set "
        "CC; else run with DISABLE_COMPILE=1 (slower)"
    )
    if cc is None:
        return CheckResult("c compiler", "fail", "no C compiler ($CC unset, no gcc or clang on PATH)", fix)
    if not has_python_h:
        return CheckResult("c compiler", "fail", f"{cc}, but no Python.h in {include}", fix)
    return CheckResult("c compiler", "ok", f"{cc}; Python.h in {include} (Triton's run-time C build)")


def check_torch_sees_gpus(gpus: list[GpuInfo], torch_cuda: str | None, visible: int) -> CheckResult:
    """torch is a CUDA build and sees every GPU nvidia-smi lists."""
    if visible < len(gpus):
        why = "torch is a CPU build" if not torch_cuda else "the container or the driver hides some from CUDA"
        return CheckResult(
            "torch cuda",
            "fail",
            f"torch (CUDA {torch_cuda}) sees {visible} of {len(gpus)} GPU(s): {why}",
            "run inside the trm GPU image (its torch is the CUDA build), or install the CUDA wheel of the "
            "same torch version; check `nvidia-smi` and `python -c 'import torch; print(torch.cuda.device_count())'` "
            "in the same container",
        )
    return CheckResult("torch cuda", "ok", f"torch (CUDA {torch_cuda}) sees {visible} GPU(s)")


def check_allreduce(n: int, allreduce: Callable[[int], tuple[bool, str]]) -> CheckResult:
    """An NCCL all-reduce across the local GPUs gives the right sum."""
    ok, detail = allreduce(n)
    return CheckResult(
        "nccl all-reduce",
        "ok" if ok else "fail",
        detail,
        "rerun with NCCL_DEBUG=INFO; a hang often means /dev/shm is too small or P2P is broken on this "
        "host (try NCCL_P2P_DISABLE=1, and report the host to the provider)",
        # /dev/shm and memlock have their own checks (configuration) before this one.
        cause=NODE,
    )


def check_matmuls(gpus: list[GpuInfo], matmul: Callable[[int], tuple[bool, str, float]]) -> list[CheckResult]:
    """A bf16 matmul on each GPU (correct result, UUID logged), and a warning for GPUs far below the median."""
    checks: list[CheckResult] = []
    speeds: list[float] = []
    for gpu in gpus:
        ok, detail, tflops = matmul(gpu.index)
        speeds.append(tflops)
        checks.append(
            CheckResult(
                f"matmul gpu{gpu.index}",
                "ok" if ok else "fail",
                f"{detail}, {tflops:.0f} TFLOP/s bf16 ({gpu.uuid})",
                f"GPU {gpu.index} ({gpu.uuid}) computes wrong results: exclude it (CUDA_VISIBLE_DEVICES) or "
                "move to another host, and report the UUID to the provider",
                cause=NODE,
            )
        )
    if len(speeds) > 1:
        median = sorted(speeds)[len(speeds) // 2]
        slow = [g for g, s in zip(gpus, speeds, strict=True) if s < 0.7 * median]
        if slow:
            checks.append(
                CheckResult(
                    "gpu speed",
                    "warn",
                    f"GPUs {[g.index for g in slow]} run below 70% of the median matmul speed",
                    "a throttled or faulty GPU slows every step of a synchronous run; check `nvidia-smi -q -d "
                    "PERFORMANCE` and consider another host: " + ", ".join(g.uuid for g in slow),
                )
            )
    return checks


def print_report(report: PreflightReport, write: Callable[[str], None] = print) -> None:
    """Human-readable report: one line per check, the fix under each failure."""
    write(f"preflight ({report.mode} mode)")
    for check in report.checks:
        write(check.line())
    failed = [c.name for c in report.checks if c.status == "fail"]
    if not failed:
        write("preflight passed")
    elif report.exit_code == exit_codes.NODE_FAULT:
        write(
            f"preflight FAILED: {', '.join(failed)}: a fault of this node (exit {exit_codes.NODE_FAULT}); "
            "run on another node and report this one"
        )
    else:
        write(
            f"preflight FAILED: {', '.join(failed)} (exit {exit_codes.CONFIG_ERROR}: fix the configuration)"
        )
