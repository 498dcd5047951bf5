"""MAX_HOURS against the expected run: the warning the dry run and the launch print before anything runs.

The cost guard stops the trainer when the run (every session together) reaches MAX_HOURS minus
STOP_MARGIN_MINUTES; when the whole run is expected to take longer, the user learns it now, with both
figures, and what then happens to the machine (ON_BUDGET): with a release action the run is cut there.
"""

from __future__ import annotations

import math

from trm.launch.cost.estimate import RunEstimate
from trm.launch.provider.release import ReleasePolicy


def budget_warning(
    estimate: RunEstimate, max_hours: float | None, stop_margin_minutes: float, release: ReleasePolicy
) -> str | None:
    """The warning when MAX_HOURS ends the run before its expected end; None when it fits or is unset."""
    if max_hours is None:
        return None
    expected = estimate.wall_seconds / 3600
    stop = max(max_hours - stop_margin_minutes / 60, 0.0)
    if stop >= expected:
        return None
    share = 100 * stop / expected if expected else 0.0
    text = (
        f"WARNING: MAX_HOURS={max_hours:g} is below the expected run time {expected:.1f} h (train "
        f"{estimate.train_seconds / 3600:.1f} h + evaluation {estimate.eval_total_seconds / 3600:.1f} h): the "
        f"cost guard stops the trainer at {stop:.1f} h, about {share:.0f} % of the way (it saves; exit 79)."
    )
    if release.on_budget != "keep":
        after = (
            "resume elsewhere from SYNC_TO"
            if release.on_budget == "destroy"
            else "start the machine again with a larger MAX_HOURS"
        )
        text += (
            f" ON_BUDGET={release.on_budget} then releases the machine: the run will be cut there, unfinished "
            f"({after})."
        )
    elif release.on_end != "keep":
        text += (
            f" ON_END={release.on_end} applies only to a finished run; at the budget stop the machine is "
            "kept (ON_BUDGET=keep) and bills until it is resumed or released."
        )
    return text + f" For the whole run set MAX_HOURS >= {math.ceil(expected + stop_margin_minutes / 60)}."
