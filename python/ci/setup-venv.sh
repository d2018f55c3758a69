#!/usr/bin/env bash
# Creates (or refreshes) the Python environment the workflow-tool tests use:
#   target/py-venv      a venv with PSI/J, dask-jobqueue, Parsl and pytest from PyPI (pinned),
#                       and this repository's PSI/J executor (python/, installed from its directory)
#   target/psij-tests   PSI/J's own test suite: the tests of the psij-python 0.9.11 source
#                       distribution plus the pytest fixtures of its repository at that tag
#                       (python/ci/psij-fixtures/, MIT-licensed, see the LICENSE there)
# Python: $KOALESCE_PYTHON, else python3 on PATH (3.9 or newer).
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
target="${CARGO_TARGET_DIR:-$root/target}"
venv="$target/py-venv"
py="${KOALESCE_PYTHON:-python3}"
stamp="$venv/.koalesce-requirements"
# Tests running at once share the venv: one of them builds it.
mkdir -p "$target"
exec 9>"$target/py-venv.lock"
flock 9
want="$(cat "$root/python/ci/requirements.txt")"
if [ ! -x "$venv/bin/python" ] || [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  rm -rf "$venv"
  "$py" -m venv "$venv"
  "$venv/bin/pip" install -q --disable-pip-version-check -r "$root/python/ci/requirements.txt"
  printf '%s' "$want" > "$stamp"
fi
# Our executor: reinstalled whenever its sources changed.
src_hash="$(cd "$root/python" && find pyproject.toml README.md src -type f ! -path '*__pycache__*' | sort | xargs sha256sum | sha256sum)"
if [ "$(cat "$venv/.koalesce-executor" 2>/dev/null)" != "$src_hash" ]; then
  "$venv/bin/pip" install -q --disable-pip-version-check --no-deps --force-reinstall "$root/python"
  printf '%s' "$src_hash" > "$venv/.koalesce-executor"
fi
tests="$target/psij-tests"
if [ ! -f "$tests/.complete" ]; then
  rm -rf "$tests" && mkdir -p "$tests/dl"
  "$venv/bin/pip" download -q --disable-pip-version-check --no-deps --no-binary :all: \
    "psij-python==0.9.11" -d "$tests/dl"
  tar xzf "$tests/dl"/psij-python-0.9.11.tar.gz -C "$tests/dl"
  cp -r "$tests/dl/psij-python-0.9.11/tests" "$tests/tests"
  cp -r "$root/python/ci/psij-fixtures/." "$tests/tests/"
  touch "$tests/.complete"
fi
echo "$venv"
