# testbed/k8s/trainer-common.sh - sourced (after HERE is set) by the scripts that run
# Kubeflow Trainer's controller on the bed: trainer-controller.sh and
# record-trainer-jobsets.sh. Sets REPO, the pinned versions (versions.env), STATE,
# KUBECONFIG_ADMIN, BUILD_DIR ($TRAINER_BUILD_DIR) and PY ($PYTHON).
# shellcheck shell=bash
REPO=$(cd "$HERE/../.." && pwd)
# shellcheck source-path=SCRIPTDIR source=versions.env
source "$HERE/versions.env"
STATE=/var/lib/hpc-bridge-testbed/k8s
KUBECONFIG_ADMIN=${KUBECONFIG_ADMIN:-/run/hpc-bridge-testbed/k8s/admin.kubeconfig}
BUILD_DIR=${TRAINER_BUILD_DIR:-$STATE/trainer-build}
PY=${PYTHON:-$REPO/.venv/bin/python}
