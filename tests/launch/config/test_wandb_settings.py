"""The launcher's W&B settings: entity, group and key file passed to the trainer by name, the key never."""

from __future__ import annotations

from pathlib import Path

import pytest

from trm.errors import TRMError
from trm.launch.config.settings import LaunchSettings
from trm.launch.plan.plan import trainer_env

KEY = "local-feedfacefeedfacefeedfacefeedfacefeedface"


def test_online_with_a_secret_file_passes_entity_group_and_the_file_not_the_key(tmp_path: Path) -> None:
    secret = tmp_path / "wandb-key"
    secret.write_text(KEY + "\n")
    env = {"WANDB": "online", "WANDB_API_KEY_FILE": str(secret), "WANDB_ENTITY": "arc-team",
           "WANDB_RUN_GROUP": "suite-7", "WANDB_PROJECT": "trm-arc2"}  # fmt: skip
    settings = LaunchSettings.from_env(env)
    out = trainer_env(settings, env)
    assert out["WANDB_MODE"] == "online" and out["WANDB_DISABLED"] == ""
    assert out["WANDB_ENTITY"] == "arc-team" and out["WANDB_RUN_GROUP"] == "suite-7"
    assert out["WANDB_API_KEY_FILE"] == str(secret)
    assert KEY not in repr(out) and KEY not in repr(settings)


def test_online_needs_a_readable_key(tmp_path: Path) -> None:
    with pytest.raises(TRMError, match="needs WANDB_API_KEY in the environment or WANDB_API_KEY_FILE"):
        LaunchSettings.from_env({"WANDB": "online"})
    with pytest.raises(TRMError, match=r"WANDB_API_KEY_FILE=.*nope: cannot read it"):
        LaunchSettings.from_env({"WANDB": "online", "WANDB_API_KEY_FILE": str(tmp_path / "nope")})
    assert LaunchSettings.from_env({"WANDB": "online", "WANDB_API_KEY": KEY}).wandb == "online"


def test_off_sets_nothing_but_the_switches() -> None:
    env = {"WANDB_ENTITY": "arc-team"}
    out = trainer_env(LaunchSettings.from_env(env), env)
    assert out["WANDB_MODE"] == "disabled" and "WANDB_ENTITY" not in out
