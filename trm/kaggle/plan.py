"""The time plan `python -m trm infer` prints before it adapts: adaptation and inference sized to the
competition's GPU and hours (trm.kaggle.competition), shortened so that submission.json is written in time.

- budget: `--max-minutes`, at most the competition's hours less RESERVE_MINUTES (the notebook's offline
  install, loading the bundle, writing the submission); inference's --max-minutes clock starts with the
  command, so adaptation counts within it (trm.kaggle.infer).
- step time on one competition GPU: the measured `[tier.speed]` of the GPU's hardware tier when there is
  one, else the measured H100 step (trm/launch/host/hardware.toml) x the H100's peak bf16 FLOP/s over the
  competition GPU's (the GPU catalog, trm.gpu_catalog), labelled estimate. Either is scaled by the
  bundle's FLOPs per row over the measured recipe's; an adaptation step trains the bundle's global batch.
- inference: every test input x --num-aug rows (at most: a task has fewer variants when its grids allow
  fewer), each to halt_max_steps ACT steps, at the measured evaluation rate scaled the same way.
- when adaptation plus inference do not fit the budget, adaptation keeps what leaves inference its full
  time, and at least min(requested, SHORT_ADAPT_SHARE of the budget); inference then runs the augmentation
  rounds that fit (round-major: every task keeps its votes). The run's --adapt-minutes becomes the planned
  minutes, so the trainer's deadline stops adaptation in time.

With `--ranks R` (trm.kaggle.sharded) the tasks are split into groups run by R processes, one per GPU, in
parallel: the figures are those of the rank with the largest share of test inputs (its groups one after
the other: the steps are per group, the minutes its whole adaptation), and GPUs without a rank idle (the
plan says how many).
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trm.errors import TRMError
from trm.kaggle.competition import Competition

RESERVE_MINUTES = 20.0
SHORT_ADAPT_SHARE = 0.5


@dataclass(frozen=True)
class Speed:
    """Timings on one competition GPU and what they are."""

    adapt_step_seconds: float
    """One adaptation optimizer step of `adapt_step_rows` rows."""
    adapt_step_rows: int
    infer_row_seconds: float
    """One inference row through every ACT step."""
    source: str


@dataclass(frozen=True)
class Split:
    """How the run divides the tasks (trm.kaggle.groups) and the share of the rank that sets the time."""

    ranks: int
    groups: int
    rank_tasks: int
    rank_test_inputs: int
    rank_groups: int

    @classmethod
    def single(cls, tasks: int, test_inputs: int) -> Split:
        """One process, one group: today's single-GPU run."""
        return cls(1, 1, tasks, test_inputs, 1)


