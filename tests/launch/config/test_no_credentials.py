"""Launch variables are recorded in the resume command, plan.json and handoff.json: none may hold a
credential, and the refusal names the variable, never the value."""

from __future__ import annotations

import pytest

from trm.errors import TRMError
from trm.launch.config.settings import LaunchSettings

TOKEN = "hf_" + "Kq3" * 12
# built at run time: a literal one would trip the repository's secret scan
PASSWORD = "".join(chr(ord("a") + (5 * i) % 26) for i in range(14))


@pytest.mark.parametrize(
    ("name", "value", "secret"),
    [
        ("PRIME_API_URL", f"https://me:{PASSWORD}@api.primeintellect.ai", PASSWORD),
        ("PRIME_API_URL", f"https://api.primeintellect.ai/?api_key={PASSWORD}", PASSWORD),
        ("WANDB_ENTITY", TOKEN, TOKEN),  # a key pasted into the wrong variable
        ("TRAIN_OVERRIDES", f"lr=1e-4 project_name={TOKEN}", TOKEN),
        ("TASK", TOKEN, TOKEN),  # its parse error would have echoed the value
    ],
)
def test_a_variable_holding_credentials_is_refused_by_name(name: str, value: str, secret: str) -> None:
    with pytest.raises(TRMError, match=f"^{name} holds credentials") as err:
        LaunchSettings.from_env({name: value})
    assert secret not in str(err.value)


def test_plain_values_and_key_file_paths_pass() -> None:
    env = {"PRIME_API_URL": "https://api.primeintellect.ai", "WANDB_ENTITY": "arc-team",
           "TRAIN_OVERRIDES": "lr=1e-4", "PRIME_API_KEY_FILE": "/run/secrets/prime-api-key"}  # fmt: skip
    assert LaunchSettings.from_env(env).wandb_entity == "arc-team"
