#!/usr/bin/env bash
# From a booted GPU host to a resumable TRM training run with a handoff bundle.
#
#   [VAR=value ...] bash scripts/train_prod.sh [--dry-run | --help] [TRAINER_OVERRIDE ...]
#
# Every setting is an environment variable; `--help` lists each one with its default (the list lives in
# trm/launch/planning/settings.py). The steps (preflight, dataset, hardware tier, smoke gate, supervised torchrun,
# cost guard) are `python -m trm launch`; this script only adds tmux, signal forwarding and the handoff
# trap. Running the same command again resumes the run.
#
# Exit status: the launcher's (trm/exit_codes.py, README "Exit codes"): 0 finished, 2 configuration error,
# 74 checkpoint disk full, 75 saved after SIGTERM (retry), 76 node fault found by the preflight (retry on
# another node), 79 MAX_HOURS budget spent, else a trainer failure.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export PYTHONPATH="${repo}${PYTHONPATH:+:${PYTHONPATH}}"
# PYTHON: a Python with the project installed. Unset: the checkout's venv (`make venv`: .venv) when it
# exists, else `python`. One without torch stops here with one line instead of an import traceback.
if [[ -z "${PYTHON:-}" && -x "${repo}/.venv/bin/python" ]]; then
  export PYTHON="${repo}/.venv/bin/python"
fi
PYTHON=${PYTHON:-python}
if ! "$PYTHON" -c 'import importlib.util, sys; sys.exit(importlib.util.find_spec("torch") is None)' 2>/dev/null; then
  echo "train_prod.sh: $PYTHON has no torch; set PYTHON to the project's venv (make venv: .venv/bin/python;" \
    "bash scripts/bootstrap_host.sh on a GPU host) or activate it" >&2
  exit 2
fi
# Tells the launcher that this script started it, so the resume command in handoff.json names the script.
export TRM_LAUNCHER=scripts/train_prod.sh

case "${1:-}" in
  -h | --help)
    exec "$PYTHON" -m trm launch --help-env
    ;;
  --dry-run)
    shift
    # As for the real launch below: the handoff is this script's exit trap, not the launcher's.
    TRM_LAUNCH_HANDOFF=0 exec "$PYTHON" -m trm launch --dry-run "$@"
    ;;
esac

if [[ "${USE_TMUX:-0}" == 1 && -z "${TMUX:-}" ]]; then
  exec "$PYTHON" -m trm launch --tmux "${BASH_SOURCE[0]}" "$@"
fi

# At exit, whatever the outcome: the handoff bundle, then the final copy to SYNC_TO, then ON_END/ON_BUDGET.
# shellcheck disable=SC2317,SC2329  # invoked by the EXIT trap
on_exit() {
  local status=$?
  "$PYTHON" -m trm launch --handoff --exit-code="$status" \
    || echo "train_prod.sh: handoff failed; rerun: $PYTHON -m trm launch --handoff --exit-code=$status" >&2
  exit "$status"
}
trap on_exit EXIT

# The launcher runs in the background so that SIGTERM to this shell (docker stop, pod deletion) reaches it:
# it forwards the request to the trainer, which saves and exits 75.
TRM_LAUNCH_HANDOFF=0 "$PYTHON" -m trm launch "$@" &
launcher=$!
trap 'kill -TERM "$launcher" 2>/dev/null || true' TERM INT HUP
rc=0
wait "$launcher" || rc=$?
while kill -0 "$launcher" 2>/dev/null; do
  rc=0
  wait "$launcher" || rc=$?
done
exit "$rc"
