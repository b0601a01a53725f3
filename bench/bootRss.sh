#!/bin/bash
# Memory of the compiled service after boot, idle: runs `bin/factlog.js serve` of the checkout DIR
# as a user does (its shebang sets the environment and V8 flags that checkout ships with) on a new
# data directory, waits for /healthz and 30 s more, and prints the process's VmRSS and VmHWM.
# Build first (`npm run build` in DIR). `node` must be on PATH (the shebang runs env's node).
#   bench/bootRss.sh [DIR (default .)] [PORT (default 18301)]
dir=${1:-.}
port=${2:-18301}
data=$(mktemp -d)
(cd "$dir" && STORAGE_DATA_DIR=$data SERVER_PORT=$port exec ./bin/factlog.js serve >"$data.log" 2>&1) &
pid=$!
for _ in $(seq 1 60); do
  sleep 1
  curl -sf "localhost:$port/healthz" >/dev/null && break
done
sleep 30
echo "$dir: $(grep -E 'VmRSS|VmHWM' /proc/$pid/status | tr -s ' \t' ' ' | tr '\n' ' ')"
kill "$pid"
wait "$pid" 2>/dev/null
rm -rf "$data" "$data.log"
