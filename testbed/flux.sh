#!/usr/bin/env bash
# testbed/flux.sh - a real multi-user Flux instance (flux-core 0.88.0 with
# flux-security 0.15.0) of four brokers that look like four hosts.
#
#   bash testbed/flux.sh up       # install, configure, start, wait, verify (idempotent)
#   bash testbed/flux.sh down     # shut the instance down (the install stays)
#   bash testbed/flux.sh status   # what runs + flux resource list; exit 1 if incomplete
#   bash testbed/flux.sh verify   # only the checks that `up` ends with
#   bash testbed/flux.sh kill [NODE]  # SIGKILL every broker, or NODE's (a crash; for tests)
#
# Run as root. No registry ships flux-core, so the build comes from a tarball
# (see /work/shared/flux/README.md): $HPC_BRIDGE_FLUX_TARBALL, else
# ../shared/flux/flux-0.88.0-bookworm-amd64.tar.xz beside the repository
# (its sha256 is checked). It installs to /opt/flux-mu and /opt/flux-security
# (the prefixes are compiled in), with the Debian packages it needs.
#
# The layout:
#   * four brokers node1..node4 (ranks 0-3), each in its own UTS namespace
#     (`hostname` says nodeN), bootstrapped from a bootstrap.toml (TCP
#     127.0.0.1:18911-18914, CURVE certificate) - ports clear of Slurm's
#     (16817, 17001-17004), mosquitto's (18830) and the k8s bed's;
#   * owned by the system user `flux` (not root), multi-user: guests may
#     submit (access.allow-guest-user), root is the owner's equal
#     (access.allow-root-owner: the daemon runs as root), jobs are signed with
#     munge (the Slurm bed's munged: same key, same socket) and run as their
#     submitter by the setuid IMP, which allows only alice and bob;
#   * the brokers' local socket: local:///run/hpc-bridge-testbed/flux/node1/local-0.
# `up` writes /run/hpc-bridge-testbed/flux.env (KEY=VALUE) for the tests. It takes ~2 s
# when installed and running (~4 s to start the instance), ~25 s on a fresh machine
# (Debian packages ~20 s, extracting the build ~2 s). Run it after testbed/slurm.sh up:
# jobs are signed with that bed's munged.
# Environment: TESTBED_UP_TIMEOUT (seconds to wait for the brokers, default 60),
# HPC_BRIDGE_FLUX_TARBALL (the build to install).
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/.." && pwd)
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$HERE/lib.sh"
LOG_TAG=flux

# --- layout -----------------------------------------------------------------

TARBALL_NAME=flux-0.88.0-bookworm-amd64.tar.xz
# Beside the clone; for a git worktree, beside its main checkout too.
find_tarball() {
  local common
  if [[ -n ${HPC_BRIDGE_FLUX_TARBALL:-} ]]; then
    printf '%s\n' "$HPC_BRIDGE_FLUX_TARBALL"
    return
  fi
  common=$(git -C "$REPO" rev-parse --path-format=absolute --git-common-dir 2>/dev/null) || common=
  local c
  for c in "$REPO/../shared/flux" ${common:+"$(dirname "$common")/../shared/flux"}; do
    if [[ -f $c/$TARBALL_NAME ]]; then
      printf '%s\n' "$c/$TARBALL_NAME"
      return
    fi
  done
  printf '%s\n' "$REPO/../shared/flux/$TARBALL_NAME"
}
TARBALL=$(find_tarball)
TARBALL_SHA256=0f667bfc8edd7ea4f193f116f0a0427b5c40945efc5eaba867a4b53686c2003f
FLUX_PREFIX=/opt/flux-mu
SECURITY_PREFIX=/opt/flux-security
FLUX=$FLUX_PREFIX/bin/flux
IMP=$SECURITY_PREFIX/libexec/flux/flux-imp
IMP_CONF=$SECURITY_PREFIX/etc/flux/imp/conf.d/imp.toml
INSTALL_STAMP=$FLUX_PREFIX/.hpc-bridge-testbed-installed
OWNER=flux
NODES=(node1 node2 node3 node4)
BASE_PORT=18911
TEST_USERS=(alice bob)
UP_TIMEOUT=${TESTBED_UP_TIMEOUT:-60}

