"""The GPU catalog: every fact the project keeps about a GPU model, in one place.

Each `Gpu` says which device names it is (whole words of nvidia-smi's and torch's name: trm.gpu_names), its
compute capability, its dense bf16 peak, the hardware table's tiers that size it, the Kubernetes
`nvidia.com/gpu.product` label values of whole GPUs, and the boards nvidia-smi reports (name and memory).
The other tables are views of it:

- the hardware table's `match` words of a tier (trm.launch.host.hardware: the GPUs whose `tiers` name it);
- the MFU peaks (trm.training.throughput.peak_flops: `peak_bf16_tflops` and the `editions`);
- the Kubernetes product values and SM numbers (tools/jobs/policy.py: GPUs with `k8s_products`);
- the GPU models of the docs' cost table (trm.launch.plan.paper_runs: `board()`).

The views read `GPUS` when they are called, so a GPU added here is known to all of them. Adding a GPU is one
`Gpu(...)` below (docs/launch.md, "Adding a GPU"). The order matters only for the Kubernetes views
(annotation choices and error messages list GPUs in this order).
"""

from __future__ import annotations

from dataclasses import dataclass

from trm.errors import TRMError


@dataclass(frozen=True)
class Board:
    """One board of a GPU as nvidia-smi's `--query-gpu=name,memory.total` reports it."""

    name: str
    memory_mib: int


@dataclass(frozen=True, kw_only=True)
class Gpu:
    """One GPU model."""

    name: str
    """Whole words of the device name ("H100" is every H100 board; "A10" is not the A100 or the A10G)."""
    sm: int
    """Compute capability as an SM number (90 = 9.0): which image variants run on it."""
    tiers: tuple[str, ...]
    """The hardware table's tiers (trm/launch/host/hardware.toml) that size it by name; the table's order
    and each tier's min_vram_gib decide between several (the A100's 80 and 40 GB boards)."""
    peak_bf16_tflops: float | None = None
    """Dense bf16 tensor-core peak with fp32 accumulate, TFLOP/s per GPU (None: no MFU, no FLOP-based
    estimate). Where a data sheet gives only the sparse figure, the dense one is half of it."""
    editions: tuple[tuple[str, float], ...] = ()
    """More specific names of this GPU with a peak of their own ("H100 PCIe"); sized as this GPU."""
    k8s_products: tuple[str, ...] = ()
    """GPU feature discovery's nvidia.com/gpu.product values for whole GPUs of this model (every spelling
    seen across clusters and drivers; never a `-MIG-` one). Empty: no Job is sized for it."""
    boards: tuple[Board, ...] = ()
    """What nvidia-smi reports for its boards (recorded under tests/fixtures/nvidia_smi or in its tier's
    note)."""

    @property
    def compute_cap(self) -> str:
        """The compute capability as nvidia-smi's compute_cap prints it: `9.0`."""
        return f"{self.sm // 10}.{self.sm % 10}"

    @property
    def k8s_name(self) -> str:
        """The name as Kubernetes annotations spell it (`RTX-PRO-6000`)."""
        return self.name.replace(" ", "-")