@dataclass(frozen=True)
class TimePlan:
    """What the run will do within the competition's time (minutes throughout)."""

    competition: Competition
    tasks: int
    unseen_tasks: int
    test_inputs: int
    num_aug: int
    speed: Speed
    budget_minutes: float
    budget_source: str
    requested_adapt_minutes: float
    """What --adapt-steps / --adapt-minutes ask for at the planned step time (0: no adaptation)."""
    adapt_steps: int
    adapt_minutes: float
    inference_minutes_needed: float
    """Every test input x num_aug rows."""
    rounds: int
    """Augmentation rounds inference has time for (at most num_aug)."""
    split: Split

    @property
    def inference_minutes(self) -> float:
        """Time left for inference after adaptation."""
        return self.budget_minutes - self.adapt_minutes

    @property
    def shortened(self) -> bool:
        return self.adapt_minutes < self.requested_adapt_minutes

    @property
    def over(self) -> bool:
        """The request (adaptation plus full inference) does not fit the budget."""
        return self.requested_adapt_minutes + self.inference_minutes_needed > self.budget_minutes

    def share(self, minutes: float) -> float:
        """`minutes` as a share of the competition's hours."""
        return minutes / self.competition.minutes

    def describe(self) -> str:
        """The lines `trm infer` prints."""
        c, s, sp = self.competition, self.speed, self.split
        rows = sp.rank_test_inputs * self.num_aug
        per_group = " per group" if sp.rank_groups > 1 else ""
        lines = [
            f"time plan for {c.describe()}",
            f"  tasks          {self.tasks} ({self.unseen_tasks} without a trained row: adapted)",
        ]
        if sp.ranks > 1 or sp.groups > 1:
            lines.append(
                f"  ranks          {sp.ranks} process(es), one per GPU, in parallel; {sp.groups} task group(s), "
                f"each adapted and inferred on its own; the busiest rank: {sp.rank_groups} group(s), "
                f"{sp.rank_tasks} tasks, {sp.rank_test_inputs} test inputs (the figures below are its)"
            )
        lines += [
            f"  budget         {self.budget_minutes:.1f} min ({self.budget_source})",
            f"  step time      {s.adapt_step_seconds:.3g} s per adaptation step of {s.adapt_step_rows} rows, "
            f"{1000 * s.infer_row_seconds:.3g} ms per inference row, on one {c.gpu} ({s.source})",
            f"  adaptation     {self.adapt_steps:,} steps{per_group}, {self.adapt_minutes:.1f} min "
            f"({100 * self.share(self.adapt_minutes):.1f} % of {c.hours:g} h)",
            f"  inference      {self.inference_minutes:.1f} min left ({100 * self.share(self.inference_minutes):.1f} "
            f"% of {c.hours:g} h); {rows:,} rows ({sp.rank_test_inputs} test inputs x {self.num_aug}) need "
            f"{self.inference_minutes_needed:.1f} min: {self.rounds} of {self.num_aug} augmentation rounds fit",
        ]
        if self.over:
            lines.append(
                f"  OVER TIME      adaptation {self.requested_adapt_minutes:.1f} min + inference "
                f"{self.inference_minutes_needed:.1f} min exceed the budget of {self.budget_minutes:.1f} min: "
                + (
                    f"adaptation shortened to {self.adapt_minutes:.1f} min"
                    if self.shortened
                    else "adaptation kept"
                )
                + f", inference runs {self.rounds} of {self.num_aug} rounds; submission.json is written in time"
            )
        if c.gpus > sp.ranks:
            lines.append(
                f"  note           adaptation and inference run on {sp.ranks} GPU(s) (--ranks {sp.ranks}): "
                f"{c.gpus - sp.ranks} of the {c.gpus} GPUs idle; --ranks auto runs one process per visible GPU"
            )
        return "\n".join(lines)


def plan_time(
    competition: Competition,
    speed: Speed,
    *,
    tasks: int,
    unseen_tasks: int,
    test_inputs: int,
    num_aug: int,
    adapt_steps: int | None,
    adapt_minutes: float | None,
    max_minutes: float | None,
    split: Split | None = None,
) -> TimePlan:
    """The plan (see the module doc); pure. `adapt_steps` and `adapt_minutes` None: no adaptation.
    `split` None: one process, one group."""
    split = split or Split.single(tasks, test_inputs)
    limit = competition.minutes - RESERVE_MINUTES
    if limit <= 0:
        raise TRMError(
            f"--hours {competition.hours:g}: leaves no time after the {RESERVE_MINUTES:g} min reserve"
        )
    if max_minutes is None:
        budget, why = limit, f"the competition's {competition.hours:g} h less {RESERVE_MINUTES:g} min reserve"
    elif max_minutes > limit:
        budget = limit
        why = (
            f"--max-minutes {max_minutes:g} capped to the competition's {competition.hours:g} h less "
            f"{RESERVE_MINUTES:g} min reserve"
        )
    else:
        budget, why = max_minutes, f"--max-minutes {max_minutes:g}"
    step_minutes = speed.adapt_step_seconds / 60.0
    requested = 0.0
    if unseen_tasks and (adapt_steps is not None or adapt_minutes is not None):
        by_steps = math.inf if adapt_steps is None else adapt_steps * step_minutes * split.rank_groups
        requested = min(by_steps, math.inf if adapt_minutes is None else adapt_minutes)
    round_minutes = split.rank_test_inputs * speed.infer_row_seconds / 60.0
    needed = num_aug * round_minutes
    planned = requested
    if requested + needed > budget:
        planned = min(requested, max(budget - needed, min(requested, SHORT_ADAPT_SHARE * budget)))
    steps = math.floor(planned / split.rank_groups / step_minutes) if step_minutes > 0 else 0
    if adapt_steps is not None:
        steps = min(steps, adapt_steps)
    left = budget - planned
    rounds = num_aug if round_minutes <= 0 else min(num_aug, math.floor(left / round_minutes))
    return TimePlan(
        competition=competition,
        tasks=tasks,
        unseen_tasks=unseen_tasks,
        test_inputs=test_inputs,
        num_aug=num_aug,
        speed=speed,
        budget_minutes=budget,
        budget_source=why,
        requested_adapt_minutes=requested,
        adapt_steps=steps,
        adapt_minutes=planned,
        inference_minutes_needed=needed,
        rounds=rounds,
        split=split,
    )


