#!/usr/bin/env bash
# From a booted GPU host to a resumable TRM training run with a handoff bundle.
#
#   [VAR=value ...] bash scripts/train_prod.sh [--dry-run | --help] [TRAINER_OVERRIDE ...]
#
# Every setting is an environment variable; `--help` lists each one with its default (declared once in
# trm/launch/config/variables.py). Everything else is `python -m trm launch`: preflight, dataset, hardware
# tier, smoke gate, supervised torchrun, cost guard, USE_TMUX, signal forwarding and, at exit whatever the
# outcome, the handoff bundle, final sync and release. Running the same command again resumes the run.
#
# Exit status: the launcher's (trm/exit_codes.py, README "Exit codes"): 0 finished, 2 configuration error,
# 74 checkpoint disk full, 75 saved after SIGTERM (retry), 76 node fault found by the preflight (retry on
# another node), 79 MAX_HOURS budget spent, else a trainer failure.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export PYTHONPATH="${repo}${PYTHONPATH:+:${PYTHONPATH}}"
# PYTHON: a Python with the project installed; unset: the checkout's venv (`make venv`: .venv) when it
# exists, else `python`. The launcher runs its steps and torchrun with it.
if [[ -z "${PYTHON:-}" && -x "${repo}/.venv/bin/python" ]]; then
  export PYTHON="${repo}/.venv/bin/python"
fi
# Tells the launcher that this script started it: the resume command in handoff.json and --help name it.
export TRM_LAUNCHER=scripts/train_prod.sh
exec "${PYTHON:-python}" -m trm launch "$@"
