#!/usr/bin/env bash
# The whole test suite: format and lint gates, unit/property/integration tests (including the
# NCCL-call-pattern harness that dlopens the plugin), GPU-script offline tests, and the machine-
# dependent suites (Soft-RoCE verbs VM, shaped-path guard) when this machine can run them.
set -uo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup-deps.sh || exit 1
passed=0; failed=0; skipped=0; failures=(); skips=()
step() { # name, command...
  local name=$1; shift
  echo; echo "=== $name"
  local t0=$SECONDS
  "$@"; local rc=$?
  if [ $rc -eq 0 ]; then passed=$((passed+1)); echo "=== $name: ok ($((SECONDS-t0)) s)"
  elif [ $rc -eq 77 ]; then skipped=$((skipped+1)); skips+=("$name"); echo "=== $name: SKIPPED ($((SECONDS-t0)) s)"
  else failed=$((failed+1)); failures+=("$name"); echo "=== $name: FAILED (exit $rc, $((SECONDS-t0)) s)"; fi
}
step "cargo fmt --check" cargo fmt --all -- --check
step "cargo clippy -D warnings" cargo clippy --all-targets --locked -- -D warnings
step "cargo test" cargo test --locked --no-fail-fast
step "release build" bash scripts/build.sh
[ -f scripts/test-gpu-e2e-offline.sh ] && step "gpu-e2e offline tests" bash scripts/test-gpu-e2e-offline.sh
[ -f scripts/verbs-tests.sh ] && step "verbs suite in Soft-RoCE VM" bash scripts/verbs-tests.sh
[ -f scripts/paths-guard.sh ] && step "shaped-path guard (scenario 2)" bash scripts/paths-guard.sh
echo
[ ${#failures[@]} -eq 0 ] || echo "failed steps: $(printf '[%s] ' "${failures[@]}")"
[ ${#skips[@]} -eq 0 ] || echo "skipped steps: $(printf '[%s] ' "${skips[@]}")"
echo "$passed passed, $failed failed, $skipped skipped"
[ $failed -eq 0 ]
