#!/usr/bin/env bash
# Runs the PSI/J executor's own unit tests (python/tests, no server), then code no one at
# koalesce wrote against a running koalesce server:
#   1. PSI/J's own test suite with the `koalesce` executor (launchers single and multiple);
#   2. PSI/J's own test suite with its `slurm` executor, driving koalesce's sbatch/squeue/scancel;
#   3. dask-jobqueue's SLURMCluster: 3 workers as koalesce jobs compute a sum;
#   4. Parsl's SlurmProvider: a small workflow (python apps, a bash app, a reduction).
# Needs: KOALESCE_URL, KOALESCE_TOKEN (or the commands' koalesce-client.toml), koalesce's Slurm
# commands first on PATH, KOALESCE_TOOLS_DIR (a scratch directory the server's jobs may write:
# it becomes HOME), the venv from setup-venv.sh ($KOALESCE_VENV, default target/py-venv).
# Usage: run-tools.sh [unit] [psij-koalesce] [psij-slurm] [dask] [parsl]   (default: all)
set -uo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
target="${CARGO_TARGET_DIR:-$root/target}"
venv="${KOALESCE_VENV:-$target/py-venv}"
tests="$target/psij-tests"
: "${KOALESCE_TOOLS_DIR:?set KOALESCE_TOOLS_DIR to a scratch directory jobs may write}"
command -v sbatch >/dev/null || { echo "koalesce's sbatch is not on PATH" >&2; exit 2; }
export HOME="$KOALESCE_TOOLS_DIR/home"
mkdir -p "$HOME"
export PATH="$venv/bin:$PATH"
py="$venv/bin/python"
parts=("$@")
[ ${#parts[@]} -eq 0 ] && parts=(unit psij-koalesce psij-slurm dask parsl)
failed=()
summary=()
psij() {
  local executors="$1"; shift
  # As psij-python's Makefile runs its tests: the plugin directories on PYTHONPATH.
  (cd "$tests" && PYTHONPATH="$tests/tests/plugins1:$tests/tests/plugins2:$root/python/ci" \
     timeout 900 "$py" -m pytest -p no:cacheprovider -q -rfEs "$@" --executors "$executors" \
     --branch-name-override koalesce --timeout 300 tests) > "$KOALESCE_TOOLS_DIR/psij-$executors.log" 2>&1
  local rc=$?
  grep -E "^(FAILED|ERROR|SKIPPED)" "$KOALESCE_TOOLS_DIR/psij-$executors.log" | sed "s/^/  /"
  local last; last="$(grep -E "[0-9]+ (passed|failed)" "$KOALESCE_TOOLS_DIR/psij-$executors.log" | tail -1)"
  summary+=("PSI/J test suite, executors $executors: $last")
  return $rc
}
for p in "${parts[@]}"; do
  t0=$(date +%s)
  case "$p" in
    unit) "$py" -m pytest -p no:cacheprovider -q "$root/python/tests" > "$KOALESCE_TOOLS_DIR/unit.log" 2>&1; rc=$?
          summary+=("executor unit tests: $(grep -E "[0-9]+ (passed|failed)" "$KOALESCE_TOOLS_DIR/unit.log" | tail -1)"); (exit $rc) ;;
    psij-koalesce) psij koalesce:single,koalesce:multiple ;;
    psij-slurm) psij slurm:single,slurm:multiple -p psij_poll_interval ;;
    dask) (cd "$KOALESCE_TOOLS_DIR" && timeout 300 "$py" "$root/python/ci/dask_slurm.py" 2>"$KOALESCE_TOOLS_DIR/dask.log") \
            | tee -a "$KOALESCE_TOOLS_DIR/dask.out"; rc=${PIPESTATUS[0]}; summary+=("$(tail -1 "$KOALESCE_TOOLS_DIR/dask.out" 2>/dev/null)"); (exit $rc) ;;
    parsl) (cd "$KOALESCE_TOOLS_DIR" && timeout 300 "$py" "$root/python/ci/parsl_slurm.py" 2>"$KOALESCE_TOOLS_DIR/parsl.log") \
            | tee -a "$KOALESCE_TOOLS_DIR/parsl.out"; rc=${PIPESTATUS[0]}; summary+=("$(tail -1 "$KOALESCE_TOOLS_DIR/parsl.out" 2>/dev/null)"); (exit $rc) ;;
    *) echo "unknown part $p" >&2; (exit 2) ;;
  esac
  rc=$?
  echo "== $p: exit $rc in $(( $(date +%s) - t0 )) s"
  [ $rc -ne 0 ] && failed+=("$p")
done
printf '%s\n' "${summary[@]}"
if [ ${#failed[@]} -gt 0 ]; then
  echo "FAILED: ${failed[*]} (logs in $KOALESCE_TOOLS_DIR)" >&2
  exit 1
fi
