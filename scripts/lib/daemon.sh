# Sourced by scripts/kafka.sh and scripts/opensearch.sh: logging, and the pid file of a server
# this checkout started (finding it running, stopping it). The sourcing script sets `name` (the
# log prefix) and `pid_file` before calling these.

log() { printf '%s: %s\n' "$name" "$*" >&2; }

# Prints the pid of the server this checkout started, if it still runs; fails otherwise.
running_pid() {
  [[ -f "$pid_file" ]] || return 1
  local pid
  pid="$(cat "$pid_file" 2>/dev/null)"
  [[ -n "$pid" ]] && kill -0 "$pid" 2>/dev/null && echo "$pid"
}

# TERM, up to 30 s for a clean shutdown, then KILL. A server this checkout did not start is left alone.
stop() {
  local pid
  if ! pid="$(running_pid)"; then
    rm -f "$pid_file"
    log "not running"
    return 0
  fi
  log "stopping pid $pid"
  kill -TERM "$pid"
  for _ in $(seq 1 60); do
    kill -0 "$pid" 2>/dev/null || { rm -f "$pid_file"; log "stopped"; return 0; }
    sleep 0.5
  done
  log "still running after 30s; killing pid $pid"
  kill -KILL "$pid" 2>/dev/null || true
  rm -f "$pid_file"
}
