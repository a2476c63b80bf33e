#!/usr/bin/env bash
# scripts/test.sh - on a fresh Debian 12 machine (as root): install the test bed,
# start real Slurm (munge, slurmctld, 4 slurmd, slurmrestd), mosquitto, a real Flux
# instance (testbed/flux.sh: four brokers, multi-user, from ../shared/flux/) and a real
# Kubernetes control plane (testbed/k8s: built from Go modules on first use, ~16 min cold on
# 2 cores, seconds once Go's caches are warm), then run the linters and the whole
# test suite against them. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."

bash testbed/install.sh
bash scripts/setup-python.sh
bash testbed/slurm.sh up
bash testbed/slurm-versions.sh up   # Slurm 24.11 and 26.05 in chroots (cached)
bash testbed/flux.sh up # after slurm.sh: it shares Slurm's munged
bash testbed/mosquitto.sh up
bash testbed/k8s/k8s.sh up

echo "== ruff"; .venv/bin/ruff check .
echo "== mypy"; .venv/bin/mypy
echo "== import-linter"; .venv/bin/lint-imports
echo "== pytest"
.venv/bin/pytest -ra "$@"
