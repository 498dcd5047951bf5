"""The resolved settings of one launch, read from the environment variables that `trm.launch.config.variables`
declares (each with its parser, default and help)."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from trm.errors import TRMError
from trm.launch.config.variables import BY_NAME, ENV_VARS, read_all
from trm.launch.provider.release import ReleasePolicy, check_policy
from trm.launch.storage.sync import Syncer
from trm.training.metrics_log import wandb_api_key


@dataclass(frozen=True, kw_only=True)
class LaunchSettings:
    """The resolved environment of one launch."""

    recipe: str  # TASK=
    run_name: str
    data_dir: Path
    checkpoint_dir: Path
    artifacts_dir: Path
    num_gpus: int | None
    cpu_procs: int
    global_batch_size: int | None
    micro_batch_size: int | None
    compile: bool | None
    """COMPILE: None lets the hardware tier choose."""
    probe: bool
    probe_steps: int
    nnodes: int
    node_rank: int
    master_addr: str
    master_port: int
    checkpoint_keep: int
    smoke_steps: int
    max_restarts: int
    shutdown_timeout: int
    train_overrides: tuple[str, ...]
    preflight: bool
    max_hours: float | None
    stop_margin_minutes: float
    gpu_hourly_usd: float | None
    cost_log_minutes: float
    wandb: str
    wandb_project: str
    tensorboard: bool = False
    continue_run: str = ""
    """CONTINUE_RUN: the end id (trm.launch.supervision.ledger) this launch may train after."""
    """TENSORBOARD: the trainer writes event files (default: where the tensorboard package is installed)."""
    wandb_entity: str = ""
    """WANDB_ENTITY (empty: the key's default)."""
    wandb_run_group: str = ""
    """WANDB_RUN_GROUP (empty: none)."""
    wandb_api_key_file: str = ""
    """WANDB_API_KEY_FILE: the path only; the trainer reads the key."""
    use_tmux: bool
    python: str
    sync_to: str = ""
    """SYNC_TO: the rclone remote:path the run directory is copied under (empty: off)."""
    sync_every_minutes: float = 15.0
    sync_prune: bool = True
    """SYNC_PRUNE: delete remote checkpoints that the run directory no longer has (trm.launch.storage.sync)."""
    release: ReleasePolicy = field(default_factory=ReleasePolicy)
    cli_overrides: tuple[str, ...] = ()
    """Overrides given as script arguments (also part of train_overrides; kept for the resume command)."""

    @property
    def run_dir(self) -> Path:
        """CHECKPOINT_DIR/RUN_NAME: the trainer's checkpoint_path."""
        return self.checkpoint_dir / self.run_name

    @property
    def launch_dir(self) -> Path:
        """The launcher's records inside the run directory."""
        return self.run_dir / "launch"

    @property
    def artifacts_run_dir(self) -> Path:
        """ARTIFACTS_DIR/RUN_NAME: the handoff bundle."""
        return self.artifacts_dir / self.run_name

    @property
    def sync_remote(self) -> str:
        """SYNC_TO/RUN_NAME: where this run is copied (empty when SYNC_TO is unset)."""
        return f"{self.sync_to.rstrip('/')}/{self.run_name}" if self.sync_to else ""

    def syncer(self, log: Callable[[str], None]) -> Syncer:
        """The uploader of this run to SYNC_TO/RUN_NAME (the handoff bundle into its handoff/)."""
        return Syncer(
            self.run_dir,
            self.sync_remote,
            log,
            every_s=self.sync_every_minutes * 60,
            handoff_dir=self.artifacts_run_dir,
            prune=self.sync_prune,
        )

    @classmethod
    def from_env(
        cls, env: Mapping[str, str] = os.environ, extra_overrides: tuple[str, ...] = ()
    ) -> LaunchSettings:
        """Read and check every variable; errors name the variable and the fix."""
        values = read_all(env, tuple(extra_overrides))
        check_combinations(values, env)
        settable = {f.name for f in fields(cls)}
        own: dict[str, Any] = {var.setting: values[var.name] for var in ENV_VARS if var.setting in settable}
        for path in ("data_dir", "checkpoint_dir", "artifacts_dir"):
            own[path] = Path(own[path])
        return cls(
            **own,
            cli_overrides=tuple(extra_overrides),
            release=release_policy(values, env),
        )


def check_combinations(values: Mapping[str, Any], env: Mapping[str, str]) -> None:
    """The checks that involve more than one variable."""
    if values["WANDB"] == "online" and not wandb_api_key(env):
        raise TRMError(
            "WANDB=online needs WANDB_API_KEY in the environment or WANDB_API_KEY_FILE naming a mounted "
            "Secret file (never a file in the repo), or set WANDB=offline / off"
        )
    nnodes = values["NNODES"]
    if nnodes > 1 and not values["MASTER_ADDR"]:
        raise TRMError(
            f"NNODES={nnodes} needs MASTER_ADDR (the address of node 0) and NODE_RANK on each node"
        )
    max_hours, margin = values["MAX_HOURS"], values["STOP_MARGIN_MINUTES"]
    if max_hours is not None and margin >= max_hours * 60:
        raise TRMError(
            f"STOP_MARGIN_MINUTES={margin:g} leaves no training time within MAX_HOURS={max_hours:g}; "
            "lower STOP_MARGIN_MINUTES or raise MAX_HOURS"
        )


def release_policy(values: Mapping[str, Any], env: Mapping[str, str]) -> ReleasePolicy:
    """ON_END, ON_BUDGET and RELEASE_VIA, checked against where the launch runs."""
    policy = ReleasePolicy(on_end=values["ON_END"], on_budget=values["ON_BUDGET"], via=values["RELEASE_VIA"])
    return check_policy(policy, env, sync_to=values["SYNC_TO"])


def policy_from_env(env: Mapping[str, str], *, sync_to: str) -> ReleasePolicy:
    """The release policy of `env` alone (ON_END, ON_BUDGET, RELEASE_VIA), with SYNC_TO given."""
    values: dict[str, Any] = {"SYNC_TO": sync_to}
    for name in ("ON_END", "ON_BUDGET", "RELEASE_VIA"):  # ON_BUDGET's default is ON_END
        values[name] = BY_NAME[name].read(env, values)
    return release_policy(values, env)
