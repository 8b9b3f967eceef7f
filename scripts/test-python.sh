#!/usr/bin/env bash
# test-python.sh [WHEEL]: installs the wheel (default: the one dist/ holds, from scripts/wheel.sh)
# into a throwaway venv with `pip install --no-index` and runs python/tests against the installed
# package (plugin_path, enable/force, python -m dqplb_net path|--version|selftest, the `dqplb`
# console script, the .deb's stamped paths, the self test's byte check). PYTHON picks the
# interpreter (default python3), e.g. PYTHON=python3.8 for the oldest the wheel declares.
set -uo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
whl=${1:-}
if [ -z "$whl" ]; then
  mapfile -t found < <(ls dist/dqplb_net-*.whl 2>/dev/null)
  [ ${#found[@]} = 1 ] || { echo "test-python: expected one dist/dqplb_net-*.whl (bash scripts/wheel.sh), found ${#found[@]}" >&2; exit 1; }
  whl=${found[0]}
fi
py=${PYTHON:-python3}
if [ -z "${PYTHON:-}" ]; then
  python3 -c 'import venv, ensurepip' 2>/dev/null || bash scripts/setup-deps.sh --portable || exit 1
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$py" -m venv "$tmp/venv" || exit 1
"$tmp/venv/bin/pip" install --quiet --disable-pip-version-check --no-index "$whl" || exit 1
echo "test-python: installed $(basename "$whl") into a venv of $("$tmp/venv/bin/python" --version)"
# from outside the source tree, so that `import dqplb_net` is the installed package
cd "$tmp" && "$tmp/venv/bin/python" -m unittest discover -s "$repo/python/tests" -t "$repo/python/tests" -v
