"""The compile fallback: a smoke gate that failed in torch.compile (with compile from the hardware tier, not
the user) trains the run eager, recorded in launch/compile_fallback.json so that later starts stay eager."""

from __future__ import annotations

import json
import time
from pathlib import Path

from trm.compile_setting import FALLBACK_FILE, compile_failure
from trm.io import atomic_write_json
from trm.launch.config.settings import LaunchSettings
from trm.launch.plan.plan import merge_overrides
from trm.launch.supervision.session import Session
from trm.training.config import override_key


def compile_explicit(settings: LaunchSettings) -> bool:
    """COMPILE=true/false or a compile= trainer override: the user's choice, never changed for them."""
    return settings.compile is not None or any(override_key(o) == "compile" for o in settings.train_overrides)


def fallback_reason(session: Session, log: Path) -> str | None:
    """Why the smoke gate failed when it was torch.compile (and compile came from the hardware tier)."""
    if compile_explicit(session.settings) or not session.plan.hardware.compile:
        return None
    try:
        return compile_failure(log.read_text(errors="replace")[-200_000:])
    except OSError:
        return None


def fall_back_to_eager(session: Session, reason: str, *, recorded: bool = False) -> None:
    """Train this run eager: the plan's overrides get compile=false, one loud line says so, and
    launch/compile_fallback.json (plus an event and plan.json) records it for restarts and the handoff."""
    session.plan.overrides = merge_overrides(session.plan.overrides, ["compile=false"])
    path = session.settings.launch_dir / FALLBACK_FILE
    if not recorded:
        atomic_write_json(path, {"compile": False, "reason": reason, "time": time.time()})
        session.events.write("compile_fallback", reason=reason)
    session.write_plan()
    session.console.log(
        f"COMPILE OFF: torch.compile failed on this host ({reason}); this run trains EAGER (slower), recorded "
        f"in {path}. Set COMPILE=true to make a compile failure stop the run instead; delete that file to "
        "try compile again on the next start."
    )


def stay_eager_if_recorded(session: Session) -> None:
    """An earlier start of this run found torch.compile broken here: stay eager (unless compile is the user's)."""
    path = session.settings.launch_dir / FALLBACK_FILE
    if path.is_file() and not compile_explicit(session.settings):
        fall_back_to_eager(session, _recorded_reason(path), recorded=True)


def _recorded_reason(path: Path) -> str:
    try:
        return str(json.loads(path.read_text()).get("reason", "recorded earlier"))
    except (OSError, ValueError, AttributeError):
        return "recorded earlier"
