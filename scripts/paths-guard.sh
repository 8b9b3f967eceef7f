#!/usr/bin/env bash
# CI benchmark guard: a short scenario 2 (4 shaped paths, one at 10%) with dqplb and, for context,
# static-split; fails if dqplb reaches less than 0.8 of the ideal. Skips loudly (exit 0) where it
# cannot shape: not root, no `ip netns`, or no HTB on this kernel.
set -uo pipefail
cd "$(dirname "$0")/.."

skip() {
    echo "=================================================================="
    echo "paths-guard: SKIPPED: $*"
    echo "=================================================================="
    exit 0
}
[[ $(id -u) -eq 0 ]] || skip "not root (needs a network namespace and tc)"
command -v ip > /dev/null && command -v tc > /dev/null || skip "ip/tc (iproute2) not installed"
probe="dqplb-guard-probe-$$"
ip netns add "$probe" 2> /dev/null || skip "cannot create a network namespace (ip netns unavailable)"
htb_ok=0
ip netns exec "$probe" tc qdisc add dev lo root handle 1: htb 2> /dev/null && htb_ok=1
ip netns del "$probe" 2> /dev/null
[[ $htb_ok -eq 1 ]] || skip "the kernel has no HTB qdisc"

PATHS_CEILING=0 bash scripts/paths-bench.sh --scenario 2 --policy dqplb,static-split \
    --duration-ms "${PATHS_GUARD_MS:-2500}" --warmup-ms 500 --guard 0.8
rc=$?
if [[ $rc -eq 0 ]]; then
    echo "paths-guard: passed (dqplb >= 0.8 of ideal in scenario 2)"
elif [[ $rc -eq 1 ]]; then
    echo "paths-guard: FAILED: dqplb below 0.8 of the ideal in scenario 2 (figures above)" >&2
else
    echo "paths-guard: FAILED: the bench did not run (exit $rc)" >&2
fi
exit $rc
