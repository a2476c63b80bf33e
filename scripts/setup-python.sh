#!/usr/bin/env bash
# scripts/setup-python.sh - make .venv with hpc-bridge (editable) and its dev tools.
# Idempotent; quick when nothing changed.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
if [[ ! -x .venv/bin/python ]]; then
  "$PYTHON" -m venv .venv
fi
stamp=.venv/.hpc-bridge-installed
if [[ ! -f $stamp || pyproject.toml -nt $stamp ]]; then
  .venv/bin/pip install --quiet --upgrade pip
  .venv/bin/pip install --quiet -e '.[dev]'
  touch "$stamp"
fi
