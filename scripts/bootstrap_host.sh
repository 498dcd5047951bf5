#!/usr/bin/env bash
# Our locked environment in a venv on a host that cannot run the trm image (e.g. inside a Vast.ai
# container): detect the GPUs, install docker/requirements/ with hashes, compile adam-atan2 for this
# GPU's SM only, verify, print the next command. Idempotent; the logic is trm/bootstrap.py.
#
#   [PYTHON=python3.11] bash scripts/bootstrap_host.sh [--dry-run | --print-env] [--cpu] [--venv DIR] [--jobs N]
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PYTHON=${PYTHON:-python3.11}
if ! command -v "$PYTHON" > /dev/null; then
  echo "bootstrap_host.sh: $PYTHON not found; the locks are for CPython 3.11: install it" \
    "(apt-get install -y python3.11 python3.11-venv python3.11-dev) or set PYTHON=/path/to/python3.11" >&2
  exit 2
fi
cd "$repo"
exec env PYTHONPATH="$repo" "$PYTHON" -m trm.bootstrap "$@"