def competition_speed(competition: Competition, bundle_config: dict[str, Any]) -> Speed:
    """Step and row times of the bundle's model on one competition GPU (see the module doc)."""
    from trm.kaggle.bundle import model_config
    from trm.launch.cost.estimate import reference_model
    from trm.launch.host.hardware import load_table
    from trm.training.throughput import act_step_flops, peak_flops

    tiers = load_table().tiers
    own = next((t for t in tiers if t.matches_name(competition.gpu) and t.speed is not None), None)
    measured = own or next((t for t in tiers if t.speed is not None), None)
    if measured is None or measured.speed is None:
        raise TRMError("trm/launch/host/hardware.toml has no [tier.speed] measurement to plan from")
    speed = measured.speed
    peak_ratio = 1.0
    if own is None:
        ours, theirs = peak_flops(speed.gpu), peak_flops(competition.gpu)
        if ours is None or theirs is None:
            raise TRMError(
                f"no peak FLOP/s for {competition.gpu if theirs is None else speed.gpu} in "
                "the GPU catalog (trm/gpu_catalog.py): add its peak_bf16_tflops to plan for this GPU"
            )
        peak_ratio = ours / theirs
    run_model = model_config(bundle_config, batch_size=1, forward_dtype="bfloat16", early_halt=False)
    ref_model = reference_model(speed)
    train_ratio = eval_ratio = 1.0
    if ref_model is not None:
        run, ref = act_step_flops(run_model), act_step_flops(ref_model)
        train_ratio = run.train / ref.train
        eval_ratio = (run_model.halt_max_steps * run.forward) / (ref_model.halt_max_steps * ref.forward)
    rows = int((bundle_config.get("train") or {}).get("global_batch_size") or speed.step_rows)
    label = f"{speed.date}, {speed.recipe}"
    if own is not None:
        source = f"measured on {speed.gpu} ({label})"
    else:
        source = (
            f"estimate, derived from the {speed.gpu} measurement of {label}: x {peak_ratio:.3g} its peak "
            f"bf16 FLOP/s over the {competition.gpu}'s"
        )
    if train_ratio != 1.0:
        source += f"; x {train_ratio:.3g} this model's training FLOPs per row"
    return Speed(
        adapt_step_seconds=rows * speed.row_seconds * train_ratio * peak_ratio,
        adapt_step_rows=rows,
        infer_row_seconds=speed.gpus / speed.eval_rows_per_s * eval_ratio * peak_ratio,
        source=source,
    )


def plan_for_bundle(
    competition: Competition,
    bundle: Path,
    challenges: dict[str, Any],
    *,
    num_aug: int,
    adapt_steps: int | None,
    adapt_minutes: float | None,
    max_minutes: float | None,
    ranks: int = 1,
    groups: int = 1,
) -> TimePlan:
    """The plan for a bundle folder and a challenges file's contents, run by `ranks` processes in `groups`
    task groups; reads config.json and identifiers only (no weights, no torch model)."""
    from trm.kaggle import bundle as B
    from trm.kaggle.groups import largest_rank_share, split_tasks
    from trm.kaggle.testset import unseen_task_ids

    config = B.read_config(bundle)
    used = max(len(split_tasks(challenges, groups)), 1)  # no more groups (and ranks) than tasks
    identifiers = None
    if (bundle / B.IDENTIFIERS).is_file():
        identifiers = json.loads((bundle / B.IDENTIFIERS).read_text(encoding="utf-8"))
    return plan_time(
        competition,
        competition_speed(competition, config),
        tasks=len(challenges),
        unseen_tasks=len(unseen_task_ids(challenges, identifiers)),
        test_inputs=sum(len(task["test"]) for task in challenges.values()),
        num_aug=num_aug,
        adapt_steps=adapt_steps,
        adapt_minutes=adapt_minutes,
        max_minutes=max_minutes,
        split=Split(min(ranks, used), used, *largest_rank_share(challenges, groups, ranks)),
    )


def planned_settings(plan: TimePlan, settings: Any) -> Any:
    """The adaptation settings the run uses: --adapt-minutes lowered to the plan's when it shortened them
    (the trainer's deadline then stops adaptation in time)."""
    if settings is None or not plan.shortened:
        return settings
    return dataclasses.replace(settings, minutes=max(plan.adapt_minutes, 1 / 60))
