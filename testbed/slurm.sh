#!/usr/bin/env bash
# testbed/slurm.sh - a real 4-node Slurm 22.05 cluster on this one machine.
#
#   bash testbed/slurm.sh up            # configure, start, wait, verify (idempotent)
#   bash testbed/slurm.sh down          # stop slurmrestd, the 4 slurmd, slurmctld
#   bash testbed/slurm.sh status        # what runs + sinfo; exit 1 if incomplete
#   bash testbed/slurm.sh verify        # only the checks that `up` ends with
#   bash testbed/slurm.sh stop-rest     # stop ONLY slurmrestd
#   bash testbed/slurm.sh start-rest    # start slurmrestd, wait until it answers
#   bash testbed/slurm.sh restart-ctld  # stop + start slurmctld only
#
# Run as root, after testbed/install.sh. The layout:
#   * one slurmctld (SlurmctldPort 16817), SlurmUser=root;
#   * four slurmd "node1".."node4" (ports 17001-17004), each in its own UTS and
#     mount namespace: `hostname` says nodeN and /run/pmix is private, so that
#     Open MPI / PMIx see four distinct hosts (see /work/shared/TESTBED.md);
#   * slurmrestd as user slurm on a UNIX socket, JWT auth (any user, e.g.
#     alice, through the X-SLURM-USER-NAME / X-SLURM-USER-TOKEN headers);
#   * munged as user munge (left running by `down`).
# `up` writes /run/hpc-bridge-testbed/testbed.env (KEY=VALUE) for the tests.
# Environment: TESTBED_UP_TIMEOUT (seconds to wait for the nodes, default 60).
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$HERE/lib.sh"
LOG_TAG=slurm

# --- layout -----------------------------------------------------------------

CLUSTER_NAME=bridgetest
PARTITION=debug
CTLD_PORT=16817
NODES=(node1 node2 node3 node4)
NODE_RANGE="node[1-4]"
TEST_USERS="alice bob"
UP_TIMEOUT=${TESTBED_UP_TIMEOUT:-60}

SLURM_CONF=/etc/slurm/slurm.conf
TOPOLOGY_CONF=/etc/slurm/topology.conf
MPI_CONF=/etc/slurm/mpi.conf
JWT_KEY=$TESTBED_STATE_DIR/jwt.key
CTLD_STATE_DIR=$TESTBED_STATE_DIR/slurmctld # StateSaveLocation
SPOOL_DIR=$TESTBED_STATE_DIR/spool          # slurmd.nodeN/ below
CTLD_PIDFILE=$TESTBED_RUN_DIR/slurmctld.pid
CTLD_LOG=$TESTBED_LOG_DIR/slurmctld.log
REST_VERSION=v0.0.38
REST_DIR=$TESTBED_RUN_DIR/slurmrestd
REST_SOCKET=$REST_DIR/rest.sock
REST_PIDFILE=$TESTBED_RUN_DIR/slurmrestd.pid
REST_LOG=$TESTBED_LOG_DIR/slurmrestd.log
ENV_FILE=$TESTBED_RUN_DIR/testbed.env

slurmd_pidfile() { printf '%s/slurmd.%s.pid\n' "$TESTBED_RUN_DIR" "$1"; }
slurmd_log() { printf '%s/slurmd.%s.log\n' "$TESTBED_LOG_DIR" "$1"; }

# Our own client calls authenticate with munge as root, never with a JWT a
# caller may have exported.
export SLURM_CONF
unset SLURM_JWT

# --- configuration ------------------------------------------------------------

