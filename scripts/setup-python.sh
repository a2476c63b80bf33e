#!/usr/bin/env bash
# scripts/setup-python.sh - make .venv with hpc-bridge (editable) and its dev tools.
# Idempotent; quick when nothing changed.
set -euo pipefail
cd "$(dirname "$0")/.."
# The system Python (Debian's), not one under /root: the CLI tools and job scripts
# in the venv must be runnable by every user (the tests run them as alice and bob).
PYTHON=${PYTHON:-/usr/bin/python3}
if ! "$PYTHON" -c 'import ensurepip, venv' 2>/dev/null || [[ ! -e /usr/include/python3.11/Python.h ]]; then
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3 python3-venv python3-dev >/dev/null
fi
if [[ -x .venv/bin/python ]] && [[ $(readlink -f .venv/bin/python) != $(readlink -f "$PYTHON") ]]; then
  rm -rf .venv  # made by another interpreter (e.g. one other users cannot run)
fi
if [[ ! -x .venv/bin/python ]]; then
  "$PYTHON" -m venv .venv
fi
stamp=.venv/.hpc-bridge-installed
if [[ ! -f $stamp || pyproject.toml -nt $stamp ]]; then
  .venv/bin/pip install --quiet --upgrade pip
  # compat: the checkout goes on sys.path by a plain .pth line. setuptools' default
  # editable finder costs every interpreter start ~9 ms (it imports pathlib and
  # importlib.util), which the t* commands and their benchmarks would carry and an
  # installed wheel does not (docs/operations.md).
  # setuptools calls the mode transitional: should a later one drop it, the default
  # mode is installed instead (slower starts; nothing else changes).
  if ! out=$(.venv/bin/pip install --quiet -e '.[dev,runtimes,flux,data-cache]' \
                --config-settings editable_mode=compat 2>&1); then
    printf '%s\n' "$out" | tail -n 20 >&2
    echo "setup-python: the compat editable install failed (above); trying the default mode" >&2
    .venv/bin/pip install --quiet -e '.[dev,runtimes,flux,data-cache]'
  fi
  touch "$stamp"
fi

# flux-python must match the flux-core of the instance: testbed/flux.sh's 0.88.0 (the
# wheel needs libflux-core.so.2, which testbed/flux.sh installs; ply: the [flux] extra).
if [[ $(.venv/bin/python -c 'import importlib.metadata as m; print(m.version("flux-python"))' \
  2>/dev/null) != 0.88.0 ]]; then
  .venv/bin/pip install --quiet 'flux-python==0.88.0' ply
fi

# A second environment with MPICH (the PyPI wheel ships libmpi and Hydra's mpiexec;
# mpi4py's binary wheel picks the MPICH build when that libmpi sits beside it): the
# integration tests run the same allreduce with Open MPI (.venv) and MPICH (here).
if [[ ! -x .venv-mpich/bin/mpiexec ]]; then
  "$PYTHON" -m venv .venv-mpich
  .venv-mpich/bin/pip install --quiet 'mpich==5.0.2' 'mpi4py==4.1.2'
fi

# The Kubeflow Python SDK, pinned, in an environment of its own as a Kubeflow user has
# it (tests/integration/test_kubeflow_sdk.py drives it against the bridge; its
# dependencies, the synchronous kubernetes client among them, stay out of .venv).
KUBEFLOW_SDK=0.5.0
if [[ $(.venv-kubeflow/bin/python -c 'import importlib.metadata as m; print(m.version("kubeflow"))' \
  2>/dev/null) != "$KUBEFLOW_SDK" ]]; then
  [[ -x .venv-kubeflow/bin/python ]] || "$PYTHON" -m venv .venv-kubeflow
  .venv-kubeflow/bin/pip install --quiet "kubeflow==$KUBEFLOW_SDK"
fi
