#!/usr/bin/env bash
# The HyperQueue side of `koalesce bench e2e` (issue 9, item 6), for ratios measured side by
# side in one run: C clients (shell loops, one `hq submit` process per job, as a CLI user does)
# submit N trivial jobs (/bin/true, 1 CPU) to a fresh HyperQueue server with a durable journal
# and one worker on this machine, while the jobs run. Prints one JSON line: jobs, clients,
# elapsed_s (first submission until every job ended), jobs_per_s, submit p50/p99 (ms, the
# `hq submit` round trip), load_average.
#
# Usage: bench/e2e_hyperqueue.sh [--hq PATH] [--jobs N] [--clients C]
# HyperQueue is not a dependency of koalesce: build it from its source (e.g. v0.26.2,
# `cargo build --release -p hyperqueue`) and pass the binary with --hq.
set -euo pipefail
HQ=hq; JOBS=2000; CLIENTS=16
while [ $# -gt 0 ]; do
  case "$1" in
    --hq) HQ=$2; shift 2 ;;
    --jobs) JOBS=$2; shift 2 ;;
    --clients) CLIENTS=$2; shift 2 ;;
    *) echo "unknown argument: $1" >&2; exit 2 ;;
  esac
done
command -v "$HQ" >/dev/null || { echo "HyperQueue binary '$HQ' not found (pass --hq PATH)" >&2; exit 1; }
DIR=$(mktemp -d "${TMPDIR:-/tmp}/hq-e2e.XXXXXX")
export HQ_SERVER_DIR=$DIR/server
# hq writes each job's stdout/stderr under the submitting directory: keep them in $DIR.
cd "$DIR"
cleanup() {
  "$HQ" server stop >/dev/null 2>&1 || true
  kill "${SERVER_PID:-0}" "${WORKER_PID:-0}" 2>/dev/null || true
  wait 2>/dev/null || true
  rm -rf "$DIR"
}
trap cleanup EXIT
"$HQ" server start --journal "$DIR/journal" >"$DIR/server.log" 2>&1 &
SERVER_PID=$!
for _ in $(seq 200); do "$HQ" server info >/dev/null 2>&1 && break; sleep 0.05; done
"$HQ" worker start >"$DIR/worker.log" 2>&1 &
WORKER_PID=$!
for _ in $(seq 200); do [ "$("$HQ" worker list --output-mode quiet 2>/dev/null | wc -l)" -ge 1 ] && break; sleep 0.05; done
per=$(( (JOBS + CLIENTS - 1) / CLIENTS ))
t0=$(date +%s%N)
CLIENT_PIDS=()
for c in $(seq 0 $((CLIENTS - 1))); do
  (
    n=$per
    [ $(( (c + 1) * per )) -gt "$JOBS" ] && n=$(( JOBS - c * per ))
    for _ in $(seq 1 "$n"); do
      s=$(date +%s%N)
      "$HQ" submit --cpus 1 -- /bin/true >/dev/null
      echo $(( ($(date +%s%N) - s) / 1000 )) >>"$DIR/lat.$c"
    done
  ) &
  CLIENT_PIDS+=($!)
done
wait "${CLIENT_PIDS[@]}"
"$HQ" job wait all >/dev/null
t1=$(date +%s%N)
sort -n "$DIR"/lat.* >"$DIR/lat"
n=$(wc -l <"$DIR/lat")
pct() { sed -n "$(( ($1 * n + 99) / 100 ))p" "$DIR/lat"; }
python3 - "$JOBS" "$CLIENTS" "$t0" "$t1" "$(pct 50)" "$(pct 99)" "$n" <<'PY'
import json, os, sys
jobs, clients, t0, t1, p50, p99, n = (int(x) for x in sys.argv[1:8])
el = (t1 - t0) / 1e9
print(json.dumps({"system": "hyperqueue", "jobs": jobs, "clients": clients, "submitted": n,
                  "elapsed_s": round(el, 3), "jobs_per_s": round(jobs / el, 1),
                  "submit_p50_ms": p50 / 1e3, "submit_p99_ms": p99 / 1e3,
                  "load_average": round(os.getloadavg()[0], 2)}))
PY