slurm_conf() {
  cat <<EOF
# Written by hpc-bridge testbed/slurm.sh - do not edit, re-run the script.
ClusterName=$CLUSTER_NAME
SlurmctldHost=localhost
SlurmctldPort=$CTLD_PORT
SlurmUser=root
SlurmdUser=root

AuthType=auth/munge
CryptoType=crypto/munge
# JWT lets slurmrestd act for any user (tokens: scontrol token username=U).
AuthAltTypes=auth/jwt
AuthAltParameters=jwt_key=$JWT_KEY

StateSaveLocation=$CTLD_STATE_DIR
SlurmdSpoolDir=$SPOOL_DIR/slurmd.%n
SlurmctldPidFile=$CTLD_PIDFILE
SlurmdPidFile=$TESTBED_RUN_DIR/slurmd.%n.pid
SlurmctldLogFile=$CTLD_LOG
SlurmdLogFile=$TESTBED_LOG_DIR/slurmd.%n.log
SlurmctldDebug=info
SlurmdDebug=info

# No cgroups on this machine: plain process tracking, no task binding.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
TopologyPlugin=topology/tree

# Start jobs quickly.
SchedulerType=sched/backfill
SchedulerParameters=bf_interval=5,sched_interval=5

# No slurmdbd (and no mail); finished jobs stay visible to squeue and
# slurmrestd for an hour.
MailProg=/bin/true
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
MinJobAge=3600

ReturnToService=2
# Trust the node lines above, not the hardware slurmd detects: a CI machine
# with fewer cores or less memory must not drain the nodes.
SlurmdParameters=config_overrides
SlurmctldTimeout=30
SlurmdTimeout=30
InactiveLimit=0
KillWait=5
MessageTimeout=10
Waittime=0

NodeName=node[1-4] NodeHostname=localhost NodeAddr=127.0.0.1 Port=[17001-17004] CPUs=2 RealMemory=2000 State=UNKNOWN
PartitionName=$PARTITION Nodes=$NODE_RANGE Default=YES MaxTime=INFINITE State=UP
EOF
}

topology_conf() {
  cat <<'EOF'
# Written by hpc-bridge testbed/slurm.sh - do not edit, re-run the script.
SwitchName=leaf1 Nodes=node[1-2]
SwitchName=leaf2 Nodes=node[3-4]
SwitchName=spine Switches=leaf[1-2]
EOF
}

mpi_conf() {
  cat <<'EOF'
# Written by hpc-bridge testbed/slurm.sh - do not edit, re-run the script.
# Each slurmd has a private tmpfs on /run/pmix (its own mount namespace), so
# the "nodes" do not collide on PMIx's per-job directories.
PMIxCliTmpDirBase=/run/pmix
EOF
}

# Write the config files; return 0 if any of them changed.
write_configs() {
  local changed=1
  write_if_changed "$SLURM_CONF" "$(slurm_conf)" && changed=0
  write_if_changed "$TOPOLOGY_CONF" "$(topology_conf)" && changed=0
  write_if_changed "$MPI_CONF" "$(mpi_conf)" && changed=0
  return $changed
}

make_dirs() {
  install -d -m 0755 "$TESTBED_STATE_DIR" "$TESTBED_LOG_DIR" "$TESTBED_RUN_DIR" \
    "$CTLD_STATE_DIR" "$SPOOL_DIR"
  local n
  for n in "${NODES[@]}"; do
    install -d -m 0755 "$SPOOL_DIR/slurmd.$n"
  done
  # slurmrestd runs as 'slurm' and creates its socket here.
  install -d -o slurm -g slurm -m 0755 "$REST_DIR"
}

# 32 random bytes, created once, readable only by the SlurmUser (root).
ensure_jwt_key() {
  if [[ ! -s $JWT_KEY ]]; then
    log "creating $JWT_KEY"
    (umask 077 && head -c 32 /dev/urandom >"$JWT_KEY")
  fi
  chown root:root "$JWT_KEY"
  chmod 0600 "$JWT_KEY"
}

