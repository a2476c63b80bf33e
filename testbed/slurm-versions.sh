#!/usr/bin/env bash
# testbed/slurm-versions.sh - newer Slurm releases beside the 22.05 bed, one
# 4-node cluster per Debian suite, each in a debootstrap chroot.
#
#   bash testbed/slurm-versions.sh up [SUITE...]      # build (cached), start, verify
#   bash testbed/slurm-versions.sh down [SUITE...]    # stop the daemons, unmount
#   bash testbed/slurm-versions.sh status [SUITE...]  # exit 1 if a cluster is incomplete
#   bash testbed/slurm-versions.sh verify [SUITE...]  # only the checks `up` ends with
#   bash testbed/slurm-versions.sh purge SUITE        # down + delete the cached chroot
#
# SUITE: trixie (Slurm 24.11) and sid (Slurm 26.05); default both. Run as root,
# after testbed/install.sh (which installs debootstrap). Per suite:
#   * a root file system made once by `debootstrap --variant=minbase` and cached
#     in /var/cache/hpc-bridge-testbed/chroots/SUITE (later runs: seconds);
#   * its own authentication: trixie a munged (own key and socket inside the
#     chroot); sid auth/slurm (24.05+: /etc/slurm/slurm.key, no munge; clients
#     that cannot read the key sign through the daemons' sack.socket);
#   * one slurmctld and four slurmd (SUITE1..SUITE4), each slurmd in its own UTS + mount
#     namespace as in testbed/slurm.sh (hostname SUITEn, private /run/pmix and
#     /run/slurm: every slurmd of 25.05+ unlinks and binds /run/slurm/sack.socket,
#     and four doing it at once in one /run raced, one dying with "Address already
#     in use"; clients outside fall back to slurmctld's /run/slurmctld/sack.socket);
#   * slurmrestd as the chroot's slurm user on a UNIX socket, JWT auth;
#   * the host's /home and /tmp bind-mounted (a cluster's shared file system:
#     job output paths are the same inside and outside);
#   * /usr/local/bin/mpi-launch in the chroot runs this checkout's mpi_launch
#     with the chroot's python3.
# sid also has topology.yaml (25.05+): the switch tree as the cluster default and
# a topology/block topology for the partition "blocks".
# The host's munge cannot talk to a chroot's: run clients inside the chroot
# (`chroot DIR squeue --json`) or use REST. `up` writes
# /run/hpc-bridge-testbed/slurm-SUITE.env (KEY=VALUE) for the tests.
# Environment: TESTBED_DEBIAN_MIRROR (default: the first Debian URI of the
# host's apt sources), TESTBED_UP_TIMEOUT (seconds to wait for nodes, 60).
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/.." && pwd)
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$HERE/lib.sh"
LOG_TAG=slurm-versions

CACHE_DIR=/var/cache/hpc-bridge-testbed/chroots
ALL_SUITES=(trixie sid)
TEST_USERS="alice bob"
PARTITION=debug
BLOCK_PARTITION=blocks # sid only: the partition whose topology is topology/block
UP_TIMEOUT=${TESTBED_UP_TIMEOUT:-60}
# Inside each chroot:
IN_REST_SOCKET=/run/slurmrestd/rest.sock
IN_JWT_KEY=/etc/slurm/jwt.key
IN_MPI_LAUNCH=/usr/local/bin/mpi-launch
# python3-torch: Debian's own CPU build (2.6 in trixie, 2.14 in sid), ~120-145 MB
# to fetch: the chroots' Python (3.13, 3.14) is not the host venv's.
CHROOT_PACKAGES=(
  slurmctld slurmd slurm-client slurmrestd slurm-wlm-jwt-plugin munge
  openmpi-bin libpmix-dev python3 python3-mpi4py procps python3-torch python3-venv
)
# sid: MPICH from PyPI's wheels in /opt/mpich (Debian's Open MPI 6.0.0rc2 finds no
# route between two nodes sharing 127.0.0.1). The same pins as scripts/setup-python.sh.
MPICH_WHEELS=('mpich==5.0.2' 'mpi4py==4.1.2')
IN_MPICH=/opt/mpich

unset SLURM_JWT SLURM_CONF

# --- per-suite layout ----------------------------------------------------------

