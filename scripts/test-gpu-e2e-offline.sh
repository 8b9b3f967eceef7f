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

"$PYTHON" -c 'import ast, sys; [ast.parse(open(f).read(), f) for f in sys.argv[1:]]' scripts/gpu_e2e/*.py
"$PYTHON" -W error::ResourceWarning -m unittest discover -s tests/gpu_e2e -p 'test_*.py' "$@"