# node1..node4 must resolve to 127.0.0.1 (Open MPI, torchrun --master-addr).
# Append to /etc/hosts in place (it may be a bind mount: no sed -i / mv).
ensure_hosts() {
  local n missing=()
  for n in "${NODES[@]}"; do
    if ! grep -Eq "^127\.0\.0\.1([[:space:]]+[^#[:space:]]+)*[[:space:]]+$n([[:space:]]|#|$)" /etc/hosts; then
      missing+=("$n")
    fi
  done
  if ((${#missing[@]} > 0)); then
    log "adding ${missing[*]} to /etc/hosts"
    printf '127.0.0.1 %s # hpc-bridge testbed\n' "${missing[*]}" >>/etc/hosts
  fi
}

# --- munge ---------------------------------------------------------------------

munge_works() { munge -n 2>/dev/null | unmunge >/dev/null 2>&1; }

start_munge() {
  munge_works && return 0
  log "starting munged"
  install -d -o munge -g munge -m 0755 /run/munge
  install -d -o munge -g munge -m 0700 /var/log/munge /var/lib/munge
  # munged daemonizes itself; --force: ignore a stale socket lock.
  detach "$TESTBED_LOG_DIR/munged.out" \
    setpriv --reuid=munge --regid=munge --init-groups /usr/sbin/munged --force
  wait "$DETACHED_PID" || true
  local i
  for ((i = 0; i < 50; i++)); do
    munge_works && return 0
    sleep 0.2
  done
  show_logs "$TESTBED_LOG_DIR/munged.out" /var/log/munge/munged.log
  die "munged does not work (munge -n | unmunge fails)"
}

# --- slurmctld -------------------------------------------------------------------

ctld_pid() { pidfile_pid "$CTLD_PIDFILE" slurmctld; }

ctld_answers() { scontrol ping 2>/dev/null | grep -q 'is UP'; }

start_slurmctld() {
  if ! ctld_pid >/dev/null; then
    log "starting slurmctld"
    detach "$TESTBED_LOG_DIR/slurmctld.out" slurmctld # daemonizes itself
    wait "$DETACHED_PID" || {
      show_logs "$TESTBED_LOG_DIR/slurmctld.out" "$CTLD_LOG"
      die "slurmctld failed to start"
    }
  fi
  local i
  for ((i = 0; i < 150; i++)); do
    ctld_answers && return 0
    if ((i > 10)) && ! ctld_pid >/dev/null; then break; fi
    sleep 0.2
  done
  show_logs "$TESTBED_LOG_DIR/slurmctld.out" "$CTLD_LOG"
  die "slurmctld does not answer 'scontrol ping'"
}

stop_slurmctld() {
  local pid
  if pid=$(ctld_pid); then stop_pid "$pid" slurmctld 30; fi
}

# --- slurmd x 4 ----------------------------------------------------------------

slurmd_pid() { pidfile_pid "$(slurmd_pidfile "$1")" slurmd; }

# Each slurmd gets its own UTS namespace (hostname nodeN) and mount namespace
# (private tmpfs on /run/pmix); everything else (/tmp, /home, /run) is shared.
# The namespaces live as long as the daemonized slurmd (and its job steps).
start_slurmd() { # NODE
  local node=$1
  slurmd_pid "$node" >/dev/null && return 0
  log "starting slurmd $node"
  # shellcheck disable=SC2016 # $1 is expanded by the inner bash
  detach "$TESTBED_LOG_DIR/slurmd.$node.out" \
    unshare --uts --mount --propagation private \
    bash -c 'hostname "$1" && mkdir -p /run/pmix &&
             mount -t tmpfs -o mode=1777 tmpfs /run/pmix &&
             exec slurmd -N "$1"' slurmd-ns "$node"
  wait "$DETACHED_PID" || {
    show_logs "$TESTBED_LOG_DIR/slurmd.$node.out" "$(slurmd_log "$node")"
    die "slurmd $node failed to start"
  }
}

stop_slurmds() {
  local n pid pids=()
  for n in "${NODES[@]}"; do
    if pid=$(slurmd_pid "$n"); then
      log "stopping slurmd $n (pid $pid)"
      kill -TERM "$pid" 2>/dev/null || true
      pids+=("$pid")
    fi
  done
  # (all four got SIGTERM at once; now wait for each, SIGKILL stragglers)
  for pid in "${pids[@]}"; do stop_pid "$pid" slurmd 20 quiet; done
}

# Print "NODE STATE" lines from sinfo (STATE lower case, e.g. idle, down*).
node_states() {
  sinfo -h -N -p "$PARTITION" -o '%N %T' 2>/dev/null | sort -u
}

# Wait until all nodes are usable; resume nodes that came back DOWN/DRAINED
# (e.g. after a restart with state saved while they were unreachable).
wait_for_nodes() {
  local deadline=$((SECONDS + UP_TIMEOUT)) states node state ready
  while true; do
    states=$(node_states)
    ready=0
    while read -r node state; do
      [[ -n $node ]] || continue
      case $state in
        idle | mixed | allocated | completing) ready=$((ready + 1)) ;;
        down | drained | draining | drain | fail | failing)
          # responding (no '*') but administratively down: resume it
          log "node $node is $state; resuming it"
          scontrol update nodename="$node" state=resume >/dev/null 2>&1 || true
          ;;
        *) ;; # unknown / not responding (state ends in '*'): wait
      esac
    done <<<"$states"
    if ((ready == ${#NODES[@]})); then
      return 0
    fi
    if ((SECONDS >= deadline)); then
      log "nodes not ready after ${UP_TIMEOUT}s:"
      printf '%s\n' "$states" >&2
      scontrol show nodes "$NODE_RANGE" 2>/dev/null | grep -E 'NodeName|State=|Reason' >&2 || true
      local logs=("$CTLD_LOG") n
      for n in "${NODES[@]}"; do logs+=("$(slurmd_log "$n")" "$TESTBED_LOG_DIR/slurmd.$n.out"); done
      show_logs "${logs[@]}"
      die "the Slurm nodes did not come up"
    fi
    sleep 1
  done
}

# --- slurmrestd ---------------------------------------------------------------------

rest_pid() { pidfile_pid "$REST_PIDFILE" slurmrestd; }

# Any HTTP answer on the socket counts (without a token: 401).
rest_answers() {
  local code
  code=$(curl -s -o /dev/null -w '%{http_code}' --max-time 5 \
    --unix-socket "$REST_SOCKET" "http://localhost/slurm/$REST_VERSION/ping" 2>/dev/null) || true
  [[ -n $code && $code != 000 ]]
}

start_rest() {
  if ! rest_pid >/dev/null; then
    log "starting slurmrestd on $REST_SOCKET"
    install -d -o slurm -g slurm -m 0755 "$REST_DIR"
    rm -f "$REST_SOCKET"
    # slurmrestd refuses to run as root. SLURM_JWT=daemon: take each request's
    # identity from its X-SLURM-USER-* headers. -s: only the slurmctld API
    # (the default also loads the slurmdbd one and exits without slurmdbd).
    # SLURM_BITSTR_LEN=0: an array's pending tasks listed whole, not cut at 64
    # characters (docs/slurm.md asks sites for it: the bridge reads each task).
    detach "$REST_LOG" \
      env SLURM_JWT=daemon SLURM_CONF="$SLURM_CONF" SLURM_BITSTR_LEN=0 \
      setpriv --reuid=slurm --regid=slurm --init-groups \
      slurmrestd -s "openapi/$REST_VERSION" -a rest_auth/jwt "unix:$REST_SOCKET"
    printf '%s\n' "$DETACHED_PID" >"$REST_PIDFILE"
  fi
  local i
  for ((i = 0; i < 100; i++)); do
    rest_answers && return 0
    pidfile_alive "$REST_PIDFILE" || break
    sleep 0.2
  done
  show_logs "$REST_LOG"
  die "slurmrestd does not answer on $REST_SOCKET"
}

stop_rest() {
  local pid
  if pid=$(rest_pid); then stop_pid "$pid" slurmrestd 20; fi
  rm -f "$REST_PIDFILE" "$REST_SOCKET"
}

# --- testbed.env ----------------------------------------------------------------------

write_env_file() {
  local content
  content=$(
    cat <<EOF
# hpc-bridge Slurm test bed - written by testbed/slurm.sh up
SLURMRESTD_SOCKET=$REST_SOCKET
SLURM_REST_VERSION=$REST_VERSION
SLURM_JWT_KEY=$JWT_KEY
SLURM_CONF=$SLURM_CONF
SLURM_CLUSTER_NAME=$CLUSTER_NAME
SLURM_PARTITION=$PARTITION
SLURM_NODES="${NODES[*]}"
SLURMCTLD_PORT=$CTLD_PORT
TESTBED_USERS="$TEST_USERS"
TESTBED_LOG_DIR=$TESTBED_LOG_DIR
TESTBED_STATE_DIR=$TESTBED_STATE_DIR
EOF
  )
  write_if_changed "$ENV_FILE" "$content" 0644 || true
}

# --- verification -------------------------------------------------------------------------

# JWT for USER (scontrol prints SLURM_JWT=<token>).
token_for() { # USER
  scontrol token username="$1" lifespan=600 | sed -n 's/^SLURM_JWT=//p'
}

rest_call() { # USER METHOD PATH [JSON_BODY]
  local user=$1 method=$2 path=$3 body=${4:-} token
  token=$(token_for "$user")
  [[ -n $token ]] || die "scontrol token username=$user gave no token"
  local args=(-sS --fail-with-body --max-time 30 --unix-socket "$REST_SOCKET"
    -X "$method" -H "X-SLURM-USER-NAME: $user" -H "X-SLURM-USER-TOKEN: $token")
  if [[ -n $body ]]; then
    args+=(-H 'Content-Type: application/json' --data-binary "$body")
  fi
  curl "${args[@]}" "http://localhost/slurm/$REST_VERSION$path"
}

verify() {
  local out

  log "check: srun -N2 hostname (root)"
  out=$(cd /tmp && timeout 120 srun -N2 --chdir=/tmp hostname) || die "srun -N2 hostname failed"
  printf '%s\n' "$out"
  [[ $(sort -u <<<"$out" | grep -Ec '^node[1-4]$') -eq 2 ]] ||
    die "srun -N2 hostname did not print two distinct nodeN hostnames"

  log "check: srun -N1 id -un as alice"
  out=$(cd /tmp && timeout 120 su alice -c 'srun -N1 --chdir=/tmp id -un') || die "srun as alice failed"
  printf '%s\n' "$out"
  [[ $out == alice ]] || die "srun as alice printed '$out', expected alice"

  log "check: GET /slurm/$REST_VERSION/nodes (JWT for root)"
  out=$(rest_call root GET /nodes | jq -r '.nodes[].name' | sort | tr '\n' ' ')
  printf '%s\n' "$out"
  [[ $out == "node1 node2 node3 node4 " ]] || die "REST /nodes returned '$out'"

  log "check: POST /slurm/$REST_VERSION/job/submit as alice"
  local outfile="/tmp/hpc-bridge-testbed-rest-check.%j.out" body job_id
  body=$(jq -cn --arg out "$outfile" '{
      script: "#!/bin/bash\nid -un\nhostname\n",
      job: {name: "testbed-rest-check", nodes: 1, current_working_directory: "/tmp",
            standard_output: $out, environment: {PATH: "/usr/bin:/bin"}}}')
  job_id=$(rest_call alice POST /job/submit "$body" | jq -r '.job_id')
  [[ $job_id =~ ^[0-9]+$ ]] || die "REST job submit returned no job_id"
  local i job state=""
  for ((i = 0; i < 60; i++)); do
    job=$(rest_call alice GET "/job/$job_id")
    state=$(jq -r '.jobs[0].job_state' <<<"$job")
    case $state in COMPLETED | FAILED | CANCELLED | TIMEOUT | NODE_FAIL | OUT_OF_MEMORY) break ;; esac
    sleep 1
  done
  local user file
  user=$(jq -r '.jobs[0].user_name' <<<"$job")
  file=${outfile//%j/$job_id}
  printf 'job %s: state=%s user=%s output=%s\n' "$job_id" "$state" "$user" \
    "$(tr '\n' ' ' <"$file" 2>/dev/null)"
  [[ $state == COMPLETED && $user == alice ]] || die "REST job $job_id: state=$state user=$user"
  [[ $(head -n1 "$file") == alice ]] || die "REST job $job_id output: $(cat "$file" 2>/dev/null)"
  rm -f "$file"

  log "all checks passed"
}

# --- subcommands ---------------------------------------------------------------------------

any_running() {
  local n
  ctld_pid >/dev/null && return 0
  rest_pid >/dev/null && return 0
  for n in "${NODES[@]}"; do slurmd_pid "$n" >/dev/null && return 0; done
  return 1
}

cmd_up() {
  require_root
  require_commands slurmctld slurmd slurmrestd scontrol sinfo srun munge munged unshare setpriv curl jq
  id slurm >/dev/null 2>&1 || die "user 'slurm' missing; run testbed/install.sh first"
  local u
  for u in $TEST_USERS; do
    id "$u" >/dev/null 2>&1 || die "test user '$u' missing; run testbed/install.sh first"
  done

  make_dirs
  ensure_jwt_key
  ensure_hosts
  if write_configs && any_running; then
    log "configuration changed: restarting the daemons"
    cmd_down
  fi

  start_munge
  start_slurmctld
  local n
  for n in "${NODES[@]}"; do start_slurmd "$n"; done
  wait_for_nodes
  start_rest
  write_env_file
  sinfo
  verify
  log "test bed is up; environment in $ENV_FILE"
}

cmd_down() {
  require_root
  stop_rest
  stop_slurmds
  stop_slurmctld
  rm -f "$ENV_FILE"
  log "down (munged left running)"
}

cmd_status() {
  local ok=0 pid n
  report() { # NAME PID_OR_EMPTY
    if [[ -n $2 ]]; then printf '%-14s running (pid %s)\n' "$1" "$2"; else
      printf '%-14s NOT running\n' "$1"
      ok=1
    fi
  }
  if munge_works; then report munged "$(pgrep -x munged | head -n1)"; else report munged ""; fi
  report slurmctld "$(ctld_pid || true)"
  for n in "${NODES[@]}"; do report "slurmd $n" "$(slurmd_pid "$n" || true)"; done
  report slurmrestd "$(rest_pid || true)"
  if rest_pid >/dev/null && rest_answers; then
    printf '%-14s answers on %s\n' slurmrestd "$REST_SOCKET"
  fi
  if ctld_answers; then
    sinfo
  else
    echo "slurmctld does not answer"
    ok=1
  fi
  return $ok
}

cmd_start_rest() {
  require_root
  start_rest
  log "slurmrestd answers on $REST_SOCKET (pid $(rest_pid))"
}

cmd_restart_ctld() {
  require_root
  stop_slurmctld
  start_slurmctld
  wait_for_nodes
  log "slurmctld restarted (pid $(ctld_pid))"
}

usage() {
  sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//' >&2
  exit 2
}

case ${1:-} in
  up) cmd_up ;;
  down) cmd_down ;;
  status) cmd_status ;;
  verify) require_root && verify ;;
  stop-rest) require_root && stop_rest && log "slurmrestd stopped" ;;
  start-rest) cmd_start_rest ;;
  restart-ctld) cmd_restart_ctld ;;
  *) usage ;;
esac
