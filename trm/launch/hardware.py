"""Choose per-GPU micro-batch, accumulation and compile from the hardware table, keeping the global batch."""

from __future__ import annotations

import tomllib
from dataclasses import asdict, dataclass, field
from pathlib import Path

from trm.batching import largest_divisor_at_most
from trm.errors import TRMError
from trm.launch.nvidia_smi import GpuInfo
from trm.training.config import TrainConfig

TABLE_PATH = Path(__file__).with_name("hardware.toml")


@dataclass(frozen=True, kw_only=True)
class Tier:
    """One row of the hardware table."""

    name: str
    match: tuple[str, ...] = ()
    min_vram_gib: float = 0.0
    max_micro_batch: int
    compile: bool
    source: str = "estimate"
    note: str = ""

    def matches_name(self, gpu_name: str) -> bool:
        """Whether one of the `match` substrings occurs in the nvidia-smi name."""
        return any(m.lower() in gpu_name.lower() for m in self.match)


@dataclass(frozen=True, kw_only=True)
class HardwareTable:
    """The parsed `hardware.toml`: GPU tiers in priority order plus the CPU tier."""

    global_batch_size: int
    tiers: tuple[Tier, ...]
    cpu: Tier


@dataclass(frozen=True, kw_only=True)
class BatchLayout:
    """The resolved batch layout for this host; `overrides()` are the trainer's Hydra overrides."""

    tier: str
    tier_source: str
    matched_by: str  # "name", "vram" or "cpu"
    gpu_name: str
    vram_gib: float
    gpus_per_node: int
    nnodes: int
    world_size: int
    global_batch_size: int
    local_batch_size: int
    micro_batch_size: int
    grad_accumulation: int
    compile: bool
    device: str
    notes: list[str] = field(default_factory=list)

    def overrides(self) -> list[str]:
        """Trainer overrides that realise this plan (identical training math on every tier)."""
        return [
            f"global_batch_size={self.global_batch_size}",
            f"micro_batch_size={self.micro_batch_size}",
            f"compile={'true' if self.compile else 'false'}",
            f"device={self.device}",
        ]

    def to_dict(self) -> dict[str, object]:
        """The plan as JSON-ready data, overrides included."""
        data = asdict(self)
        data["overrides"] = self.overrides()
        return data

    def describe(self) -> str:
        """Human-readable multi-line summary."""
        where = (
            "CPU"
            if self.device == "cpu"
            else f"{self.gpus_per_node}x {self.gpu_name} ({self.vram_gib:.0f} GiB)"
        )
        lines = [
            f"tier              {self.tier} (matched by {self.matched_by}; table values: {self.tier_source})",
            f"hardware          {where}" + (f" x {self.nnodes} nodes" if self.nnodes > 1 else ""),
            f"world size        {self.world_size}",
            f"global batch      {self.global_batch_size} rows per optimizer step (fixed)",
            f"per-rank batch    {self.local_batch_size} = {self.grad_accumulation} accumulation step(s) x "
            f"micro-batch {self.micro_batch_size}",
            f"compile           {'on' if self.compile else 'off'}",
            f"overrides         {' '.join(self.overrides())}",
        ]
        lines += [f"note              {n}" for n in self.notes]
        return "\n".join(lines)


def _tier(raw: dict[str, object], where: str) -> Tier:
    try:
        return Tier(
            name=str(raw["name"]),
            match=tuple(str(m) for m in raw.get("match", [])),  # type: ignore[union-attr]
            min_vram_gib=float(raw.get("min_vram_gib", 0.0)),  # type: ignore[arg-type]
            max_micro_batch=int(raw["max_micro_batch"]),  # type: ignore[call-overload]
            compile=bool(raw["compile"]),
            source=str(raw.get("source", "estimate")),
            note=str(raw.get("note", "")),
        )
    except KeyError as err:
        raise TRMError(
            f"hardware table {where}: missing key {err}; add it (see the header of hardware.toml)"
        ) from err


def load_table(path: str | Path = TABLE_PATH) -> HardwareTable:
    """Parse and validate the hardware table."""
    path = Path(path)
    try:
        raw = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as err:
        raise TRMError(f"cannot read hardware table {path}: {err}; fix the TOML syntax") from err
    tiers = tuple(_tier(t, f"{path} [[tier]] #{i}") for i, t in enumerate(raw.get("tier", [])))
    if "cpu" not in raw:
        raise TRMError(
            f"hardware table {path} has no [cpu] section; add one (see the header of hardware.toml)"
        )
    table = HardwareTable(
        global_batch_size=TrainConfig.global_batch_size,  # the paper's; recipes may set their own
        tiers=tiers,
        cpu=_tier(raw["cpu"], f"{path} [cpu]"),
    )
    for tier in (*table.tiers, table.cpu):
        if tier.max_micro_batch < 1:
            raise TRMError(f"hardware table {path}: tier {tier.name} has max_micro_batch < 1; set it to >= 1")
    return table


def match_tier(gpu: GpuInfo, table: HardwareTable) -> tuple[Tier, str]:
    """The tier for one GPU: by name (VRAM permitting), else by VRAM alone."""
    vram = gpu.memory_gib
    for tier in table.tiers:
        if tier.matches_name(gpu.name) and vram >= tier.min_vram_gib:
            return tier, "name"
    by_vram = [t for t in table.tiers if vram >= t.min_vram_gib]
    if not by_vram:
        smallest = min(t.min_vram_gib for t in table.tiers)
        raise TRMError(
            f"GPU {gpu.index} ({gpu.name}, {vram:.1f} GiB) is smaller than every tier of the hardware table "
            f"(smallest: {smallest:.0f} GiB); rent a GPU with more memory, or add a tier to "
            "trm/launch/hardware.toml"
        )
    return max(by_vram, key=lambda t: t.min_vram_gib), "vram"


