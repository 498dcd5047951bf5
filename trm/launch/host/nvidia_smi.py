"""Read the GPUs of this host from `nvidia-smi` (the command runner is injectable for tests)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, replace

from trm.errors import TRMError
from trm.launch.host import cuda_visible

QUERY_FIELDS = ("name", "memory.total", "compute_cap", "driver_version", "uuid")
QUERY_ARGS = (f"--query-gpu={','.join(QUERY_FIELDS)}", "--format=csv,noheader,nounits")
MEMORY_USED_ARGS = ("--query-gpu=index,memory.used", "--format=csv,noheader,nounits")
LIST_ARGS = ("-L",)
NOT_AVAILABLE = "[N/A]"  # what nvidia-smi prints for a field the device or driver cannot report

# A runner takes argv (without the program name) and returns (exit code, output): stdout alone when the
# command succeeds (warnings nvidia-smi prints on stderr must not reach the CSV parser), stdout + stderr
# when it fails (so the error message can be shown).
Runner = Callable[[Sequence[str]], tuple[int, str]]

NO_DRIVER_FIX = (
    "check that the NVIDIA driver is loaded on the host (`nvidia-smi` on the host itself), and that the "
    "container was started with GPUs: `docker run --gpus all …`, or a Kubernetes pod with "
    "`resources.limits: nvidia.com/gpu: N` on a node with the NVIDIA device plugin"
)


class NvidiaSmiMissing(TRMError):
    """`nvidia-smi` is not on PATH."""


@dataclass(frozen=True)
class GpuInfo:
    """One GPU as `nvidia-smi --query-gpu` reports it."""

    index: int
    name: str
    memory_mib: int
    compute_cap: str
    driver_version: str
    uuid: str
    mig_profile: str | None = None  # e.g. "3g.40gb" when this is a MIG slice (memory_mib is the slice's)
    # nvidia-smi's index of the GPU (the parent's, for a slice); `index` is CUDA's (CUDA_VISIBLE_DEVICES)
    smi_index: int | None = None

    @property
    def memory_gib(self) -> float:
        """Total memory in GiB."""
        return self.memory_mib / 1024

    @property
    def sm(self) -> int:
        """Compute capability as an SM number: "9.0" -> 90, "8.9" -> 89."""
        major, _, minor = self.compute_cap.partition(".")
        if not (major.isdigit() and (minor.isdigit() or not minor)):
            raise TRMError(
                f"nvidia-smi reports compute capability {self.compute_cap!r} for GPU {self.index} ({self.name}), "
                "so the image's GPU architectures cannot be checked against it; update the NVIDIA driver "
                f"(`nvidia-smi --query-gpu=compute_cap --format=csv -i {self.index}` must print a number "
                "such as 9.0)"
            )
        return int(major) * 10 + int(minor or 0)

    def to_dict(self) -> dict[str, object]:
        """The GPU as JSON-ready data."""
        return asdict(self)


def smi_uuid(torch_uuid: str, device_name: str) -> str:
    """A CUDA device's UUID as nvidia-smi prints it (and CUDA_VISIBLE_DEVICES takes it), from torch's
    `get_device_properties(i).uuid` (bare hex) and `.name`: "MIG-…" for a MIG slice (torch names it
    "… MIG 3g.40gb"), "GPU-…" for a whole GPU."""
    bare = torch_uuid.removeprefix("GPU-").removeprefix("MIG-")
    return ("MIG-" if re.search(r"\bMIG\b", device_name) else "GPU-") + bare


def system_runner(program: str = "nvidia-smi", timeout: float = 60.0) -> Runner:
    """A runner that executes the real `nvidia-smi` found on PATH."""

    def run(argv: Sequence[str]) -> tuple[int, str]:
        exe = shutil.which(program)
        if exe is None:
            raise NvidiaSmiMissing(f"`{program}` was not found on PATH: {NO_DRIVER_FIX}")
        try:
            proc = subprocess.run([exe, *argv], capture_output=True, text=True, timeout=timeout, check=False)
        except subprocess.TimeoutExpired as err:
            raise TRMError(
                f"`{program} {' '.join(argv)}` did not answer within {timeout:.0f} s: the driver is hung; "
                "reboot the host or move to another one"
            ) from err
        if proc.returncode == 0:
            return 0, proc.stdout
        return proc.returncode, proc.stdout + proc.stderr

    return run


def parse_query_csv(text: str) -> list[GpuInfo]:
    """Parse `nvidia-smi --query-gpu=name,memory.total,compute_cap,driver_version,uuid` CSV output."""
    gpus: list[GpuInfo] = []
    for line in text.splitlines():
        if not line.strip() or line.lstrip().upper().startswith("WARNING"):
            continue  # e.g. "WARNING: infoROM is corrupted at gpu …" (the GPUs are still listed)
        fields = [f.strip() for f in line.split(",")]
        if len(fields) != len(QUERY_FIELDS):
            raise TRMError(
                f"unexpected nvidia-smi output line {line!r}: expected {len(QUERY_FIELDS)} fields "
                f"({', '.join(QUERY_FIELDS)}); run `nvidia-smi {' '.join(QUERY_ARGS)}` by hand to check "
                "the driver"
            )
        name, memory, cap, driver, uuid = fields
        try:
            memory_mib = int(float(memory))
        except ValueError as err:
            raise TRMError(
                f"nvidia-smi reported memory.total {memory!r} for GPU {len(gpus)} ({name}); expected MiB: "
                f"the GPU may be in a bad state, check `nvidia-smi -q -i {len(gpus)}`"
            ) from err
        gpus.append(GpuInfo(len(gpus), name, memory_mib, cap, driver, uuid, smi_index=len(gpus)))
    return gpus


def query_gpus(runner: Runner | None = None, environ: Mapping[str, str] | None = None) -> list[GpuInfo]:
    """List the GPUs this process can use, as CUDA numbers them; raises TRMError with the fix when
    nvidia-smi is missing or fails, or when CUDA_VISIBLE_DEVICES (of `environ`, default this process's)
    names GPUs wrongly.

    nvidia-smi lists every GPU of the host; CUDA_VISIBLE_DEVICES keeps those it names, in its order
    (`trm.launch.host.cuda_visible`). A GPU in MIG mode is replaced by its visible MIG slices, sized from the
    slice: `--query-gpu` reports the parent GPU's memory, which would size the batch for 80 GB on a
    10-40 GB slice.
    """
    runner = runner or system_runner()
    code, out = runner(QUERY_ARGS)
    if code != 0:
        first = out.strip().splitlines()[0] if out.strip() else f"exit code {code}"
        raise TRMError(f"`nvidia-smi` failed: {first}; {NO_DRIVER_FIX}")
    gpus = parse_query_csv(out)
    code, listing = runner(LIST_ARGS)
    slices = parse_mig_listing(listing) if code == 0 else {}
    value = (os.environ if environ is None else environ).get(cuda_visible.ENV)
    if value is None:
        return with_mig_slices(gpus, slices)
    listed = cuda_visible.entries(value)
    mig_uuids = {i: [uuid for _profile, uuid in found] for i, found in slices.items()}
    visible: list[GpuInfo] = []
    for index, mig_uuid in cuda_visible.pick(value, listed, [g.uuid for g in gpus], mig_uuids):
        mine = [(p, u) for p, u in slices.get(index, []) if mig_uuid is None or u == mig_uuid]
        visible += with_mig_slices([gpus[index]], {index: mine} if mine else {})
    return [replace(g, index=i) for i, g in enumerate(visible)]


_LIST_GPU = re.compile(r"^GPU (?P<index>\d+): .*\(UUID: (?P<uuid>[^)]+)\)\s*$")
_LIST_MIG = re.compile(r"^\s+MIG (?P<profile>\S+)\s+Device\s+\d+: \(UUID: (?P<uuid>[^)]+)\)\s*$")
_PROFILE_GB = re.compile(r"(\d+)gb")


def parse_mig_listing(text: str) -> dict[int, list[tuple[str, str]]]:
    """MIG slices per GPU index from `nvidia-smi -L`: {gpu index: [(profile, MIG uuid), ...]}."""
    slices: dict[int, list[tuple[str, str]]] = {}
    current: int | None = None
    for line in text.splitlines():
        if match := _LIST_GPU.match(line):
            current = int(match.group("index"))
        elif (match := _LIST_MIG.match(line)) and current is not None:
            slices.setdefault(current, []).append((match.group("profile"), match.group("uuid")))
    return slices


def mig_memory_mib(profile: str) -> int:
    """Memory of a MIG slice from its profile name ("3g.40gb" -> 40 GiB, "1g.10gb+me" -> 10 GiB)."""
    found = _PROFILE_GB.findall(profile)
    if not found:
        raise TRMError(
            f"cannot read the memory size of MIG profile {profile!r} (expected a name such as 3g.40gb); "
            "run `nvidia-smi -L` to check, or use a whole GPU"
        )
    return int(found[-1]) * 1024


def with_mig_slices(gpus: list[GpuInfo], slices: dict[int, list[tuple[str, str]]]) -> list[GpuInfo]:
    """Replace every GPU that has visible MIG slices by those slices (renumbered in order)."""
    out: list[GpuInfo] = []
    for gpu in gpus:
        for profile, uuid in slices.get(gpu.index, []) or [(None, None)]:
            if profile is None:
                out.append(replace(gpu, index=len(out)))
            else:
                out.append(
                    replace(
                        gpu,
                        index=len(out),
                        name=f"{gpu.name} MIG {profile}",
                        memory_mib=mig_memory_mib(profile),
                        uuid=str(uuid),
                        mig_profile=profile,
                    )
                )
    return out


_HEADER = re.compile(r"Driver Version:\s*(?P<driver>[\d.]+).*?CUDA Version:\s*(?P<cuda>[\d.]+)")


def parse_plain_header(text: str) -> tuple[str | None, str | None]:
    """(driver version, highest CUDA version the driver supports) from plain `nvidia-smi` output."""
    match = _HEADER.search(text)
    if not match:
        return None, None
    return match.group("driver"), match.group("cuda")


def query_driver_cuda(runner: Runner | None = None) -> tuple[str | None, str | None]:
    """Driver version and its CUDA version from the plain `nvidia-smi` banner (None when not shown)."""
    runner = runner or system_runner()
    code, out = runner(())
    if code != 0:
        return None, None
    return parse_plain_header(out)


def query_memory_used(runner: Runner | None = None, gpus: Sequence[GpuInfo] | None = None) -> dict[int, int]:
    """Memory in use per GPU, in MiB (used by the probe to record peak memory): by nvidia-smi's index, or,
    given `gpus` (from `query_gpus`), by their CUDA index, for those GPUs only (a MIG slice reports its
    parent GPU's memory)."""
    runner = runner or system_runner()
    code, out = runner(MEMORY_USED_ARGS)
    if code != 0:
        return {}
    used: dict[int, int] = {}
    for line in out.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) == 2 and parts[0].isdigit():
            try:
                used[int(parts[0])] = int(float(parts[1]))
            except ValueError:
                continue
    if gpus is None:
        return used
    return {g.index: used[g.smi_index] for g in gpus if g.smi_index in used}
