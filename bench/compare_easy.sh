#!/usr/bin/env bash
# Side-by-side: koalesce's single-cluster EASY (Rust) against the plain Python reference
# (bench/easy_reference.py) on one trace, in one run. Checks that every job's start and end agree
# and prints wall time and peak RSS of each whole process, and their ratios.
# Usage: bench/compare_easy.sh [TRACE] [PROCS] [POLICY]   (default: HPC2N, 240, easy)
set -euo pipefail
cd "$(dirname "$0")/.."
trace=${1:-../shared/traces/HPC2N-2002-2.2-cln.swf.gz}
procs=${2:-240}
policy=${3:-easy}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
cargo build --release -q -p koalesce
bin="${CARGO_TARGET_DIR:-target}/release/koalesce"
measure() { /usr/bin/time -f "%e %M" -o "$out/time" "$@" >/dev/null; cat "$out/time"; }
read -r rs_s rs_kb < <(measure "$bin" sim --trace "$trace" --procs "$procs" --policy "$policy" --out "$out/rust" -q)
read -r py_s py_kb < <(measure python3 bench/easy_reference.py "$trace" "$procs" "$policy" "$out/python.csv")
python3 - "$out/rust/jobs.csv" "$out/python.csv" <<'PY'
import csv, sys
rust = {r["job_id"]: (r["start"], r["end"]) for r in csv.DictReader(open(sys.argv[1]))}
py = {r["job_id"]: (r["start"], r["end"]) for r in csv.DictReader(open(sys.argv[2]))}
differ = [k for k in py if rust.get(k) != py[k]]
print(f"jobs: koalesce {len(rust)}, python {len(py)}; start/end differ for {len(differ)}")
sys.exit(1 if differ or len(rust) != len(py) else 0)
PY
printf '%-10s %10s %12s\n' "" "wall (s)" "peak RSS (MB)"
printf '%-10s %10s %12.1f\n' koalesce "$rs_s" "$(awk "BEGIN{print $rs_kb/1024}")"
printf '%-10s %10s %12.1f\n' python "$py_s" "$(awk "BEGIN{print $py_kb/1024}")"
printf 'python/koalesce: wall %.1fx, memory %.1fx\n' "$(awk "BEGIN{print $py_s/$rs_s}")" "$(awk "BEGIN{print $py_kb/$rs_kb}")"
