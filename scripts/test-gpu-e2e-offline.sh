#!/usr/bin/env bash
# test-gpu-e2e-offline.sh: the GPU end-to-end script's checks that need no GPU (CI runs this).
# bash -n and shellcheck (when installed) on the scripts, then the Python unit tests in tests/gpu_e2e.
set -euo pipefail

REPO_ROOT=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")/.." && pwd)
cd "$REPO_ROOT"
PYTHON=${PYTHON:-python3}
export PYTHONDONTWRITEBYTECODE=1 # leave no __pycache__ in the tree
SCRIPTS=(scripts/gpu-e2e.sh scripts/test-gpu-e2e-offline.sh)

for s in "${SCRIPTS[@]}"; do
  bash -n "$s"
done
echo "bash -n: ok"

if command -v shellcheck >/dev/null 2>&1; then
  shellcheck "${SCRIPTS[@]}"
  echo "shellcheck: ok"
else
  echo "shellcheck: not installed, skipped (apt-get install -y shellcheck)"
fi

# The plugin-probe and whole-script tests build stand-in plugin libraries with cc: without it they
# are skipped, which must not pass unnoticed (DQPLB_REQUIRE_CC=1 makes it a failure, for CI).
if ! command -v cc >/dev/null 2>&1; then
  bar=$(printf '!%.0s' {1..78})
  printf '%s\n%s\n%s\n' "$bar" "cc not found: the plugin-probe and offline end-to-end tests will be SKIPPED" "$bar" >&2
  if [[ ${DQPLB_REQUIRE_CC:-0} == 1 ]]; then
    echo "DQPLB_REQUIRE_CC=1: failing instead" >&2
    exit 1
  fi
fi

"$PYTHON" -c 'import ast, sys; [ast.parse(open(f).read(), f) for f in sys.argv[1:]]' scripts/gpu_e2e/*.py
"$PYTHON" -W error::ResourceWarning -m unittest discover -s tests/gpu_e2e -p 'test_*.py' "$@"
