#!/bin/bash
# Memory of the compiled service after boot, idle: starts `bin/factlog.js serve` (with the
# shebang's environment and V8 flags) from the checkout DIR on a new data directory, waits for /healthz and 30 s
# more, and prints the process's VmRSS and VmHWM. Build first (`npm run build` in DIR).
#   bench/bootRss.sh [DIR (default .)] [PORT (default 18301)]
dir=${1:-.}
port=${2:-18301}
data=$(mktemp -d)
(cd "$dir" && STORAGE_DATA_DIR=$data SERVER_PORT=$port MALLOC_ARENA_MAX=1 MALLOC_MMAP_THRESHOLD_=131072 exec node --liftoff-only --max-semi-space-size=1 --heap-growing-percent=30 bin/factlog.js serve >"$data.log" 2>&1) &
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
