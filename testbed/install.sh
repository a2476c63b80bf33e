#!/usr/bin/env bash
# testbed/install.sh - install everything the hpc-bridge test bed needs.
#
# Target: a Debian 12 (bookworm) machine, run as root (CI runs it from a clean
# clone with CI=true). Idempotent: a second run installs nothing and only
# re-checks the test users.
#
#   bash testbed/install.sh
#
# What it does:
#   * apt-get install the Slurm 22.05 daemons + clients, munge, the JWT auth
#     plugin, Open MPI, mosquitto and a few basic tools (apt-get update only
#     when something is actually missing);
#   * keeps the packages' own init scripts from starting daemons with their
#     default configs while installing (testbed/slurm.sh and
#     testbed/mosquitto.sh start everything themselves, with our configs);
#   * creates the ordinary test users alice and bob.
set -euo pipefail

export DEBIAN_FRONTEND=noninteractive

# Debian packages of the test bed. MPICH is deliberately left out: it competes
# with Open MPI for the mpirun/mpicc alternatives.
PACKAGES=(
  slurmctld slurmd slurm-client slurmrestd slurm-wlm-jwt-plugin
  munge
  openmpi-bin libopenmpi-dev
  libpmix-dev # unversioned libpmix.so, dlopen()ed by slurm's mpi/pmix plugin
  mosquitto mosquitto-clients
  curl jq iproute2 util-linux procps
  debootstrap # testbed/slurm-versions.sh: chroots with newer Slurm releases
  # testbed/k8s: PKI (openssl), build timings (bc), HTTPS module downloads by the
  # Go toolchain (ca-certificates). Go itself (1.26, see testbed/k8s/versions.env)
  # is not a Debian bookworm package and must already be installed.
  openssl bc ca-certificates
  # packaging/systemd tests: systemd-analyze, systemd-socket-activate (no systemd as
  # PID 1 needed; policy-rc.d keeps the install from starting anything).
  systemd
)

TEST_USERS=(alice bob)

log() { printf '[install] %s\n' "$*" >&2; }

if [[ $(id -u) -ne 0 ]]; then
  log "must run as root"
  exit 1
fi

# --- packages ---------------------------------------------------------------

# Print the packages that are not installed yet.
missing_packages() {
  local pkg
  for pkg in "${PACKAGES[@]}"; do
    if [[ $(dpkg-query -W -f='${db:Status-Status}' "$pkg" 2>/dev/null || true) != installed ]]; then
      printf '%s\n' "$pkg"
    fi
  done
}

# Wait for another apt/dpkg run (e.g. unattended upgrades) to finish.
wait_for_apt() {
  local i
  for ((i = 0; i < 300; i++)); do
    if ! pgrep -x apt-get >/dev/null && ! pgrep -x dpkg >/dev/null && ! pgrep -x apt >/dev/null; then
      return 0
    fi
    ((i % 15 == 0)) && log "waiting for another apt/dpkg process to finish..."
    sleep 2
  done
  log "another apt/dpkg process is still running after 10 minutes"
  return 1
}

# While installing, forbid maintainer scripts to start services (the classic
# policy-rc.d trick; exit code 101 = "action forbidden"). Without systemd as
# PID 1, postinst would otherwise run /etc/init.d/{munge,mosquitto,...} start
# and leave daemons running with default configs (mosquitto on port 1883...).
# An existing policy-rc.d is left untouched.
POLICY_RC=/usr/sbin/policy-rc.d
created_policy_rc=false
remove_policy_rc() {
  if [[ $created_policy_rc == true ]]; then
    rm -f "$POLICY_RC"
  fi
}
trap remove_policy_rc EXIT

# Belt and braces for machines that had a policy-rc.d allowing starts (or
# none we could install): if installing made a package's init script start
# its daemon with the default config, stop it again. Only daemons that were
# NOT running before the install are stopped, so a test bed that is already
# up is never touched. munged is left alone (same key and socket as ours).
DEFAULT_DAEMONS=(mosquitto slurmctld slurmd)
default_daemons_running() {
  local d
  for d in "${DEFAULT_DAEMONS[@]}"; do
    if pgrep -x "$d" >/dev/null; then printf '%s ' "$d"; fi
  done
}
stop_new_default_daemons() { # RUNNING_BEFORE
  local d
  for d in "${DEFAULT_DAEMONS[@]}"; do
    if [[ " $1 " != *" $d "* ]] && pgrep -x "$d" >/dev/null && [[ -x /etc/init.d/$d ]]; then
      log "stopping $d, started by its package with the default config"
      "/etc/init.d/$d" stop >/dev/null 2>&1 || true
    fi
  done
}

mapfile -t missing < <(missing_packages)
if ((${#missing[@]} > 0)); then
  log "installing: ${missing[*]}"
  wait_for_apt
  if [[ ! -e $POLICY_RC ]]; then
    printf '#!/bin/sh\n# temporary, written by hpc-bridge testbed/install.sh\nexit 101\n' >"$POLICY_RC"
    chmod 755 "$POLICY_RC"
    created_policy_rc=true
  fi
  running_before=$(default_daemons_running)
  # Refresh the package lists only when there are none (fresh image) or when
  # installing from the present ones fails (stale lists).
  if ! compgen -G '/var/lib/apt/lists/*_Packages*' >/dev/null; then
    apt-get update -q
  fi
  if ! apt-get install -y -q --no-install-recommends "${missing[@]}"; then
    log "apt-get install failed; running apt-get update and retrying"
    apt-get update -q
    apt-get install -y -q --no-install-recommends "${missing[@]}"
  fi
  remove_policy_rc
  created_policy_rc=false
  stop_new_default_daemons "$running_before"
else
  log "all packages already installed"
fi

# The munge package creates the key in postinst; make sure it exists.
if [[ ! -s /etc/munge/munge.key ]]; then
  log "creating /etc/munge/munge.key"
  mungekey --create --keyfile=/etc/munge/munge.key
  chown munge:munge /etc/munge/munge.key
  chmod 0600 /etc/munge/munge.key
fi

# The slurmrestd package creates the 'slurm' system user; make sure.
if ! id slurm >/dev/null 2>&1; then
  log "creating system user slurm"
  useradd --system --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin slurm
fi

# --- test users ---------------------------------------------------------------

for user in "${TEST_USERS[@]}"; do
  if id "$user" >/dev/null 2>&1; then
    continue
  fi
  log "creating test user $user"
  useradd --create-home --shell /bin/bash "$user"
done

log "done"
