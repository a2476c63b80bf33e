#!/usr/bin/env bash
# testbed/mosquitto.sh - an MQTT broker for the tests (mosquitto 2.0).
#
#   bash testbed/mosquitto.sh up      # start (idempotent) + publish/subscribe check
#   bash testbed/mosquitto.sh down    # stop it
#   bash testbed/mosquitto.sh status
#
# Listens on 127.0.0.1:18830 (not the default 1883), anonymous access,
# no persistence. Run as root after testbed/install.sh; mosquitto drops to
# its 'mosquitto' user by itself. `up` writes MQTT_HOST=127.0.0.1 and
# MQTT_PORT=18830 to /run/hpc-bridge-testbed/mosquitto.env.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$HERE/lib.sh"
LOG_TAG=mosquitto

MQTT_HOST=127.0.0.1
MQTT_PORT=18830
CONF=$TESTBED_STATE_DIR/mosquitto/mosquitto.conf
PIDFILE=$TESTBED_RUN_DIR/mosquitto.pid
LOGFILE=$TESTBED_LOG_DIR/mosquitto.log
ENV_FILE=$TESTBED_RUN_DIR/mosquitto.env

mosquitto_conf() {
  cat <<EOF
# Written by hpc-bridge testbed/mosquitto.sh - do not edit, re-run the script.
listener $MQTT_PORT $MQTT_HOST
allow_anonymous true
persistence false
log_dest stderr
log_type error
log_type warning
log_type notice
log_type information
EOF
}

broker_pid() { pidfile_pid "$PIDFILE" mosquitto; }

# Publish a QoS 1 message and read it back with a subscriber.
round_trip() {
  local topic msg got sub
  topic="hpc-bridge-testbed/check/$$"
  msg="ping-$RANDOM"
  mosquitto_sub -h "$MQTT_HOST" -p "$MQTT_PORT" -q 1 -t "$topic" -C 1 -W 10 >"$TESTBED_RUN_DIR/mqtt-check.$$" &
  sub=$!
  # Publish until the subscriber (which may still be connecting) got it.
  local i
  for ((i = 0; i < 50; i++)); do
    mosquitto_pub -h "$MQTT_HOST" -p "$MQTT_PORT" -q 1 -t "$topic" -m "$msg" 2>/dev/null || true
    if ! kill -0 "$sub" 2>/dev/null; then break; fi
    sleep 0.2
  done
  wait "$sub" || true
  got=$(cat "$TESTBED_RUN_DIR/mqtt-check.$$")
  rm -f "$TESTBED_RUN_DIR/mqtt-check.$$"
  [[ $got == "$msg" ]]
}

cmd_up() {
  require_root
  require_commands mosquitto mosquitto_pub mosquitto_sub
  install -d -m 0755 "$TESTBED_STATE_DIR/mosquitto" "$TESTBED_LOG_DIR" "$TESTBED_RUN_DIR"
  if write_if_changed "$CONF" "$(mosquitto_conf)" && broker_pid >/dev/null; then
    log "configuration changed: restarting"
    cmd_down
  fi
  if ! broker_pid >/dev/null; then
    log "starting mosquitto on $MQTT_HOST:$MQTT_PORT"
    # Foreground process, detached by us (its log goes to $LOGFILE).
    detach "$LOGFILE" mosquitto -c "$CONF"
    printf '%s\n' "$DETACHED_PID" >"$PIDFILE"
  fi
  local i
  for ((i = 0; i < 50; i++)); do
    pidfile_alive "$PIDFILE" || break
    if round_trip; then
      printf 'MQTT_HOST=%s\nMQTT_PORT=%s\n' "$MQTT_HOST" "$MQTT_PORT" >"$ENV_FILE"
      log "publish/subscribe round trip OK; broker pid $(broker_pid), env in $ENV_FILE"
      return 0
    fi
    sleep 0.2
  done
  show_logs "$LOGFILE"
  die "mosquitto does not serve a publish/subscribe round trip on $MQTT_HOST:$MQTT_PORT"
}

cmd_down() {
  require_root
  local pid
  if pid=$(broker_pid); then stop_pid "$pid" mosquitto 10; fi
  rm -f "$PIDFILE" "$ENV_FILE"
}

cmd_status() {
  local pid
  if pid=$(broker_pid); then
    echo "mosquitto running (pid $pid) on $MQTT_HOST:$MQTT_PORT"
  else
    echo "mosquitto NOT running"
    return 1
  fi
}

case ${1:-} in
  up) cmd_up ;;
  down) cmd_down ;;
  status) cmd_status ;;
  *)
    sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//' >&2
    exit 2
    ;;
esac
