"""The expected time and cost of a recipe's whole run on a GPU shape, without the host or the dataset.

The same plan and estimate as the dry run (`build_plan` + `LaunchPlan.estimate`), for GPUs described here
instead of detected, and the dataset's recorded sizes (trm.launch.planning.dataset_sizes) instead of a
built one. Two users: the docs' table of paper runs (`python -m trm launch --markdown-cost`, kept identical
to docs/cost.md by a test) and `python -m tools.jobs check`, which refuses a Kubernetes deadline shorter
than the run its Job starts.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass

from trm.launch.host.nvidia_smi import GpuInfo
from trm.launch.planning.estimate import RunEstimate


@dataclass(frozen=True)
class GpuModel:
    """One GPU model as nvidia-smi reports it (name, memory, compute capability)."""

    name: str
    memory_mib: int
    compute_cap: str

    def gpus(self, count: int) -> list[GpuInfo]:
        """`count` such GPUs on one node."""
        return [
            GpuInfo(
                index=i, name=self.name, memory_mib=self.memory_mib, compute_cap=self.compute_cap,
                driver_version="580.95.05", uuid=f"GPU-{i:08d}-0000-0000-0000-000000000000",
            )
            for i in range(count)
        ]  # fmt: skip


GPU_MODELS = {
    "H100": GpuModel("NVIDIA H100 80GB HBM3", 81559, "9.0"),
    "H200": GpuModel("NVIDIA H200", 143771, "9.0"),
    "A100-80G": GpuModel("NVIDIA A100-SXM4-80GB", 81920, "8.0"),
    "L40S": GpuModel("NVIDIA L40S", 46068, "8.9"),
}
# The docs' table: the paper's tasks, and the GPU shapes users rent for them (GPUs per node, nodes).
PAPER_RECIPES = ("arc1", "arc2", "sudoku-mlp", "sudoku-att", "maze")
PAPER_SHAPES = (("H100", 1, 1), ("H100", 4, 1), ("H100", 8, 1), ("H200", 8, 1), ("H200", 8, 2),
                ("A100-80G", 4, 1), ("L40S", 4, 1))  # fmt: skip
TABLE_HOURLY_USD = 2.5


def expected_run(
    recipe: str, gpu: str, gpus_per_node: int, nnodes: int = 1, *, hourly_usd: float | None = None
) -> RunEstimate | str:
    """The dry run's estimate for TASK=`recipe` on `nnodes` nodes of `gpus_per_node` `gpu` GPUs (a
    GPU_MODELS key), or why there is none (a dataset without recorded sizes)."""
    from trm.launch.planning.plan import build_plan
    from trm.launch.planning.settings import LaunchSettings

    with tempfile.TemporaryDirectory() as workspace:  # empty: the recorded dataset sizes stand in
        env = {"TASK": recipe, "WORKSPACE": workspace, "NUM_GPUS": str(gpus_per_node)}
        if nnodes > 1:
            env.update(NNODES=str(nnodes), MASTER_ADDR="node-0", NODE_RANK="0")
        if hourly_usd is not None:
            env["GPU_HOURLY_USD"] = f"{hourly_usd:g}"
        plan = build_plan(LaunchSettings.from_env(env), GPU_MODELS[gpu].gpus(gpus_per_node), env)
        return plan.estimate()


def kind(source: str) -> str:
    """`measured`, `derived` or `estimate`: what an estimate's step_source or eval_source is."""
    return next((k for k in ("measured", "derived", "estimate") if source.startswith(k)), source)


def markdown_table(hourly_usd: float = TABLE_HOURLY_USD) -> str:
    """docs/cost.md's table: each paper recipe on each shape, hours and $, and what each figure is."""
    lines = [
        f"| recipe | GPUs | train | evaluation (share) | total | $ at ${hourly_usd:.2f}/GPU-hour | train from | "
        "evaluation from |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for recipe in PAPER_RECIPES:
        for gpu, per_node, nnodes in PAPER_SHAPES:
            est = expected_run(recipe, gpu, per_node, nnodes, hourly_usd=hourly_usd)
            shape = f"{per_node}x {gpu}" + (f" x {nnodes} nodes" if nnodes > 1 else "")
            if not isinstance(est, RunEstimate):
                lines.append(f"| {recipe} | {shape} | {est} | | | | | |")
                continue
            lines.append(
                f"| {recipe} | {shape} | {est.train_seconds / 3600:,.1f} h | {est.eval_total_seconds / 3600:,.1f} h "
                f"({100 * est.eval_share:.0f} %) | {est.wall_seconds / 3600:,.1f} h | ${est.cost_usd:,.0f} | "
                f"{kind(est.step_source)} | {kind(est.eval_source)} |"
            )
    return "\n".join(lines)
