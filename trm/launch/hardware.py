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
class HardwarePlan:
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


def select_plan(
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
) -> HardwarePlan:
    """Resolve the batch layout for `num_gpus` of `gpus` (all when None; CPU when there are none)."""
    table = table or load_table()
    gbs = global_batch_size or table.global_batch_size
    notes: list[str] = []
    if num_gpus is not None and num_gpus > len(gpus):
        raise TRMError(
            f"NUM_GPUS={num_gpus} but nvidia-smi lists {len(gpus)} GPU(s); unset NUM_GPUS to use all of them "
            "or check that the container sees every GPU (`--gpus all`, `nvidia.com/gpu` limit)"
        )
    if num_gpus == 0 or not gpus:
        used: list[GpuInfo] = []
    else:
        used = gpus[: num_gpus or len(gpus)]
    if used:
        per_gpu = [match_tier(g, table) for g in used]
        # Mixed hosts run at the pace and memory of the weakest GPU.
        weakest = min(range(len(used)), key=lambda i: (used[i].memory_mib, per_gpu[i][0].max_micro_batch))
        tier, matched_by = per_gpu[weakest]
        gpu = used[weakest]
        if len({g.name for g in used}) > 1:
            notes.append(f"mixed GPU models {sorted({g.name for g in used})}: sized for {gpu.name}")
        gpus_per_node, device, name, vram = len(used), "cuda", gpu.name, gpu.memory_gib
        if matched_by == "vram":
            notes.append(f"{gpu.name} is not in the table; fell back by VRAM to tier {tier.name}")
    else:
        tier, matched_by = table.cpu, "cpu"
        gpus_per_node, device, name, vram = max(1, cpu_procs), "cpu", "cpu", 0.0
    world = gpus_per_node * nnodes
    if gbs % world:
        raise TRMError(
            f"global_batch_size {gbs} is not divisible by the world size {world} ({gpus_per_node} per node x "
            f"{nnodes} node(s)); set NUM_GPUS to a divisor of {gbs} (1, 2, 4, 8) so the training math stays fixed"
        )
    local = gbs // world
    if micro_batch_size is not None:
        if micro_batch_size < 1 or local % micro_batch_size:
            raise TRMError(
                f"MICRO_BATCH_SIZE={micro_batch_size} must divide the per-rank batch {local} "
                f"(= {gbs} / world size {world}); pick a divisor such as {largest_divisor_at_most(local, micro_batch_size)}"
            )
        micro = micro_batch_size
        notes.append(
            f"micro-batch forced to {micro} (table: {largest_divisor_at_most(local, tier.max_micro_batch)})"
        )
    else:
        micro = largest_divisor_at_most(local, tier.max_micro_batch)
    use_compile = tier.compile if compile_override is None else compile_override
    expected = expected_global_batch_size or table.global_batch_size
    if gbs != expected:
        notes.append(f"global_batch_size {gbs} differs from the run's {expected}: the training math changes")
    return HardwarePlan(
        tier=tier.name,
        tier_source=tier.source,
        matched_by=matched_by,
        gpu_name=name,
        vram_gib=round(vram, 1),
        gpus_per_node=gpus_per_node,
        nnodes=nnodes,
        world_size=world,
        global_batch_size=gbs,
        local_batch_size=local,
        micro_batch_size=micro,
        grad_accumulation=local // micro,
        compile=use_compile,
        device=device,
        notes=notes,
    )
