#!/usr/bin/env bash
# testbed/k8s/trainer-controller.sh - Kubeflow Trainer's REAL controller manager
# (cmd/trainer-controller-manager of github.com/kubeflow/trainer/v2 at
# TRAINER_VERSION in versions.env) on the running test bed, for the golden-JobSet
# recording (record-trainer-jobsets.sh) and bench/k8s_admit.py --trainer.
#
#   bash testbed/k8s/trainer-controller.sh build        # prints the binary's path
#   bash testbed/k8s/trainer-controller.sh start DIR    # DIR: empty, private; prints the pid
#   bash testbed/k8s/trainer-controller.sh stop DIR
#
# build: `go build` from the module cache into $TRAINER_BUILD_DIR (default
#   /var/lib/hpc-bridge-testbed/k8s/trainer-build; never the repository), once per
#   version. Also writes $TRAINER_BUILD_DIR/module.json (`go mod download -json`:
#   the module's Dir and commit).
# start: runs it in the background with the admin kubeconfig: certificate
#   management OFF (no Secret, no webhook configuration patched), the webhook server
#   on 127.0.0.1 with a throw-away self-signed cert under DIR, NO webhook
#   configuration installed (the apiserver never calls it), no leader election (no
#   Lease), metrics off, health probes on 127.0.0.1. Log: DIR/controller.log, pid:
#   DIR/pid. Returns once its TrainJob workers run (or fails with the log's tail).
# stop: SIGTERM, SIGKILL after 10 s; keeps the log as
#   $TRAINER_BUILD_DIR/last-controller.log.
# It claims TrainJobs whose spec.managedBy is unset or Trainer's own value; an
# hpc-bridge daemon in drop-in mode refuses to run beside it.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source-path=SCRIPTDIR source=trainer-common.sh
source "$HERE/trainer-common.sh"
WEBHOOK_PORT=${TRAINER_WEBHOOK_PORT:-16447}
HEALTH_PORT=${TRAINER_HEALTH_PORT:-16448}
MODULE=github.com/kubeflow/trainer/v2
BIN=$BUILD_DIR/trainer-controller-manager
export PATH=/usr/local/go/bin:$PATH

log() { printf '[trainer-controller] %s\n' "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

build() {
  [[ -x $PY ]] || die "no $PY: run scripts/setup-python.sh (or set PYTHON)"
  install -d -m 0755 "$BUILD_DIR"
  go mod download -json "$MODULE@$TRAINER_VERSION" >"$BUILD_DIR/module.json.tmp"
  mv -f "$BUILD_DIR/module.json.tmp" "$BUILD_DIR/module.json"
  local mod_dir
  mod_dir=$("$PY" -c 'import json,sys; print(json.load(open(sys.argv[1]))["Dir"])' \
    "$BUILD_DIR/module.json")
  if [[ ! -x $BIN || $(cat "$BUILD_DIR/.pin" 2>/dev/null) != "$TRAINER_VERSION" ]]; then
    log "building $MODULE@$TRAINER_VERSION cmd/trainer-controller-manager"
    (cd "$mod_dir" && CGO_ENABLED=0 GOFLAGS=-buildvcs=false go build -trimpath -mod=readonly \
      -ldflags "-s -w" -o "$BIN.tmp" ./cmd/trainer-controller-manager) \
      >"$BUILD_DIR/build.log" 2>&1 || { tail -20 "$BUILD_DIR/build.log" >&2; die "build failed"; }
    mv -f "$BIN.tmp" "$BIN"
    printf '%s\n' "$TRAINER_VERSION" >"$BUILD_DIR/.pin"
  fi
  printf '%s\n' "$BIN"
}

start() {
  local dir=$1
  [[ -d $dir ]] || die "no directory $dir"
  build >/dev/null
  if [[ -s $dir/pid ]] && kill -0 "$(cat "$dir/pid")" 2>/dev/null; then
    die "a controller from $dir runs already (pid $(cat "$dir/pid"))"
  fi
  local port
  for port in "$HEALTH_PORT" "$WEBHOOK_PORT"; do
    if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
      die "something listens on 127.0.0.1:$port: another Trainer controller? (TRAINER_HEALTH_PORT, TRAINER_WEBHOOK_PORT)"
    fi
  done
  # controller-runtime reads $TMPDIR/k8s-webhook-server/serving-certs.
  local certs=$dir/k8s-webhook-server/serving-certs
  install -d -m 0700 "$certs"
  openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=127.0.0.1 \
    -addext subjectAltName=IP:127.0.0.1 -keyout "$certs/tls.key" -out "$certs/tls.crt" \
    2>/dev/null
  cat >"$dir/config.yaml" <<EOF
apiVersion: config.trainer.kubeflow.org/v1alpha1
kind: Configuration
health: {healthProbeBindAddress: "127.0.0.1:$HEALTH_PORT"}
metrics: {bindAddress: "0"}
webhook: {port: $WEBHOOK_PORT, host: 127.0.0.1}
leaderElection: {leaderElect: false}
certManagement: {enable: false}
EOF
  TMPDIR=$dir KUBECONFIG=$KUBECONFIG_ADMIN setsid "$BIN" --config "$dir/config.yaml" \
    >"$dir/controller.log" 2>&1 </dev/null &
  local pid=$!
  printf '%s\n' "$pid" >"$dir/pid"
  local _
  for _ in $(seq 1 240); do
    kill -0 "$pid" 2>/dev/null || { tail -30 "$dir/controller.log" >&2; die "the controller exited"; }
    if curl -fsS --max-time 2 "http://127.0.0.1:$HEALTH_PORT/readyz" >/dev/null 2>&1 &&
      grep -q '"Starting workers".*trainjob' "$dir/controller.log"; then
      printf '%s\n' "$pid"
      return 0
    fi
    sleep 0.25
  done
  tail -50 "$dir/controller.log" >&2
  stop "$dir"
  die "the controller did not become ready in 60 s"
}

stop() {
  local dir=$1 pid _
  pid=$(cat "$dir/pid" 2>/dev/null || true)
  # Only the controller this directory started (its command line names this
  # directory's config): a stale pid may be another process's.
  if [[ -n $pid ]] && tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null |
    grep -qF -- "--config $dir/config.yaml"; then
    kill -TERM "$pid"
    for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
    kill -0 "$pid" 2>/dev/null && kill -KILL "$pid"
  fi
  rm -f "$dir/pid"
  if [[ -s $dir/controller.log ]]; then
    cp -f "$dir/controller.log" "$BUILD_DIR/last-controller.log"
  fi
}

case ${1:-} in
  build) build ;;
  start) [[ $# -eq 2 ]] || die "usage: $0 start DIR"; start "$2" ;;
  stop) [[ $# -eq 2 ]] || die "usage: $0 stop DIR"; stop "$2" ;;
  *) die "usage: $0 build | start DIR | stop DIR" ;;
esac