# Sets SUITE, DIR, CLUSTER, CTLD_PORT, NODE_BASE_PORT, NODES, NODE_RANGE, RUN, LOGS.
select_suite() { # SUITE
  SUITE=$1
  case $SUITE in
    trixie) CLUSTER=bridge2411 CTLD_PORT=18817 AUTH=munge ;;
    sid) CLUSTER=bridge2605 CTLD_PORT=19817 AUTH=slurm ;;
    *) die "unknown suite '$SUITE' (known: ${ALL_SUITES[*]})" ;;
  esac
  NODE_BASE_PORT=$((CTLD_PORT + 1))
  DIR=$CACHE_DIR/$SUITE
  NODES=("${SUITE}1" "${SUITE}2" "${SUITE}3" "${SUITE}4")
  NODE_RANGE="${SUITE}[1-4]"
  RUN=$TESTBED_RUN_DIR/$SUITE
  LOGS=$TESTBED_LOG_DIR/$SUITE
  ENV_FILE=$TESTBED_RUN_DIR/slurm-$SUITE.env
}

in_chroot() { chroot "$DIR" "$@"; }
chroot_uid() { awk -F: -v u="$1" '$1 == u {print $3}' "$DIR/etc/passwd"; }
chroot_gid() { awk -F: -v u="$1" '$1 == u {print $4}' "$DIR/etc/passwd"; }

