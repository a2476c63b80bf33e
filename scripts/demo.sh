#!/usr/bin/env bash
# scripts/demo.sh - on a fresh Debian 12 machine (as root): install and start a local
# 4-node Slurm, start the hpc-bridge daemon next to it, submit examples/hello-2node.sh
# as the test user alice with tbatch, follow it with tlog -f, then show tqueue/tshow.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD

bash testbed/install.sh
bash scripts/setup-python.sh
bash testbed/slurm.sh up
# shellcheck disable=SC1091
source /run/hpc-bridge-testbed/testbed.env

demo=/tmp/hpc-bridge-demo
rm -rf "$demo"; mkdir -p "$demo/work"; chmod 755 "$demo"; chown alice: "$demo/work"
cat > "$demo/bridge.toml" <<TOML
[daemon]
state_dir = "$demo/state"
socket = "$demo/run/bridge.sock"
log_format = "console"

[engine]
default_backend = "slurm"
poll_interval = 1.0

[backends.slurm]
kind = "slurm"
rest_socket = "$SLURMRESTD_SOCKET"
rest_version = "$SLURM_REST_VERSION"
jwt_key = "$SLURM_JWT_KEY"
TOML

"$repo/.venv/bin/hpc-bridge" serve --config "$demo/bridge.toml" 2> "$demo/daemon.log" &
daemon=$!
trap 'kill $daemon 2>/dev/null; wait $daemon 2>/dev/null || true' EXIT
for _ in $(seq 100); do [[ -S $demo/run/bridge.sock ]] && break; sleep 0.1; done
chmod 755 "$demo/run"

as_alice() {
  (cd "$demo/work" && runuser -u alice -- env HPC_BRIDGE_SOCKET="$demo/run/bridge.sock" \
    PATH="$repo/.venv/bin:/usr/bin:/bin" "$@")
}
cp examples/hello-2node.sh "$demo/work/"
echo "\$ tbatch hello-2node.sh from the demo"
out=$(as_alice tbatch hello-2node.sh from the demo)
echo "$out"
id=${out##* }
echo "\$ tlog -f $id"
as_alice tlog -f "$id"
echo "\$ tqueue -t all"
as_alice tqueue -t all
echo "\$ tshow $id"
as_alice tshow "$id"
as_alice tshow --json "$id" | grep -q '"state": "Succeeded"'
echo "demo: job $id succeeded"