STATE_DIR=$TESTBED_STATE_DIR/flux
CONF_DIR=$STATE_DIR/config # system.toml (bootstrap, access, exec)
CERT=$STATE_DIR/curve.cert
RUN_DIR=$TESTBED_RUN_DIR/flux # nodeN/ : each broker's rundir
ENV_FILE=$TESTBED_RUN_DIR/flux.env
URI=local://$RUN_DIR/${NODES[0]}/local-0 # the broker names its socket local-RANK

DEB_PACKAGES=(libzmq5 libjansson4 liblz4-1 libarchive13 libhwloc15 libsqlite3-0 libuuid1
  libncursesw6 libsodium23 libmunge2 libpython3.11 lua5.1 liblua5.1-0 lua-posix
  python3-cffi python3-yaml python3-ply munge)

broker_pidfile() { printf '%s/flux-broker.%s.pid\n' "$TESTBED_RUN_DIR" "$1"; }
broker_log() { printf '%s/flux-broker.%s.log\n' "$TESTBED_LOG_DIR" "$1"; }

# Flux commands as the instance owner (the instance's own tools, its URI).
as_owner() { setpriv --reuid="$OWNER" --regid="$OWNER" --init-groups \
  env -i PATH="$FLUX_PREFIX/bin:/usr/bin:/bin" HOME=/ LANG=C.UTF-8 FLUX_URI="$URI" "$@"; }

# --- installation ---------------------------------------------------------------

