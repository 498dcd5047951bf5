"""Compatibility rules between the host (driver, GPU compute capability) and the image (CUDA, SM list)."""

from __future__ import annotations

import re

# Minimum Linux driver for each CUDA toolkit (CUDA release notes, "CUDA Toolkit and Corresponding Driver
# Versions"). Used for the fix message and when the nvidia-smi banner does not show the driver's CUDA.
MIN_DRIVER_FOR_CUDA: dict[tuple[int, int], str] = {
    (11, 8): "520.61.05",
    (12, 0): "525.60.13",
    (12, 1): "530.30.02",
    (12, 2): "535.54.03",
    (12, 3): "545.23.06",
    (12, 4): "550.54.14",
    (12, 5): "555.42.02",
    (12, 6): "560.28.03",
    (12, 8): "570.26",
    (12, 9): "575.51.03",
    (13, 0): "580.65.06",
}


# The first CUDA release that compiles for (and so whose driver runs) a GPU architecture, where it is newer
# than a family's first release. Blackwell: CUDA 12.8 added the sm_100 (B200, GB200) and sm_120 (RTX 50xx,
# RTX PRO 6000 Blackwell) targets (CUDA 12.8 release notes; NVIDIA's Blackwell Compatibility Guide, 1.4.2),
# and CUDA 12.9 sm_103 (B300) and sm_121 (GB10). So a Blackwell image needs at least the CUDA 12.8 driver,
# 570.26 (MIN_DRIVER_FOR_CUDA): the R570 branch, whatever its family's own floor.
FIRST_CUDA_FOR_ARCH: dict[str, str] = {"10.0": "12.8", "12.0": "12.8", "10.3": "12.9", "12.1": "12.9"}


def arch_cuda_floor(archs: tuple[str, ...] | list[str]) -> str | None:
    """The newest of the first CUDA releases of `archs` (e.g. ("10.0",) -> "12.8"); None when no arch
    needs more than any CUDA 12 release."""
    floors = [FIRST_CUDA_FOR_ARCH[a] for a in archs if a in FIRST_CUDA_FOR_ARCH]
    return max(floors, key=cuda_major_minor) if floors else None


def version_tuple(version: str) -> tuple[int, ...]:
    """ "550.54.14" -> (550, 54, 14); non-numeric parts are dropped."""
    return tuple(int(p) for p in re.findall(r"\d+", version))


def cuda_major_minor(version: str) -> tuple[int, int]:
    """ "12.4.1" -> (12, 4)."""
    parts = version_tuple(version)
    if not parts:
        raise ValueError(f"not a CUDA version: {version!r}")
    return parts[0], parts[1] if len(parts) > 1 else 0


def min_driver_for(cuda: str) -> str | None:
    """The oldest driver that runs CUDA `cuda` (None when the version is not in the table)."""
    key = cuda_major_minor(cuda)
    known = [k for k in MIN_DRIVER_FOR_CUDA if k <= key]
    if not known or key[0] != max(known)[0]:
        return MIN_DRIVER_FOR_CUDA.get(key)
    return MIN_DRIVER_FOR_CUDA[max(known)]


def driver_supports(
    *, image_cuda: str, driver_cuda: str | None, driver_version: str | None
) -> tuple[bool | None, str]:
    """Whether the host driver can run an image built for `image_cuda`; (None, why) when undecidable."""
    need = cuda_major_minor(image_cuda)
    if driver_cuda:
        ok = cuda_major_minor(driver_cuda) >= need
        return (
            ok,
            f"driver {driver_version or '?'} supports CUDA {driver_cuda}, image needs CUDA {image_cuda}",
        )
    minimum = min_driver_for(image_cuda)
    if driver_version and minimum:
        ok = version_tuple(driver_version) >= version_tuple(minimum)
        return ok, f"driver {driver_version}, image CUDA {image_cuda} needs driver >= {minimum}"
    return None, f"cannot tell whether driver {driver_version or '?'} runs CUDA {image_cuda}"


def parse_sm_list(text: str) -> list[tuple[int, bool]]:
    """Parse an SM list: "80 89 90", "sm_80,sm_90", "8.0;8.9;9.0+PTX" -> [(80, False), …, (90, True)].

    The bool is True for PTX entries (JIT-compiled on newer GPUs).
    """
    out: list[tuple[int, bool]] = []
    for token in re.split(r"[\s,;]+", text.strip()):
        if not token:
            continue
        ptx = token.lower().endswith("+ptx") or token.lower().startswith("compute_")
        core = re.sub(r"(?i)\+ptx$|^sm_|^compute_", "", token)
        core = core.rstrip("aAfF") if core[-1:].isalpha() else core
        if "." in core:
            major, minor = core.split(".", 1)
            sm = int(major) * 10 + int(minor)
        elif core.isdigit():
            sm = int(core)
        else:
            raise ValueError(f"not an SM / compute capability: {token!r}")
        out.append((sm, ptx))
    return out


def sm_covered(gpu_sm: int, built: list[tuple[int, bool]]) -> bool:
    """CUDA binary compatibility: a cubin for X.y runs on X.z with z >= y; PTX for N runs on every SM >= N."""
    for sm, ptx in built:
        if ptx and gpu_sm >= sm:
            return True
        if sm // 10 == gpu_sm // 10 and sm % 10 <= gpu_sm % 10:
            return True
    return False
