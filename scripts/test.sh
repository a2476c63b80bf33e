#!/usr/bin/env bash
# scripts/test.sh - on a fresh Debian 12 machine (as root): install the test bed,
# start real Slurm (munge, slurmctld, 4 slurmd, slurmrestd), then run the linters
# and the whole test suite against it. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."

bash testbed/install.sh
bash scripts/setup-python.sh
bash testbed/slurm.sh up

echo "== ruff"; .venv/bin/ruff check .
echo "== mypy"; .venv/bin/mypy
echo "== import-linter"; .venv/bin/lint-imports
echo "== pytest"
.venv/bin/pytest -ra "$@"
