"""Choose per-GPU micro-batch, accumulation and compile from the hardware table, keeping the global batch."""

from __future__ import annotations

import re
import tomllib
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

from trm import gpu_catalog
from trm.batching import largest_divisor_at_most
from trm.errors import TRMError
from trm.gpu_names import names_model
from trm.launch.host.nvidia_smi import GpuInfo
from trm.model.registry import ACTIVATION_TOKENS, get_spec
from trm.training.config import TrainConfig

if TYPE_CHECKING:
    from trm.training.recipes import Recipe

TABLE_PATH = Path(__file__).with_name("hardware.toml")


@dataclass(frozen=True, kw_only=True)
class TierSpeed:
    """A measured tier's `[tier.speed]`: one optimizer step's time and the evaluation rate on `gpus` GPUs
    for one recipe's model and data, as `make gpu-check` measured them."""

    date: str
    gpu: str
    gpus: int
    recipe: str
    step_seconds: float
    step_rows: int
    eval_rows_per_s: float

    @property
    def row_seconds(self) -> float:
        """Training seconds per row on one GPU (the step over its rows, times the GPUs that shared it)."""
        return self.step_seconds * self.gpus / self.step_rows

    @property
    def label(self) -> str:
        """`2026-11-26, 1x NVIDIA H100 80GB HBM3`: when and on what."""
        return f"{self.date}, {self.gpus}x {self.gpu}"


_SPEED_FIELDS = {
    "date": str,
    "gpu": str,
    "gpus": int,
    "recipe": str,
    "step_seconds": float,
    "step_rows": int,
    "eval_rows_per_s": float,
}


def _speed(raw: object, where: str) -> TierSpeed | None:
    if raw is None:
        return None
    if not isinstance(raw, dict) or set(raw) != set(_SPEED_FIELDS):
        got = sorted(raw) if isinstance(raw, dict) else type(raw).__name__
        raise TRMError(
            f"hardware table {where} [tier.speed]: has {got}; it needs exactly {', '.join(_SPEED_FIELDS)}"
        )
    try:
        speed = TierSpeed(**{k: kind(raw[k]) for k, kind in _SPEED_FIELDS.items()})  # type: ignore[arg-type]
    except (TypeError, ValueError) as err:
        raise TRMError(
            f"hardware table {where} [tier.speed]: {err}; see the header of hardware.toml"
        ) from None
    if min(speed.gpus, speed.step_rows) < 1 or min(speed.step_seconds, speed.eval_rows_per_s) <= 0:
        raise TRMError(f"hardware table {where} [tier.speed]: counts, times and rates must be positive")
    return speed


@dataclass(frozen=True, kw_only=True)
class Tier:
    """One row of the hardware table."""

    name: str
    match: tuple[str, ...] = ()
    """Whole words of the device names this tier sizes (the GPU catalog's GPUs that list the tier)."""
    min_vram_gib: float = 0.0
    max_micro_batch: int
    compile: bool
    source: str = "estimate"
    measured: str = ""
    """With source "measured": when, on what (GPU, driver, torch) and what was measured."""
    speed: TierSpeed | None = None
    """With source "measured": the step time and evaluation rate the launcher's estimate uses."""
    note: str = ""
    compute_caps: tuple[str, ...] = ()
    """Compute capabilities ("10.0") whose GPUs this tier sizes when no tier names them (never MIG slices)."""

    @property
    def provenance(self) -> str:
        """`estimate`, or `measured (date, GPU, driver, torch: figures)`."""
        return f"{self.source} ({self.measured})" if self.measured else self.source

    def matches_name(self, gpu_name: str) -> bool:
        """Whether one of the `match` entries occurs as whole words of the nvidia-smi name ("A10" is not
        the A100, "L4" not the L40S; trm.gpu_names)."""
        return any(names_model(m, gpu_name) for m in self.match)


@dataclass(frozen=True, kw_only=True)
class Workload:
    """What one batch row costs: the architecture (`arch=`) and the tokens per row (the task's sequence
    plus the puzzle-embedding positions). The default is the table's reference (trm on ARC)."""

    arch: str = "trm"
    tokens: int = 916
    task: str = "arc"

    def describe(self) -> str:
        return f"{self.task}, arch {self.arch}, {self.tokens} tokens per row"