def select_layout(
    gpus: list[GpuInfo],
    *,
    num_gpus: int | None = None,
    nnodes: int = 1,
    global_batch_size: int | None = None,
    micro_batch_size: int | None = None,
    compile_override: bool | None = None,
    cpu_procs: int = 1,
    expected_global_batch_size: int | None = None,
    table: HardwareTable | None = None,
) -> BatchLayout:
    """Resolve the batch layout for `num_gpus` of `gpus` (all when None; CPU when there are none)."""
    table = table or load_table()
    gbs = global_batch_size or table.global_batch_size
    notes: list[str] = []
    used = gpus_to_use(gpus, num_gpus)
    device = size_device(used, table, cpu_procs, notes)
    world = device.per_node * nnodes
    local = local_batch(gbs, world, device.per_node, nnodes)
    micro = micro_batch(local, device.tier, micro_batch_size, gbs, world, notes)
    expected = expected_global_batch_size or table.global_batch_size
    if gbs != expected:
        notes.append(f"global_batch_size {gbs} differs from the run's {expected}: the training math changes")
    return BatchLayout(
        tier=device.tier.name,
        tier_source=device.tier.source,
        matched_by=device.matched_by,
        gpu_name=device.name,
        vram_gib=round(device.vram_gib, 1),
        gpus_per_node=device.per_node,
        nnodes=nnodes,
        world_size=world,
        global_batch_size=gbs,
        local_batch_size=local,
        micro_batch_size=micro,
        grad_accumulation=local // micro,
        compile=device.tier.compile if compile_override is None else compile_override,
        device=device.kind,
        notes=notes,
    )


def gpus_to_use(gpus: list[GpuInfo], num_gpus: int | None) -> list[GpuInfo]:
    """Step 1: the first `num_gpus` GPUs (all when None, none for 0); MIG slices only one at a time."""
    if num_gpus is not None and num_gpus > len(gpus):
        raise TRMError(
            f"NUM_GPUS={num_gpus} but nvidia-smi lists {len(gpus)} GPU(s); unset NUM_GPUS to use all of them "
            "or check that the container sees every GPU (`--gpus all`, `nvidia.com/gpu` limit)"
        )
    used = [] if num_gpus == 0 or not gpus else gpus[: num_gpus or len(gpus)]
    slices = [g for g in used if g.mig_profile]
    if slices and len(used) > 1:
        raise TRMError(
            f"{len(used)} devices include MIG slices ({', '.join(g.name for g in slices)}): a CUDA process "
            "uses one MIG slice and NCCL cannot join slices; set NUM_GPUS=1 (one slice), or use whole GPUs "
            "(MIG disabled) for multi-GPU training"
        )
    return used


@dataclass(frozen=True)
class SizedDevice:
    """Step 2's result: the tier that sizes every rank, and what it was chosen for."""

    tier: Tier
    matched_by: str
    kind: str  # "cuda" or "cpu"
    name: str
    vram_gib: float
    per_node: int


def size_device(used: list[GpuInfo], table: HardwareTable, cpu_procs: int, notes: list[str]) -> SizedDevice:
    """Step 2: the tier of the weakest GPU used (mixed hosts run at its pace and memory), or the CPU tier."""
    if not used:
        return SizedDevice(table.cpu, "cpu", "cpu", "cpu", 0.0, max(1, cpu_procs))
    per_gpu = [match_tier(g, table) for g in used]
    weakest = min(range(len(used)), key=lambda i: (used[i].memory_mib, per_gpu[i][0].max_micro_batch))
    tier, matched_by = per_gpu[weakest]
    gpu = used[weakest]
    if len({g.name for g in used}) > 1:
        notes.append(f"mixed GPU models {sorted({g.name for g in used})}: sized for {gpu.name}")
    if gpu.mig_profile:
        notes.append(
            f"MIG slice {gpu.mig_profile}: sized for its {gpu.memory_gib:.0f} GiB, not the whole GPU's memory"
        )
    if matched_by == "vram":
        notes.append(f"{gpu.name} is not in the table; fell back by VRAM to tier {tier.name}")
    return SizedDevice(tier, matched_by, "cuda", gpu.name, gpu.memory_gib, len(used))


def local_batch(gbs: int, world: int, per_node: int, nnodes: int) -> int:
    """Step 3: rows per rank per optimizer step; the global batch must split evenly over the ranks."""
    if gbs % world:
        raise TRMError(
            f"global_batch_size {gbs} is not divisible by the world size {world} ({per_node} per node x "
            f"{nnodes} node(s)); set NUM_GPUS to a divisor of {gbs} (1, 2, 4, 8) so the training math stays fixed"
        )
    return gbs // world


def micro_batch(local: int, tier: Tier, forced: int | None, gbs: int, world: int, notes: list[str]) -> int:
    """Step 4: the micro-batch: the tier's largest divisor of the local batch, or the forced one."""
    table_value = largest_divisor_at_most(local, tier.max_micro_batch)
    if forced is None:
        return table_value
    if forced < 1 or local % forced:
        raise TRMError(
            f"MICRO_BATCH_SIZE={forced} must divide the per-rank batch {local} "
            f"(= {gbs} / world size {world}); pick a divisor such as {largest_divisor_at_most(local, forced)}"
        )
    notes.append(f"micro-batch forced to {forced} (table: {table_value})")
    return forced
