#!/usr/bin/env bash
# CI benchmark guard: a short scenario 2 (4 shaped paths, one at 10%) with dqplb and static-split,
# and scenario 8 (8 port-hashed paths: pinned against hashed source ports). Fails if dqplb reaches
# less than 0.8 of the ideal, if a pinned variant of scenario 8 reaches less than 0.95 or lost a
# byte, if static-split is NOT throttled (<= 0.6: proof that tc really shaped), or if any path
# carried more than 1.1x its configured rate. Exit 77 (skip)
# where this host can never shape (not root, no netns, no HTB); DQPLB_REQUIRE_SHAPING=1 fails then.
set -uo pipefail
cd "$(dirname "$0")/.."

skip() {
    echo "=================================================================="
    echo "paths-guard: SKIPPED: $*"
    echo "=================================================================="
    [[ ${DQPLB_REQUIRE_SHAPING:-0} == 1 ]] && { echo "paths-guard: FAILED: shaping is required here (DQPLB_REQUIRE_SHAPING=1)" >&2; exit 1; }
    exit 77
}
[[ $(id -u) -eq 0 ]] || skip "not root (needs a network namespace and tc)"
command -v ip > /dev/null && command -v tc > /dev/null || skip "ip/tc (iproute2) not installed"
probe="dqplb-guard-probe-$$"
ip netns add "$probe" 2> /dev/null || skip "cannot create a network namespace (ip netns unavailable)"
htb_ok=0
ip netns exec "$probe" tc qdisc add dev lo root handle 1: htb 2> /dev/null && htb_ok=1
ip netns del "$probe" 2> /dev/null
[[ $htb_ok -eq 1 ]] || skip "the kernel has no HTB qdisc"

data=$(mktemp -d)
trap 'rm -rf "$data"' EXIT
PATHS_CEILING=0 bash scripts/paths-bench.sh --scenario 2,8 --policy dqplb,static-split \
    --duration-ms "${PATHS_GUARD_MS:-2500}" --warmup-ms 500 --guard 0.8 --data-dir "$data"
rc=$?
if [[ $rc -eq 1 ]]; then
    echo "paths-guard: FAILED: dqplb below 0.8 of the ideal in scenario 2, or pinned ports below 0.95 in scenario 8 (figures above)" >&2
    exit 1
elif [[ $rc -ne 0 ]]; then
    echo "paths-guard: FAILED: the bench did not run (exit $rc)" >&2
    exit $rc
fi
summary=$data/paths-summary.csv
per_path=$data/paths-per-path.csv
[[ -s $summary && -s $per_path ]] || { echo "paths-guard: FAILED: the bench wrote no CSV into $data" >&2; exit 1; }
# columns: scenario,name,policy,...,ratio (12th)
static=$(awk -F, 'NR > 1 && $3 == "static-split" {print $12}' "$summary")
[[ -n $static ]] || { echo "paths-guard: FAILED: no static-split row in $summary" >&2; exit 1; }
if ! awk -v r="$static" 'BEGIN {exit !(r <= 0.6)}'; then
    echo "paths-guard: FAILED: static-split reached $static of the ideal: the slow path was not shaped (tc not in effect?)" >&2
    exit 1
fi
# columns: scenario,policy,path,rate_mbit,bytes,carried_mbit,share
over=$(awk -F, 'NR > 1 && $6 > 1.1 * $4 {printf "%s path %s carried %s Mbit/s over a %s Mbit/s shape; ", $2, $3, $6, $4}' "$per_path")
if [[ -n $over ]]; then
    echo "paths-guard: FAILED: $over" >&2
    exit 1
fi
echo "paths-guard: passed (dqplb >= 0.8 of ideal, pinned ports >= 0.95 byte-exact, static-split throttled at $static, every path within 1.1x its shape)"