def workload_of(recipe_or_name: Recipe | str, arch: str | None = None) -> Workload:
    """The workload of a recipe (`TASK=`, or an experiment's variant of one), with its architecture or
    `arch` instead: the task's sequence (ARC and Maze 900 cells, Sudoku 81) plus the recipe model's
    puzzle-embedding positions."""
    from trm.data.encoding import GRID_SIZE
    from trm.data.maze import SEQ_LEN as MAZE_SEQ_LEN
    from trm.data.sudoku import SEQ_LEN as SUDOKU_SEQ_LEN
    from trm.model.registry import spec_of
    from trm.training.recipes import get_recipe

    recipe = get_recipe(recipe_or_name) if isinstance(recipe_or_name, str) else recipe_or_name
    seq_len = {"build-sudoku": SUDOKU_SEQ_LEN, "build-maze": MAZE_SEQ_LEN}.get(recipe.builder, GRID_SIZE**2)
    shaped = recipe.with_changes(
        arch={"forward_dtype": "bfloat16"}
    )  # the trainer resolves "auto"; not a shape
    model = shaped.model_config(batch_size=1, seq_len=seq_len, vocab_size=16, num_puzzle_identifiers=1)
    name = spec_of(recipe.config.arch).name if arch is None else get_spec(arch).name
    return Workload(arch=name, tokens=model.total_seq_len, task=recipe.name)


@dataclass(frozen=True, kw_only=True)
class Sizing:
    """[sizing] of the table: the reference workload the tiers' `max_micro_batch` are for. What a row of
    each architecture keeps is its registry spec's measured `activation_mb_per_row` (trm.model.registry)."""

    reference_arch: str
    reference_tokens: int

    def row_mb(self, workload: Workload) -> float:
        """Saved-activation MB of one row of `workload` (linear in its tokens)."""
        return get_spec(workload.arch).activation_mb_per_row * workload.tokens / ACTIVATION_TOKENS

    def rows(self, tier: Tier, workload: Workload) -> int:
        """The tier's micro-batch cap for `workload`: its reference rows scaled by the rows' cost."""
        reference = Workload(arch=self.reference_arch, tokens=self.reference_tokens)
        if workload.arch == reference.arch and workload.tokens == reference.tokens:
            return tier.max_micro_batch
        return max(1, int(tier.max_micro_batch * self.row_mb(reference) / self.row_mb(workload)))


@dataclass(frozen=True, kw_only=True)
class HardwareTable:
    """The parsed `hardware.toml`: GPU tiers in priority order plus the CPU tier."""

    global_batch_size: int
    tiers: tuple[Tier, ...]
    cpu: Tier
    sizing: Sizing


@dataclass(frozen=True, kw_only=True)
class BatchLayout:
    """The resolved batch layout for this host; `overrides()` are the trainer's Hydra overrides."""

    tier: str
    tier_source: str
    matched_by: str  # "name", "compute capability", "vram" or "cpu"
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

    def with_micro_batch(self, micro: int, note: str) -> BatchLayout:
        """This layout at another micro-batch (a divisor of the per-rank batch): the accumulation follows, so
        micro-batch x accumulation x world size stays the global batch; `note` says why."""
        if micro < 1 or self.local_batch_size % micro:
            raise ValueError(
                f"micro-batch {micro} does not divide the per-rank batch {self.local_batch_size}"
            )
        return replace(
            self,
            micro_batch_size=micro,
            grad_accumulation=self.local_batch_size // micro,
            notes=[*self.notes, note],
        )

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


TIER_SOURCES = ("estimate", "measured")


def _tier_names(raw: dict[str, object]) -> tuple[str, ...]:
    """The device-name words a tier matches: the table's own `match` list where it has one (a table of your
    own), else the GPU catalog's GPUs that list the tier (the shipped table)."""
    if "match" in raw:
        return tuple(str(m) for m in raw["match"])  # type: ignore[attr-defined]
    return gpu_catalog.tier_names(str(raw.get("name", "")))