debian_mirror() {
  if [[ -n ${TESTBED_DEBIAN_MIRROR:-} ]]; then
    printf '%s\n' "$TESTBED_DEBIAN_MIRROR"
    return
  fi
  local url
  url=$(cat /etc/apt/sources.list.d/*.sources /etc/apt/sources.list 2>/dev/null |
    grep -Eo '(URIs:[[:space:]]*|^deb[[:space:]]+)[a-z]+://[^[:space:]]+' |
    grep -Eo '[a-z]+://[^[:space:]]+' | grep -v -- '-security' | head -n1) || true
  [[ -n $url ]] || die "no Debian mirror in the host's apt sources; set TESTBED_DEBIAN_MIRROR"
  printf '%s\n' "$url"
}

# --- mounts -----------------------------------------------------------------------

mount_once() { # TARGET MOUNT-ARGS...
  local target=$1
  shift
  mountpoint -q "$target" && return 0
  mkdir -p "$target"
  mount "$@" "$target"
}

# The mounts the daemons and clients need; idempotent.
mount_chroot() { # ROOT [full]
  local root=$1
  mount_once "$root/proc" -t proc proc
  mount_once "$root/dev" --bind /dev
  mount_once "$root/dev/pts" --bind /dev/pts
  if mountpoint -q /dev/shm; then mount_once "$root/dev/shm" --bind /dev/shm; fi
  if [[ ${2:-} == full ]]; then
    # hwloc and Open MPI's interface discovery read /sys.
    mount_once "$root/sys" --bind /sys
    mount_once "$root/home" --bind /home
    mount_once "$root/tmp" --bind /tmp
  fi
}

# Unmount everything at or below ROOT, deepest first.
unmount_chroot() { # ROOT
  local root=$1 m
  while read -r m; do
    [[ -n $m ]] || continue
    umount "$m" 2>/dev/null || umount -l "$m"
  done < <(awk -v r="$root" '$2 == r || index($2, r "/") == 1 {print $2}' /proc/self/mounts | sort -r)
}

# --- building the chroot (once; cached) -----------------------------------------------

build_chroot() {
  [[ -f $DIR/.hpc-bridge-ready ]] && return 0
  local partial=$DIR.partial start=$SECONDS mirror
  mirror=$(debian_mirror)
  if [[ ! -f $partial/.hpc-bridge-debootstrap ]]; then
    require_commands debootstrap
    unmount_chroot "$partial"
    rm -rf --one-file-system "$partial"
    log "debootstrap $SUITE from $mirror (once; cached in $DIR)"
    debootstrap --variant=minbase "$SUITE" "$partial" "$mirror" >"$TESTBED_LOG_DIR/debootstrap-$SUITE.log" 2>&1 || {
      show_logs "$TESTBED_LOG_DIR/debootstrap-$SUITE.log"
      die "debootstrap $SUITE failed"
    }
    touch "$partial/.hpc-bridge-debootstrap"
  fi
  log "installing Slurm into the $SUITE chroot"
  printf '#!/bin/sh\n# hpc-bridge testbed: no daemons from package scripts\nexit 101\n' >"$partial/usr/sbin/policy-rc.d"
  chmod 755 "$partial/usr/sbin/policy-rc.d"
  cp /etc/resolv.conf "$partial/etc/resolv.conf" 2>/dev/null || true
  mount_chroot "$partial"
  # sid's Release file may read as expired by this machine's clock.
  local rc=0
  {
    chroot "$partial" apt-get -q -o Acquire::Check-Valid-Until=false update &&
      DEBIAN_FRONTEND=noninteractive chroot "$partial" apt-get install -y -q \
        --no-install-recommends "${CHROOT_PACKAGES[@]}" &&
      chroot "$partial" apt-get clean
  } >"$TESTBED_LOG_DIR/chroot-install-$SUITE.log" 2>&1 || rc=$?
  unmount_chroot "$partial"
  if ((rc != 0)); then
    show_logs "$TESTBED_LOG_DIR/chroot-install-$SUITE.log"
    die "installing Slurm in the $SUITE chroot failed"
  fi
  touch "$partial/.hpc-bridge-ready"
  mv "$partial" "$DIR"
  log "$SUITE chroot built in $((SECONDS - start))s ($(du -sh --one-file-system "$DIR" | cut -f1))"
}

# --- configuration (written on every `up`) -----------------------------------------------

slurm_conf() {
  cat <<EOF
# Written by hpc-bridge testbed/slurm-versions.sh - do not edit, re-run the script.
ClusterName=$CLUSTER
SlurmctldHost=localhost
SlurmctldPort=$CTLD_PORT
SlurmUser=root
SlurmdUser=root
AuthType=auth/$AUTH
CredType=cred/$AUTH
AuthAltTypes=auth/jwt
AuthAltParameters=jwt_key=$IN_JWT_KEY
StateSaveLocation=/var/lib/hpc-bridge/slurmctld
SlurmdSpoolDir=/var/lib/hpc-bridge/spool/slurmd.%n
SlurmctldPidFile=/run/hpc-bridge/slurmctld.pid
SlurmdPidFile=/run/hpc-bridge/slurmd.%n.pid
SlurmctldLogFile=/var/log/hpc-bridge/slurmctld.log
SlurmdLogFile=/var/log/hpc-bridge/slurmd.%n.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
TopologyPlugin=topology/tree
SchedulerType=sched/backfill
SchedulerParameters=bf_interval=5,sched_interval=5
MailProg=/bin/true
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
MinJobAge=3600
ReturnToService=2
SlurmdParameters=config_overrides
SlurmctldTimeout=30
SlurmdTimeout=30
InactiveLimit=0
KillWait=5
MessageTimeout=10
Waittime=0
NodeName=$NODE_RANGE NodeHostname=localhost NodeAddr=127.0.0.1 Port=[$NODE_BASE_PORT-$((NODE_BASE_PORT + 3))] CPUs=2 RealMemory=2000 State=UNKNOWN
PartitionName=$PARTITION Nodes=$NODE_RANGE Default=YES MaxTime=INFINITE State=UP
EOF
  if [[ $SUITE == sid ]]; then
    echo "PartitionName=$BLOCK_PARTITION Nodes=$NODE_RANGE MaxTime=INFINITE State=UP Topology=blocks"
  fi
}

topology_conf() {
  cat <<EOF
# Written by hpc-bridge testbed/slurm-versions.sh
SwitchName=leaf1 Nodes=${SUITE}[1-2]
SwitchName=leaf2 Nodes=${SUITE}[3-4]
SwitchName=spine Switches=leaf[1-2]
EOF
}

# 25.05+ (sid): topology.yaml, which topology.conf gives way to. Two topologies:
# the same switch tree as the cluster default, and topology/block for the
# partition $BLOCK_PARTITION: one node per base block, aggregated by 2 and 4, in
# an order that pairs other nodes than the leaf switches do (b1+b2 = SUITE1+SUITE3),
# so that a test tells which topology placed a job.
topology_yaml() {
  cat <<EOF
# Written by hpc-bridge testbed/slurm-versions.sh
- topology: tree
  cluster_default: true
  tree:
    switches:
      - switch: spine
        children: leaf[1-2]
      - switch: leaf1
        nodes: ${SUITE}[1-2]
      - switch: leaf2
        nodes: ${SUITE}[3-4]
- topology: blocks
  cluster_default: false
  block:
    block_sizes: [1, 2, 4]
    blocks:
      - block: b1
        nodes: ${SUITE}1
      - block: b2
        nodes: ${SUITE}3
      - block: b3
        nodes: ${SUITE}2
      - block: b4
        nodes: ${SUITE}4
EOF
}

chroot_hosts() {
  printf '127.0.0.1 localhost\n127.0.0.1 %s\n' "${NODES[*]}"
  printf '::1 localhost ip6-localhost ip6-loopback\n'
}

# The host's users with the host's uids, sharing the host's /home.
ensure_chroot_users() {
  local u uid gid home group
  for u in $TEST_USERS; do
    IFS=: read -r _ _ uid gid _ home _ < <(getent passwd "$u") || die "user $u missing on the host"
    group=$(getent group "$gid" | cut -d: -f1)
    if ! grep -q "^$group:" "$DIR/etc/group"; then in_chroot groupadd -g "$gid" "$group"; fi
    if ! grep -q "^$u:" "$DIR/etc/passwd"; then
      in_chroot useradd -u "$uid" -g "$gid" -d "$home" -M -s /bin/bash "$u"
    fi
  done
}

configure_chroot() {
  install -d -m 0755 "$RUN" "$LOGS" "$DIR/etc/slurm" "$DIR/run/hpc-bridge" \
    "$DIR/var/log/hpc-bridge" "$DIR/var/lib/hpc-bridge/slurmctld"
  local n changed=1
  for n in "${NODES[@]}"; do install -d -m 0755 "$DIR/var/lib/hpc-bridge/spool/slurmd.$n"; done
  write_if_changed "$DIR/etc/hosts" "$(chroot_hosts)" && changed=0
  write_if_changed "$DIR/etc/slurm/slurm.conf" "$(slurm_conf)" && changed=0
  write_if_changed "$DIR/etc/slurm/topology.conf" "$(topology_conf)" && changed=0
  if [[ $SUITE == sid ]]; then
    write_if_changed "$DIR/etc/slurm/topology.yaml" "$(topology_yaml)" && changed=0
  elif [[ -e $DIR/etc/slurm/topology.yaml ]]; then
    rm -f "$DIR/etc/slurm/topology.yaml"
    changed=0
  fi
  write_if_changed "$DIR/etc/slurm/cgroup.conf" "CgroupPlugin=disabled" && changed=0
  write_if_changed "$DIR/etc/slurm/mpi.conf" "PMIxCliTmpDirBase=/run/pmix" && changed=0
  # The four "hosts" share one network namespace: Open MPI 5 must use loopback
  # (by default it leaves lo out and finds no route between the ranks).
  write_if_changed "$DIR/etc/openmpi/openmpi-mca-params.conf" "$(printf "btl_base_warn_component_unused = 0\nbtl_tcp_if_include = lo")" && changed=0
  ensure_chroot_users
  if [[ ! -s $DIR$IN_JWT_KEY ]]; then
    (umask 077 && head -c 32 /dev/urandom >"$DIR$IN_JWT_KEY")
  fi
  chmod 0600 "$DIR$IN_JWT_KEY"
  if [[ $AUTH == munge ]]; then
    if [[ ! -s $DIR/etc/munge/munge.key ]]; then in_chroot mungekey --create --keyfile=/etc/munge/munge.key; fi
    in_chroot chown munge:munge /etc/munge/munge.key
    chmod 0600 "$DIR/etc/munge/munge.key"
  else
    # auth/slurm (24.05+): one shared key for every daemon, the SlurmUser's only.
    if [[ ! -s $DIR/etc/slurm/slurm.key ]]; then
      (umask 077 && head -c 1024 /dev/urandom >"$DIR/etc/slurm/slurm.key")
    fi
    chmod 0600 "$DIR/etc/slurm/slurm.key"
  fi
  # This checkout's mpi_launch (stdlib only) for the chroot's python3.
  rm -rf "$DIR/opt/hpc-bridge"
  install -d "$DIR/opt/hpc-bridge"
  cp -r "$REPO/mpi_launch" "$DIR/opt/hpc-bridge/"
  find "$DIR/opt/hpc-bridge" -name __pycache__ -prune -exec rm -rf {} +
  write_if_changed "$DIR$IN_MPI_LAUNCH" \
    "$(printf '#!/bin/sh\nPYTHONPATH=/opt/hpc-bridge exec python3 -m mpi_launch "$@"')" 0755 || true
  return $changed
}

ensure_host_names() {
  if ! grep -Eq "^127\.0\.0\.1([[:space:]]+[^#[:space:]]+)*[[:space:]]+${NODES[0]}([[:space:]]|#|$)" /etc/hosts; then
    log "adding ${NODES[*]} to /etc/hosts"
    printf '127.0.0.1 %s # hpc-bridge testbed %s\n' "${NODES[*]}" "$SUITE" >>/etc/hosts
  fi
}

# --- daemons ---------------------------------------------------------------------------

pid_of() { pidfile_pid "$RUN/$1.pid" "$2"; } # NAME COMM

munge_works() { in_chroot sh -c 'munge -n | unmunge' >/dev/null 2>&1; }
ctld_answers() { in_chroot scontrol ping 2>/dev/null | grep -q 'is UP'; }

start_munge() {
  [[ $AUTH == munge ]] || return 0
  munge_works && return 0
  log "$SUITE: starting munged"
  local uid gid i
  uid=$(chroot_uid munge) gid=$(chroot_gid munge)
  install -d -o "$uid" -g "$gid" -m 0755 "$DIR/run/munge"
  install -d -o "$uid" -g "$gid" -m 0700 "$DIR/var/lib/munge" "$DIR/var/log/munge"
  detach "$LOGS/munged.out" chroot --userspec="$uid:$gid" "$DIR" /usr/sbin/munged -F --force
  printf '%s\n' "$DETACHED_PID" >"$RUN/munged.pid"
  for ((i = 0; i < 50; i++)); do
    munge_works && return 0
    sleep 0.2
  done
  show_logs "$LOGS/munged.out" "$DIR/var/log/munge/munged.log"
  die "$SUITE: munged does not work"
}

start_ctld() {
  if ! pid_of slurmctld slurmctld >/dev/null; then
    log "$SUITE: starting slurmctld"
    detach "$LOGS/slurmctld.out" chroot "$DIR" /usr/sbin/slurmctld -D -i
    printf '%s\n' "$DETACHED_PID" >"$RUN/slurmctld.pid"
  fi
  local i
  for ((i = 0; i < 150; i++)); do
    ctld_answers && return 0
    pid_of slurmctld slurmctld >/dev/null || break
    sleep 0.2
  done
  show_logs "$LOGS/slurmctld.out" "$DIR/var/log/hpc-bridge/slurmctld.log"
  die "$SUITE: slurmctld does not answer"
}

start_slurmd() { # NODE
  local node=$1
  pid_of "slurmd.$node" slurmd >/dev/null && return 0
  log "$SUITE: starting slurmd $node"
  rm -f "$DIR/run/slurm/sack.socket" # an older bed's, shared: clients would try it first
  # shellcheck disable=SC2016 # expanded by the inner bash
  detach "$LOGS/slurmd.$node.out" unshare --uts --mount --propagation private \
    bash -c 'hostname "$2" && mkdir -p "$1/run/pmix" "$1/run/slurm" &&
             mount -t tmpfs -o mode=1777 tmpfs "$1/run/pmix" &&
             mount -t tmpfs -o mode=0755 tmpfs "$1/run/slurm" &&
             exec chroot "$1" /usr/sbin/slurmd -D -N "$2"' slurmd-ns "$DIR" "$node"
  printf '%s\n' "$DETACHED_PID" >"$RUN/slurmd.$node.pid"
}

wait_for_nodes() {
  local deadline=$((SECONDS + UP_TIMEOUT)) node state ready
  while true; do
    ready=0
    while read -r node state; do
      case $state in
        idle | mixed | allocated | completing) ready=$((ready + 1)) ;;
        down | drained | draining | drain | fail)
          in_chroot scontrol update nodename="$node" state=resume >/dev/null 2>&1 || true ;;
        *) ;;
      esac
    done < <(in_chroot sinfo -h -N -p "$PARTITION" -o '%N %T' 2>/dev/null | sort -u)
    ((ready == ${#NODES[@]})) && return 0
    if ((SECONDS >= deadline)); then
      in_chroot sinfo -N >&2 || true
      local logs=("$DIR/var/log/hpc-bridge/slurmctld.log") n
      for n in "${NODES[@]}"; do logs+=("$LOGS/slurmd.$n.out" "$DIR/var/log/hpc-bridge/slurmd.$n.log"); done
      show_logs "${logs[@]}"
      die "$SUITE: the nodes did not come up"
    fi
    sleep 0.5
  done
}

rest_answers() {
  local code
  code=$(curl -s -o /dev/null -w '%{http_code}' --max-time 5 \
    --unix-socket "$DIR$IN_REST_SOCKET" http://localhost/openapi/v3 2>/dev/null) || true
  [[ -n $code && $code != 000 ]]
}

start_rest() {
  if ! pid_of slurmrestd slurmrestd >/dev/null; then
    log "$SUITE: starting slurmrestd on $DIR$IN_REST_SOCKET"
    local uid gid
    uid=$(chroot_uid slurm) gid=$(chroot_gid slurm)
    [[ -n $uid ]] || die "$SUITE: the chroot has no slurm user"
    install -d -o "$uid" -g "$gid" -m 0755 "$DIR/run/slurmrestd"
    rm -f "$DIR$IN_REST_SOCKET"
    # -s openapi/slurmctld: 24.11's default also loads openapi/slurmdbd and
    # exits without slurmdbd. slurmrestd refuses to run as root / SlurmUser.
    # SLURM_BITSTR_LEN=0: an array's pending tasks listed whole (testbed/slurm.sh).
    detach "$LOGS/slurmrestd.out" env SLURM_JWT=daemon SLURM_BITSTR_LEN=0 \
      chroot --userspec="$uid:$gid" "$DIR" \
      /usr/sbin/slurmrestd -s openapi/slurmctld -a rest_auth/jwt "unix:$IN_REST_SOCKET"
    printf '%s\n' "$DETACHED_PID" >"$RUN/slurmrestd.pid"
  fi
  local i
  for ((i = 0; i < 100; i++)); do
    rest_answers && return 0
    pid_of slurmrestd slurmrestd >/dev/null || break
    sleep 0.2
  done
  show_logs "$LOGS/slurmrestd.out"
  die "$SUITE: slurmrestd does not answer"
}

# A chroot cached before a package joined CHROOT_PACKAGES gets it now.
ensure_packages() {
  local missing=() p
  for p in "${CHROOT_PACKAGES[@]}"; do
    in_chroot dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' ||
      missing+=("$p")
  done
  ((${#missing[@]})) || return 0
  log "$SUITE: installing ${missing[*]} into the cached chroot"
  {
    in_chroot apt-get -q -o Acquire::Check-Valid-Until=false update &&
      DEBIAN_FRONTEND=noninteractive in_chroot apt-get install -y -q \
        --no-install-recommends "${missing[@]}" &&
      in_chroot apt-get clean
  } >"$TESTBED_LOG_DIR/chroot-install-$SUITE.log" 2>&1 || {
    show_logs "$TESTBED_LOG_DIR/chroot-install-$SUITE.log"
    die "$SUITE: installing ${missing[*]} failed"
  }
}

# sid: /opt/mpich, a venv with MPICH and mpi4py. The wheels are fetched by the host's
# pip (this checkout's .venv, which scripts/setup-python.sh made; the chroot cannot
# verify the package index's certificate) for the chroot's Python, and installed
# offline in the chroot.
ensure_mpich() {
  [[ $SUITE == sid ]] || return 0
  [[ -x $DIR$IN_MPICH/bin/mpiexec ]] && return 0
  local pip=$REPO/.venv/bin/pip pyver wheels=$DIR/var/cache/hpc-bridge-wheels
  [[ -x $pip ]] || die "$SUITE: no $pip to fetch MPICH with: run scripts/setup-python.sh first"
  pyver=$(in_chroot python3 -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')
  log "$SUITE: MPICH into $IN_MPICH (${MPICH_WHEELS[*]}, Python $pyver)"
  install -d "$wheels"
  {
    "$pip" download --quiet --no-deps --only-binary=:all: --python-version "$pyver" \
      --platform manylinux_2_28_x86_64 --platform manylinux_2_5_x86_64 \
      --platform manylinux1_x86_64 -d "$wheels" "${MPICH_WHEELS[@]}" &&
      in_chroot python3 -m venv "$IN_MPICH" &&
      in_chroot "$IN_MPICH/bin/pip" install --quiet --no-index \
        --find-links /var/cache/hpc-bridge-wheels "${MPICH_WHEELS[@]}"
  } >"$TESTBED_LOG_DIR/chroot-mpich-$SUITE.log" 2>&1 || {
    show_logs "$TESTBED_LOG_DIR/chroot-mpich-$SUITE.log"
    die "$SUITE: installing MPICH failed"
  }
}

stop_all() {
  local name comm pid
  for name in slurmrestd "${NODES[@]/#/slurmd.}" slurmctld munged; do
    comm=${name%%.*}
    if pid=$(pid_of "$name" "$comm"); then stop_pid "$pid" "$comm" 20 quiet; fi
    rm -f "$RUN/$name.pid"
  done
}

# --- REST ----------------------------------------------------------------------------

token_for() { in_chroot scontrol token username="$1" lifespan=600 | sed -n 's/^SLURM_JWT=//p'; }

rest_call() { # USER METHOD PATH [BODY]
  local user=$1 method=$2 path=$3 body=${4:-} token
  token=$(token_for "$user")
  [[ -n $token ]] || die "$SUITE: no token for $user"
  local args=(-sS --fail-with-body --max-time 30 --unix-socket "$DIR$IN_REST_SOCKET" -X "$method"
    -H "X-SLURM-USER-NAME: $user" -H "X-SLURM-USER-TOKEN: $token")
  [[ -z $body ]] || args+=(-H 'Content-Type: application/json' --data-binary "$body")
  curl "${args[@]}" "http://localhost$path"
}

# The /slurm/vX API versions slurmrestd serves, oldest first.
served_versions() {
  rest_call root GET /openapi/v3 | jq -r '.paths | keys[]' |
    sed -n 's#^/slurm/\(v[0-9.]*\)/.*#\1#p' | sort -u -V | tr '\n' ' ' | sed 's/ $//'
}

slurm_version() { in_chroot sinfo --version | awk '{print $2}'; }

write_env_file() {
  local versions=$1
  write_if_changed "$ENV_FILE" "$(
    cat <<EOF
# hpc-bridge Slurm $SUITE test bed - written by testbed/slurm-versions.sh up
SLURM_SUITE=$SUITE
SLURM_VERSION=$(slurm_version)
SLURM_CHROOT=$DIR
SLURMRESTD_SOCKET=$DIR$IN_REST_SOCKET
SLURM_REST_VERSIONS="$versions"
SLURM_JWT_KEY=$DIR$IN_JWT_KEY
SLURM_CLUSTER_NAME=$CLUSTER
SLURM_PARTITION=$PARTITION
SLURM_BLOCK_PARTITION=$([[ $SUITE == sid ]] && echo "$BLOCK_PARTITION")
SLURM_AUTH=auth/$AUTH
SLURM_MPICH_PYTHON=$([[ $SUITE == sid ]] && echo "$IN_MPICH/bin/python")
SLURM_NODES="${NODES[*]}"
SLURMCTLD_PORT=$CTLD_PORT
SLURM_MPI_LAUNCH=$IN_MPI_LAUNCH
TESTBED_USERS="$TEST_USERS"
EOF
  )" 0644 || true
}

verify() {
  local out versions newest
  log "$SUITE: check srun -N2 hostname"
  out=$(timeout 120 chroot "$DIR" srun -N2 --chdir=/tmp hostname) || die "$SUITE: srun failed"
  [[ $(sort -u <<<"$out" | grep -c "^$SUITE[1-4]$") -eq 2 ]] || die "$SUITE: srun printed '$out'"
  log "$SUITE: check srun as alice"
  out=$(timeout 120 chroot --userspec=alice:alice "$DIR" srun -N1 --chdir=/tmp id -un) ||
    die "$SUITE: srun as alice failed"
  [[ $out == alice ]] || die "$SUITE: srun as alice printed '$out'"
  versions=$(served_versions)
  newest=${versions##* }
  log "$SUITE: slurmrestd serves $versions"
  [[ $newest == v0.0.* ]] || die "$SUITE: no /slurm/v0.0.x API served"
  log "$SUITE: check POST /slurm/$newest/job/submit as alice"
  local body job_id state i outfile=/tmp/hpc-bridge-testbed-$SUITE.%j.out
  body=$(jq -cn --arg out "$outfile" '{job: {name: "testbed-rest-check", partition: "debug",
      current_working_directory: "/tmp", standard_output: $out,
      environment: ["PATH=/usr/bin:/bin"], script: "#!/bin/bash\nid -un\n"}}')
  job_id=$(rest_call alice POST "/slurm/$newest/job/submit" "$body" | jq -r .job_id)
  [[ $job_id =~ ^[0-9]+$ ]] || die "$SUITE: REST submit gave no job id"
  for ((i = 0; i < 120; i++)); do
    state=$(rest_call alice GET "/slurm/$newest/job/$job_id" | jq -r '.jobs[0].job_state | if type == "array" then .[0] else . end')
    [[ $state == COMPLETED || $state == FAILED || $state == CANCELLED ]] && break
    sleep 0.5
  done
  out=$(cat "${outfile//%j/$job_id}" 2>/dev/null || true)
  rm -f "${outfile//%j/$job_id}"
  [[ $state == COMPLETED && $out == alice ]] || die "$SUITE: REST job $job_id state=$state output='$out'"
  write_env_file "$versions"
  log "$SUITE: all checks passed (Slurm $(slurm_version))"
}

# --- subcommands -------------------------------------------------------------------------

cmd_up() {
  require_root
  require_commands curl jq unshare chroot
  install -d -m 0755 "$CACHE_DIR" "$TESTBED_RUN_DIR" "$TESTBED_LOG_DIR"
  local start=$SECONDS
  build_chroot
  mount_chroot "$DIR" full
  ensure_packages
  ensure_mpich
  if configure_chroot && pid_of slurmctld slurmctld >/dev/null; then
    log "$SUITE: configuration changed: restarting the daemons"
    stop_all
  fi
  ensure_host_names
  start_munge
  start_ctld
  local n
  for n in "${NODES[@]}"; do start_slurmd "$n"; done
  wait_for_nodes
  start_rest
  verify
  log "$SUITE: up in $((SECONDS - start))s; environment in $ENV_FILE"
}

cmd_down() {
  require_root
  stop_all
  rm -f "$ENV_FILE"
  unmount_chroot "$DIR"
  log "$SUITE: down"
}

cmd_status() {
  local ok=0 name comm pid
  printf '== %s (%s)\n' "$SUITE" "$DIR"
  local names=(slurmctld "${NODES[@]/#/slurmd.}" slurmrestd)
  [[ $AUTH != munge ]] || names=(munged "${names[@]}")
  for name in "${names[@]}"; do
    comm=${name%%.*}
    if pid=$(pid_of "$name" "$comm"); then printf '%-16s running (pid %s)\n' "$name" "$pid"; else
      printf '%-16s NOT running\n' "$name"
      ok=1
    fi
  done
  if [[ -d $DIR ]] && ctld_answers; then in_chroot sinfo; else
    echo "slurmctld does not answer"
    ok=1
  fi
  return $ok
}

cmd_purge() {
  require_root
  cmd_down
  unmount_chroot "$DIR.partial"
  if awk -v r="$DIR" 'index($2, r) == 1 {found=1} END {exit !found}' /proc/self/mounts; then
    die "$SUITE: something is still mounted below $DIR; not deleting"
  fi
  rm -rf --one-file-system "$DIR" "$DIR.partial"
  log "$SUITE: chroot deleted"
}

usage() {
  sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//' >&2
  exit 2
}

action=${1:-}
shift || true
suites=("$@")
((${#suites[@]} > 0)) || suites=("${ALL_SUITES[@]}")
[[ $action == purge && $# -eq 0 ]] && die "purge needs a SUITE"
rc=0
for s in "${suites[@]}"; do
  select_suite "$s"
  case $action in
    up) cmd_up ;;
    down) cmd_down ;;
    status) cmd_status || rc=1 ;;
    verify) require_root && verify ;;
    purge) cmd_purge ;;
    *) usage ;;
  esac
done
exit $rc