install_debs() {
  local missing=() p
  for p in "${DEB_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
  done
  ((${#missing[@]} == 0)) && return 0
  log "apt-get install ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -qq "${missing[@]}" >/dev/null 2>&1 || {
    apt-get update -qq >/dev/null
    apt-get install -y -qq "${missing[@]}" >/dev/null
  }
}

install_flux() {
  if [[ -x $FLUX && -f $INSTALL_STAMP && $(cat "$INSTALL_STAMP") == "$TARBALL_SHA256" ]]; then
    return 0
  fi
  [[ -f $TARBALL ]] || die "the Flux build is missing: $TARBALL (set HPC_BRIDGE_FLUX_TARBALL)"
  local sum
  sum=$(sha256sum "$TARBALL" | cut -d' ' -f1)
  [[ $sum == "$TARBALL_SHA256" ]] || die "$TARBALL: sha256 $sum, expected $TARBALL_SHA256"
  log "installing $TARBALL into /opt"
  tar -C /opt -xJf "$TARBALL"
  # flux-python loads libflux-core.so.2: from the loader's path, for every process.
  printf '%s\n' "$FLUX_PREFIX/lib" >/etc/ld.so.conf.d/hpc-bridge-flux.conf
  ldconfig
  printf '%s\n' "$TARBALL_SHA256" >"$INSTALL_STAMP"
}

# The IMP runs jobs as their submitter (whoever signed the jobspec): setuid root,
# callable only by the instance owner (`allowed-users` lists the users who may run
# `flux-imp exec`, not the jobs' users), and only to start the job shell.
configure_imp() {
  chown root:root "$IMP"
  chmod 4755 "$IMP"
  write_if_changed "$IMP_CONF" "$(
    cat <<EOF
# Written by hpc-bridge testbed/flux.sh - do not edit, re-run the script.
[exec]
allowed-users = [ "$OWNER" ]
allowed-shells = [ "$FLUX_PREFIX/libexec/flux/flux-shell" ]
pam-support = false
EOF
  )" 0644 || true
}

ensure_owner() {
  id -u "$OWNER" >/dev/null 2>&1 && return 0
  log "creating system user $OWNER"
  useradd --system --no-create-home --home-dir / --shell /usr/sbin/nologin "$OWNER"
}

# --- configuration --------------------------------------------------------------

system_toml() {
  local i hosts=""
  for i in "${!NODES[@]}"; do
    hosts+="  { host = \"${NODES[$i]}\", bind = \"tcp://127.0.0.1:$((BASE_PORT + i))\", connect = \"tcp://127.0.0.1:$((BASE_PORT + i))\" },"$'\n'
  done
  cat <<EOF
# Written by hpc-bridge testbed/flux.sh - do not edit, re-run the script.
[bootstrap]
curve_cert = "$CERT"
hosts = [
$hosts]

[access]
allow-guest-user = true
allow-root-owner = true

[exec]
imp = "$IMP"

[resource]
noverify = true
EOF
}

configure_instance() {
  install -d -m 0755 "$TESTBED_STATE_DIR" "$TESTBED_LOG_DIR" "$TESTBED_RUN_DIR"
  install -d -o "$OWNER" -g "$OWNER" -m 0755 "$STATE_DIR" "$CONF_DIR" "$RUN_DIR"
  write_if_changed "$CONF_DIR/system.toml" "$(system_toml)" 0644 || true
  if [[ ! -s $CERT ]]; then
    log "creating $CERT"
    as_owner "$FLUX" keygen "$CERT" >/dev/null
  fi
  chown "$OWNER:$OWNER" "$CERT"
  chmod 0600 "$CERT"
}

# --- brokers --------------------------------------------------------------------

# The broker names itself flux-broker-RANK.
broker_comm() { # NODE
  local i
  for i in "${!NODES[@]}"; do [[ ${NODES[$i]} == "$1" ]] && printf 'flux-broker-%s\n' "$i"; done
}
broker_pid() { pidfile_pid "$(broker_pidfile "$1")" "$(broker_comm "$1")"; }

any_broker_running() {
  local n
  for n in "${NODES[@]}"; do broker_pid "$n" >/dev/null && return 0; done
  return 1
}

all_brokers_running() {
  local n
  for n in "${NODES[@]}"; do broker_pid "$n" >/dev/null || return 1; done
}

# One broker in its own UTS namespace, as the owner. The rundir is made fresh
# (a crashed broker leaves its socket behind).
start_broker() { # INDEX
  local i=$1 node=${NODES[$1]} rundir
  rundir=$RUN_DIR/$node
  rm -rf "$rundir"
  install -d -o "$OWNER" -g "$OWNER" -m 0755 "$rundir"
  log "starting broker $node (rank $i)"
  # shellcheck disable=SC2016 # $1.. are expanded by the inner sh
  detach "$(broker_log "$node")" \
    unshare --uts sh -c 'hostname "$1" && shift && exec "$@"' broker-ns "$node" \
    setpriv --reuid="$OWNER" --regid="$OWNER" --init-groups \
    env -i PATH="$FLUX_PREFIX/bin:/usr/bin:/bin" HOME=/ LANG=C.UTF-8 \
    "$FLUX" broker --config-path="$CONF_DIR" -Srundir="$rundir" -Sbroker.rc2_none=1 \
    -Slog-stderr-level=5
  printf '%s\n' "$DETACHED_PID" >"$(broker_pidfile "$node")"
}

# Rank 0 answers and its instance runs (state "run").
leader_answers() {
  as_owner timeout 10 "$FLUX" uptime 2>/dev/null | grep -q 'run '
}

# Every broker has joined ("full") and the scheduler has every node (free or running
# jobs; not down, not left out).
instance_answers() {
  leader_answers &&
    [[ $(as_owner timeout 10 "$FLUX" overlay status --summary 2>/dev/null) == full ]] &&
    [[ $(as_owner timeout 10 "$FLUX" resource list -no '{state} {nnodes}' 2>/dev/null |
      awk '$1 == "free" || $1 == "allocated" { n += $2 } END { print n + 0 }') == "${#NODES[@]}" ]]
}

wait_for_instance() {
  local deadline=$((SECONDS + UP_TIMEOUT)) n logs=()
  while ((SECONDS < deadline)); do
    instance_answers && return 0
    all_brokers_running || break
    sleep 0.2
  done
  for n in "${NODES[@]}"; do logs+=("$(broker_log "$n")"); done
  show_logs "${logs[@]}"
  die "the Flux instance did not come up (all ${#NODES[@]} brokers, state run)"
}

# Nodes drained by an earlier failure (a job shell that died before its first
# barrier drains its nodes) come back, as Slurm's ReturnToService would.
undrain() {
  local ranks
  ranks=$(as_owner timeout 10 "$FLUX" resource drain -no '{ranks}' 2>/dev/null | tr '\n' ' ') || ranks=
  for r in $ranks; do
    log "undraining rank $r"
    as_owner timeout 10 "$FLUX" resource undrain "$r" >/dev/null 2>&1 || true
  done
}

start_instance() {
  if all_brokers_running && instance_answers; then
    undrain
    return 0
  fi
  if any_broker_running; then
    # Half an instance (a broker died: kill NODE). A restarted follower rejoins, but
    # sched-simple then leaves its node out of the free set: start the instance over.
    log "the instance is incomplete; restarting it"
    kill_brokers
  fi
  local i
  for i in "${!NODES[@]}"; do start_broker "$i"; done
  wait_for_instance
}

# SIGKILL every broker, or those of the given nodes.
kill_brokers() { # [NODE...]
  local n pid
  local nodes=("$@")
  ((${#nodes[@]} > 0)) || nodes=("${NODES[@]}")
  for n in "${nodes[@]}"; do
    if pid=$(broker_pid "$n"); then
      kill -KILL "$pid" 2>/dev/null || true
      stop_pid "$pid" "$(broker_comm "$n")" 10 quiet
    fi
    rm -f "$(broker_pidfile "$n")"
  done
}

stop_instance() {
  any_broker_running || return 0
  log "shutting the instance down"
  as_owner timeout 60 "$FLUX" shutdown --quiet >/dev/null 2>&1 || true
  local n pid
  for n in "${NODES[@]}"; do
    if pid=$(broker_pid "$n"); then stop_pid "$pid" "$(broker_comm "$n")" 30 quiet; fi
    rm -f "$(broker_pidfile "$n")"
  done
}

# --- flux.env -------------------------------------------------------------------

write_env_file() {
  write_if_changed "$ENV_FILE" "$(
    cat <<EOF
# hpc-bridge Flux test bed - written by testbed/flux.sh up
FLUX_URI=$URI
FLUX_PREFIX=$FLUX_PREFIX
FLUX_COMMAND=$FLUX
FLUX_LIBRARY_PATH=$FLUX_PREFIX/lib
FLUX_OWNER=$OWNER
FLUX_NODES="${NODES[*]}"
TESTBED_USERS="${TEST_USERS[*]}"
TESTBED_LOG_DIR=$TESTBED_LOG_DIR
EOF
  )" 0644 || true
}

# --- verification -----------------------------------------------------------------

# A 2-node job as alice (signed with munge, run by the IMP as alice) on two
# brokers that report different hostnames.
verify() {
  local out
  out=$(setpriv --reuid=alice --regid=alice --init-groups env -i PATH="$FLUX_PREFIX/bin:/usr/bin:/bin" \
    HOME=/tmp FLUX_URI="$URI" timeout 60 "$FLUX" run -N2 -n2 sh -c 'echo "$(id -un) $(hostname)"' 2>&1) ||
    die "a 2-node job as alice failed: $out"
  [[ $(grep -cE '^alice node[1-4]$' <<<"$out") == 2 && $(sort -u <<<"$out" | wc -l) == 2 ]] ||
    die "a 2-node job as alice printed '$out', expected 'alice nodeX' and 'alice nodeY'"
  log "verified: a 2-node job ran as alice on $(cut -d' ' -f2 <<<"$out" | sort | tr '\n' ' ')"
}

# --- commands ---------------------------------------------------------------------

up() {
  require_root
  local t0=$SECONDS
  install_debs
  install_flux
  ensure_owner
  configure_imp
  command -v munge >/dev/null && munge -n 2>/dev/null | unmunge >/dev/null 2>&1 ||
    die "munge does not work (start it first: bash testbed/slurm.sh up)"
  local n
  for n in "${NODES[@]}"; do # torch's master address, MPI's hosts: names that resolve
    getent hosts "$n" >/dev/null || die "$n does not resolve (testbed/slurm.sh up maps node1-node4 in /etc/hosts)"
  done
  configure_instance
  start_instance
  write_env_file
  verify
  log "up in $((SECONDS - t0))s: $URI"
}

status() {
  local n pid rc=0
  for n in "${NODES[@]}"; do
    if pid=$(broker_pid "$n"); then
      printf 'flux-broker %s: running (pid %s)\n' "$n" "$pid"
    else
      printf 'flux-broker %s: NOT running\n' "$n"
      rc=1
    fi
  done
  if ((rc == 0)); then
    as_owner timeout 10 "$FLUX" resource list || rc=1
  fi
  return $rc
}

case ${1:-} in
  up) up ;;
  down)
    require_root
    stop_instance
    rm -f "$ENV_FILE"
    ;;
  status) status ;;
  verify) verify ;;
  kill)
    require_root
    shift
    kill_brokers "$@"
    ;;
  *)
    echo "usage: $0 up|down|status|verify|kill" >&2
    exit 2
    ;;
esac
