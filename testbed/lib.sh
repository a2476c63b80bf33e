# testbed/lib.sh - helpers shared by testbed/slurm.sh and testbed/mosquitto.sh.
# Sourced, not executed.
# shellcheck shell=bash disable=SC2034 # variables are used by the sourcing scripts

TESTBED_STATE_DIR=/var/lib/hpc-bridge-testbed # persistent state (keys, spool, state save)
TESTBED_LOG_DIR=/var/log/hpc-bridge-testbed   # every daemon's log
TESTBED_RUN_DIR=/run/hpc-bridge-testbed       # pid files, sockets, testbed.env

log() { printf '[%s] %s\n' "${LOG_TAG:-testbed}" "$*" >&2; }
die() {
  log "ERROR: $*"
  exit 1
}

require_root() {
  [[ $(id -u) -eq 0 ]] || die "must run as root"
}

require_commands() { # CMD...
  local c
  for c in "$@"; do
    command -v "$c" >/dev/null || die "'$c' not found; run testbed/install.sh first"
  done
}

# True if PID is a live (not zombie) process whose command name is NAME
# (or NAME-wlm: Debian's alternatives names, e.g. slurmd-wlm).
pid_is() { # PID NAME
  local pid=$1 name=$2 comm state
  [[ $pid =~ ^[0-9]+$ ]] || return 1
  comm=$(cat "/proc/$pid/comm" 2>/dev/null) || return 1
  # Field 3 of /proc/PID/stat is the state; "Z" = zombie, i.e. already dead.
  # (comm may contain spaces, so take what follows the last ')'.)
  state=$(sed 's/.*) //' "/proc/$pid/stat" 2>/dev/null | cut -d' ' -f1) || return 1
  [[ $state != Z && ($comm == "$name" || $comm == "$name-wlm") ]]
}

# Print the pid stored in PIDFILE if that process is alive and is NAME.
# Whether the process in PIDFILE is alive (not a zombie), whatever it is called yet: a
# process just started by detach is bash, setsid, env or setpriv for a moment before it
# execs the daemon, and pidfile_pid would call it gone.
pidfile_alive() { # PIDFILE
  local pid state
  pid=$(cat "$1" 2>/dev/null) || return 1
  pid=${pid//[[:space:]]/}
  [[ $pid =~ ^[0-9]+$ ]] || return 1
  state=$(sed 's/.*) //' "/proc/$pid/stat" 2>/dev/null | cut -d' ' -f1) || return 1
  [[ -n $state && $state != Z ]]
}

pidfile_pid() { # PIDFILE NAME
  local pid
  pid=$(cat "$1" 2>/dev/null) || return 1
  pid=${pid//[[:space:]]/}
  pid_is "$pid" "$2" || return 1
  printf '%s\n' "$pid"
}

# Start a command fully detached from the caller: new session, stdin from
# /dev/null, stdout+stderr appended to LOGFILE, and every other inherited file
# descriptor closed, so that a caller capturing our output (CI, $(...)) never
# waits for the daemon. The command is exec'ed (setsid does not fork because
# the background subshell is not a process-group leader in a script), so
# DETACHED_PID is the pid of the command itself, as long as the command
# itself execs (env, setpriv, unshare and `bash -c 'exec ...'` all do).
# The daemon runs in / : a daemon started from a checkout that is later removed
# (a CI clone, a test's temporary directory) must not lose its working directory
# (slurmrestd exits with "getcwd failed" on the next job submission).
DETACHED_PID=
detach() { # LOGFILE CMD...
  local logfile=$1
  shift
  (
    for fd in /proc/"$BASHPID"/fd/*; do
      fd=${fd##*/}
      if ((fd > 2)); then eval "exec ${fd}>&-"; fi
    done
    cd / || exit 1
    exec setsid "$@" </dev/null >>"$logfile" 2>&1
  ) &
  DETACHED_PID=$!
}

# Send SIGTERM to PID (if it is NAME) and wait up to TIMEOUT seconds for it
# to exit; SIGKILL after that.
# (A dead daemon may linger as a zombie until PID 1 reaps it: pid_is treats
# zombies as gone.) With a 4th argument "quiet", the SIGTERM is not logged.
stop_pid() { # PID NAME [TIMEOUT] [quiet]
  local pid=$1 name=$2 timeout=${3:-20} i
  pid_is "$pid" "$name" || return 0
  [[ ${4:-} == quiet ]] || log "stopping $name (pid $pid)"
  kill -TERM "$pid" 2>/dev/null || true
  for ((i = 0; i < timeout * 5; i++)); do
    pid_is "$pid" "$name" || return 0
    sleep 0.2
  done
  log "$name (pid $pid) did not exit after ${timeout}s; sending SIGKILL"
  kill -KILL "$pid" 2>/dev/null || true
  for ((i = 0; i < 25; i++)); do
    pid_is "$pid" "$name" || return 0
    sleep 0.2
  done
  die "$name (pid $pid) survived SIGKILL"
}

# Print the last lines of each given log file (for error reports).
show_logs() { # FILE...
  local f
  for f in "$@"; do
    [[ -f $f ]] || continue
    printf -- '----- tail of %s -----\n' "$f" >&2
    tail -n 25 "$f" >&2
  done
}

# Write CONTENT to FILE only if it differs; return 0 if the file changed.
write_if_changed() { # FILE CONTENT [MODE]
  local file=$1 content=$2 mode=${3:-0644}
  if [[ -f $file ]] && [[ $(cat "$file") == "$content" ]]; then
    return 1
  fi
  install -d "$(dirname "$file")"
  printf '%s\n' "$content" >"$file.tmp.$$"
  chmod "$mode" "$file.tmp.$$"
  mv -f "$file.tmp.$$" "$file"
  log "wrote $file"
  return 0
}