def _tier(raw: dict[str, object], where: str) -> Tier:
    try:
        tier = Tier(
            name=str(raw["name"]),
            match=_tier_names(raw),
            min_vram_gib=float(raw.get("min_vram_gib", 0.0)),  # type: ignore[arg-type]
            max_micro_batch=int(raw["max_micro_batch"]),  # type: ignore[call-overload]
            compile=bool(raw["compile"]),
            source=str(raw.get("source", "estimate")),
            measured=str(raw.get("measured", "")),
            speed=_speed(raw.get("speed"), where),
            note=str(raw.get("note", "")),
            compute_caps=tuple(str(c) for c in raw.get("compute_caps", [])),  # type: ignore[union-attr]
        )
    except KeyError as err:
        raise TRMError(
            f"hardware table {where}: missing key {err}; add it (see the header of hardware.toml)"
        ) from err
    bad_caps = [c for c in tier.compute_caps if not re.fullmatch(r"\d+\.\d+", c)]
    if bad_caps:
        raise TRMError(
            f"hardware table {where}: compute_caps {bad_caps} must be compute capabilities as nvidia-smi's "
            'compute_cap prints them, e.g. ["10.0"]'
        )
    if tier.source not in TIER_SOURCES:
        raise TRMError(
            f"hardware table {where}: source = {tier.source!r}; use one of {', '.join(TIER_SOURCES)}"
        )
    if (tier.source == "measured") != bool(tier.measured):
        raise TRMError(
            f'hardware table {where}: a tier with source = "measured" says what was measured in `measured`'
            " (date, GPU, driver, torch, figures) and only such a tier has it"
        )
    if tier.speed is not None and tier.source != "measured":
        raise TRMError(
            f'hardware table {where}: [tier.speed] is a measurement; only a tier with source = "measured" has it'
        )
    return tier


# [sizing] keys that are each architecture's registry spec's now (activation_mb_per_row, ACTIVATION_TOKENS).
MOVED_SIZING_KEYS = ("mb_per_row", "measured_tokens")


def _sizing(raw: object, path: Path) -> Sizing:
    where = f"hardware table {path} [sizing]"
    if not isinstance(raw, dict):
        raise TRMError(f"{where}: missing; add it (see the header of hardware.toml)")
    moved = [key for key in MOVED_SIZING_KEYS if key in raw]
    if moved:
        raise TRMError(
            f"{where}: {' and '.join(moved)} moved to each architecture's spec (ArchSpec."
            "activation_mb_per_row in trm/model/registry.py, measured on 916 tokens); remove "
            f"{'them' if len(moved) > 1 else 'it'} from the table"
        )
    try:
        sizing = Sizing(
            reference_arch=str(raw["reference_arch"]),
            reference_tokens=int(raw["reference_tokens"]),
        )
    except KeyError as err:
        raise TRMError(f"{where}: missing key {err}; add it (see the header of hardware.toml)") from None
    except (TypeError, ValueError) as err:
        raise TRMError(f"{where}: {err}; reference_tokens is a token count") from None
    try:
        get_spec(sizing.reference_arch)
    except TRMError as err:
        raise TRMError(f"{where}: reference_arch: {err}") from None
    if sizing.reference_tokens <= 0:
        raise TRMError(f"{where}: reference_tokens = {sizing.reference_tokens}; use a positive token count")
    return sizing


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
        sizing=_sizing(raw.get("sizing"), path),
    )
    for tier in (*table.tiers, table.cpu):
        if tier.max_micro_batch < 1:
            raise TRMError(f"hardware table {path}: tier {tier.name} has max_micro_batch < 1; set it to >= 1")
    return table