GPUS: tuple[Gpu, ...] = (
    # Hopper: the H100 white paper (SXM5 989.4, PCIe 756 dense); www.nvidia.com/en-us/data-center/h100/ and
    # /h200/ (SXM 1,979, NVL 1,671 sparse, per GPU)
    Gpu(
        name="H100", sm=90, tiers=("h100-80g",), peak_bf16_tflops=989.4,  # SXM5: "NVIDIA H100 80GB HBM3"
        editions=(("H100 PCIe", 756.0), ("H100 NVL", 835.0)),
        k8s_products=("NVIDIA-H100-80GB-HBM3", "NVIDIA-H100-SXM5-80GB"),
        boards=(Board("NVIDIA H100 80GB HBM3", 81559),),
    ),
    # the H100 SXM5 compute with fewer NVLink lanes
    Gpu(name="H800", sm=90, tiers=("h100-80g",), peak_bf16_tflops=989.4),
    Gpu(
        name="H200", sm=90, tiers=("h200-141g",), peak_bf16_tflops=989.4,  # SXM5: the H100's compute, more memory
        editions=(("H200 NVL", 835.0),),
        k8s_products=("NVIDIA-H200", "NVIDIA-H200-SXM5-141GB"),
        boards=(Board("NVIDIA H200", 143771),),
    ),
    Gpu(name="GH200", sm=90, tiers=("h200-141g",)),
    # Blackwell data center: the HGX B200 data sheet (FP16/BF16 36 PFLOPS sparse per 8 GPUs: 2,250 dense
    # each) and the GB200 NVL72 data sheet (360 PFLOPS sparse per 72 GPUs: 2,500 dense each)
    Gpu(
        name="B200", sm=100, tiers=("b200-180g",), peak_bf16_tflops=2250.0,
        k8s_products=("NVIDIA-B200",), boards=(Board("NVIDIA B200", 183359),),
    ),
    Gpu(name="GB200", sm=100, tiers=("b200-180g",), peak_bf16_tflops=2500.0),
    # Blackwell workstation and consumer (sm_120): the RTX PRO 6000 Blackwell data sheet (4,000 FP4 AI TOPS
    # sparse; BF16 is a quarter of FP4 and dense half of sparse: 500; full-rate fp32 accumulate, as on every
    # RTX PRO card; the 300 W Max-Q edition clocks lower, so its MFU reads low), and the RTX Blackwell
    # architecture white paper, appendix A (GeForce RTX 5090: bf16 with fp32 accumulate 209.5, half its
    # fp16-accumulate rate, as on every GeForce card)
    Gpu(
        name="RTX PRO 6000", sm=120, tiers=("rtxpro6000-96g",), peak_bf16_tflops=500.0,
        k8s_products=(
            "NVIDIA-RTX-PRO-6000-Blackwell-Server-Edition",  # pragma: allowlist secret (a GPU name)
            "NVIDIA-RTX-PRO-6000-Blackwell-Workstation-Edition",  # pragma: allowlist secret (a GPU name)
            "NVIDIA-RTX-PRO-6000-Blackwell-Max-Q-Workstation-Edition",  # pragma: allowlist secret (a GPU name)
        ),
        boards=(
            Board("NVIDIA RTX PRO 6000 Blackwell Server Edition", 97887),
            Board("NVIDIA RTX PRO 6000 Blackwell Workstation Edition", 97887),
        ),
    ),
    Gpu(
        name="RTX 5090", sm=120, tiers=("rtx5090-32g",), peak_bf16_tflops=209.5,
        k8s_products=("NVIDIA-GeForce-RTX-5090",), boards=(Board("NVIDIA GeForce RTX 5090", 32607),),
    ),
    # Ampere sm_86: the GA102 architecture white paper (RTX A6000: bf16 with fp32 accumulate 154.8 dense;
    # GeForce RTX 3090: 71, half rate), the A40 data sheet (149.7 dense) and
    # www.nvidia.com/en-us/data-center/a10/ (125 dense). The A10G (AWS) has no NVIDIA data sheet: no peak.
    Gpu(
        name="RTX A6000", sm=86, tiers=("a6000-48g",), peak_bf16_tflops=154.8,
        k8s_products=("NVIDIA-RTX-A6000",), boards=(Board("NVIDIA RTX A6000", 49140),),
    ),
    Gpu(
        name="A40", sm=86, tiers=("a6000-48g",), peak_bf16_tflops=149.7,
        k8s_products=("NVIDIA-A40",), boards=(Board("NVIDIA A40", 46068),),  # ECC on
    ),
    Gpu(
        name="A10", sm=86, tiers=("rtx3090-24g",), peak_bf16_tflops=125.0,
        k8s_products=("NVIDIA-A10", "NVIDIA-A10G"),  # a Job sized for the A10 runs on AWS's A10G too
        boards=(Board("NVIDIA A10", 23028),),
    ),
    Gpu(name="A10G", sm=86, tiers=("rtx3090-24g",), boards=(Board("NVIDIA A10G", 23028),)),
    Gpu(
        name="RTX 3090", sm=86, tiers=("rtx3090-24g",), peak_bf16_tflops=71.0,
        k8s_products=("NVIDIA-GeForce-RTX-3090",), boards=(Board("NVIDIA GeForce RTX 3090", 24576),),
    ),
    # Ada (sm89): www.nvidia.com/en-us/data-center/l4/ (242 sparse), the L40S data sheet (362.05 dense) and
    # the Ada architecture white paper, appendix A (GeForce RTX 4090: bf16 with fp32 accumulate 165.2)
    Gpu(
        name="L4", sm=89, tiers=("l4-24g",), peak_bf16_tflops=121.0,
        k8s_products=("NVIDIA-L4",), boards=(Board("NVIDIA L4", 23034),),
    ),
    Gpu(name="L40S", sm=89, tiers=("l40s-48g",), peak_bf16_tflops=362.05, boards=(Board("NVIDIA L40S", 46068),)),
    Gpu(name="L40", sm=89, tiers=("l40s-48g",)),
    Gpu(name="RTX 6000 Ada", sm=89, tiers=("l40s-48g",)),
    Gpu(
        name="RTX 4090", sm=89, tiers=("rtx4090-24g",), peak_bf16_tflops=165.2,
        boards=(Board("NVIDIA GeForce RTX 4090", 24564),),
    ),
    # Ampere sm_80: www.nvidia.com/en-us/data-center/a100/ (312 dense)
    Gpu(
        name="A100", sm=80, tiers=("a100-80g", "a100-40g"), peak_bf16_tflops=312.0,
        boards=(Board("NVIDIA A100-SXM4-80GB", 81920), Board("NVIDIA A100-SXM4-40GB", 40960)),
    ),
)  # fmt: skip


def tier_names(tier: str) -> tuple[str, ...]:
    """The device-name words a hardware-table tier matches: the names of the GPUs that list it."""
    return tuple(g.name for g in GPUS if tier in g.tiers)


def peak_tflops() -> tuple[tuple[str, float], ...]:
    """(name, dense bf16 TFLOP/s) of every GPU and edition with a known peak."""
    out: list[tuple[str, float]] = []
    for gpu in GPUS:
        if gpu.peak_bf16_tflops is not None:
            out.append((gpu.name, gpu.peak_bf16_tflops))
        out += gpu.editions
    return tuple(out)


def k8s_products() -> dict[str, tuple[str, ...]]:
    """Kubernetes GPU name -> its nvidia.com/gpu.product values, for the GPUs a Job may be sized for."""
    return {g.k8s_name: g.k8s_products for g in GPUS if g.k8s_products}


def k8s_sm() -> dict[str, int]:
    """Kubernetes GPU name -> SM number, for the same GPUs."""
    return {g.k8s_name: g.sm for g in GPUS if g.k8s_products}


def board(name: str) -> tuple[Gpu, Board]:
    """The GPU and board nvidia-smi names `name` (exactly, as the catalog records it)."""
    for gpu in GPUS:
        for b in gpu.boards:
            if b.name == name:
                return gpu, b
    known = ", ".join(b.name for g in GPUS for b in g.boards)
    raise TRMError(f"no board {name!r} in the GPU catalog (trm/gpu_catalog.py); known: {known}")