def match_tier(gpu: GpuInfo, table: HardwareTable) -> tuple[Tier, str]:
    """The tier for one GPU: by name (VRAM permitting), else by compute capability (the largest tier of
    that capability its VRAM reaches; not for a MIG slice, which has a share of the GPU), else by VRAM
    alone."""
    vram = gpu.memory_gib
    for tier in table.tiers:
        if tier.matches_name(gpu.name) and vram >= tier.min_vram_gib:
            return tier, "name"
    by_cap = [t for t in table.tiers if gpu.compute_cap.strip() in t.compute_caps and vram >= t.min_vram_gib]
    if by_cap and not gpu.mig_profile:
        return max(by_cap, key=lambda t: t.min_vram_gib), "compute capability"
    by_vram = [t for t in table.tiers if vram >= t.min_vram_gib]
    if not by_vram:
        smallest = min(t.min_vram_gib for t in table.tiers)
        raise TRMError(
            f"GPU {gpu.index} ({gpu.name}, {vram:.1f} GiB) is smaller than every tier of the hardware table "
            f"(smallest: {smallest:.0f} GiB); rent a GPU with more memory, or add a tier to "
            "trm/launch/host/hardware.toml"
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
    workload: Workload | None = None,
) -> BatchLayout:
    """Resolve the batch layout for `num_gpus` of `gpus` (all when None; CPU when there are none), sized for
    `workload` (default: the table's reference, trm on ARC)."""
    table = table or load_table()
    gbs = global_batch_size or table.global_batch_size
    notes: list[str] = []
    used = gpus_to_use(gpus, num_gpus)
    device = size_device(used, table, cpu_procs, notes)
    world = device.per_node * nnodes
    local = local_batch(gbs, world, device.per_node, nnodes)
    cap = device.tier.max_micro_batch
    if workload is not None and device.kind == "cuda":
        cap = table.sizing.rows(device.tier, workload)
        if cap != device.tier.max_micro_batch:
            notes.append(
                f"sized for {workload.describe()}: up to {cap} rows per micro-batch "
                f"(tier {device.tier.name}: {device.tier.max_micro_batch} for trm on ARC)"
            )
    micro = micro_batch(local, cap, micro_batch_size, gbs, world, notes)
    expected = expected_global_batch_size or table.global_batch_size
    if gbs != expected:
        notes.append(f"global_batch_size {gbs} differs from the run's {expected}: the training math changes")
    return BatchLayout(
        tier=device.tier.name,
        tier_source=device.tier.provenance,
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
            f"NUM_GPUS={num_gpus} but {len(gpus)} GPU(s) are visible (nvidia-smi's, less those "
            "CUDA_VISIBLE_DEVICES hides); unset NUM_GPUS to use all of them, or check that the container sees "
            "every GPU (`--gpus all`, `nvidia.com/gpu` limit) and that CUDA_VISIBLE_DEVICES lists them"
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
    elif matched_by == "compute capability":
        notes.append(
            f"{gpu.name} is not in the table; sized by its compute capability {gpu.compute_cap} like tier "
            f"{tier.name} ({tier.min_vram_gib:.0f} GiB and up): add it to the GPU catalog (trm/gpu_catalog.py) "
            "with its tier"
        )
    return SizedDevice(tier, matched_by, "cuda", gpu.name, gpu.memory_gib, len(used))


def local_batch(gbs: int, world: int, per_node: int, nnodes: int) -> int:
    """Step 3: rows per rank per optimizer step; the global batch must split evenly over the ranks."""
    if gbs % world:
        raise TRMError(
            f"global_batch_size {gbs} is not divisible by the world size {world} ({per_node} per node x "
            f"{nnodes} node(s)); set NUM_GPUS to a divisor of {gbs} (1, 2, 4, 8) so the training math stays fixed"
        )
    return gbs // world


def micro_batch(local: int, cap: int, forced: int | None, gbs: int, world: int, notes: list[str]) -> int:
    """Step 4: the micro-batch: the largest divisor of the local batch up to the tier's `cap`, or the forced one."""
    table_value = largest_divisor_at_most(local, cap)
    if forced is None:
        return table_value
    if forced < 1 or local % forced:
        raise TRMError(
            f"MICRO_BATCH_SIZE={forced} must divide the per-rank batch {local} "
            f"(= {gbs} / world size {world}); pick a divisor such as {largest_divisor_at_most(local, forced)}"
        )
    notes.append(f"micro-batch forced to {forced} (table: {table_value})")
    return forced
