#!/usr/bin/env bash
# Shaped-loopback benchmark: runs `dqplb paths-bench` inside a private network namespace whose
# loopback it shapes per data stream with tc HTB; nothing leaves the machine, the namespace is
# removed on exit (also on failure or Ctrl-C).
#
#   sudo scripts/paths-bench.sh                  # all scenarios x 5 policies -> docs/data, docs/img
#   sudo scripts/paths-bench.sh --scenario 2 --policy dqplb --duration-ms 2000   # any paths-bench options
#
# Environment: DQPLB_BIN (use this binary instead of building one), DQPLB_PROFILE (cargo profile
# to build, default dev), PATHS_CEILING=0 (skip the unshaped-ceiling measurement),
# PATHS_NICE (nice level of the bench, default -10: less scheduling noise on a busy machine).
set -euo pipefail
cd "$(dirname "$0")/.."

if [[ $(id -u) -ne 0 ]]; then
    echo "paths-bench: must run as root (it creates a network namespace and shapes its loopback with tc); try: sudo $0 $*" >&2
    exit 2
fi
for tool in ip tc; do
    if ! command -v "$tool" > /dev/null; then
        echo "paths-bench: '$tool' not found (install iproute2)" >&2
        exit 2
    fi
done

if [[ -n "${DQPLB_BIN:-}" ]]; then
    bin=$DQPLB_BIN
else
    profile=${DQPLB_PROFILE:-dev}
    cargo build --quiet --profile "$profile" --bin dqplb
    dir=$([[ $profile == dev ]] && echo debug || echo "$profile")
    bin="${CARGO_TARGET_DIR:-target}/$dir/dqplb"
fi
if [[ ! -x $bin ]]; then
    echo "paths-bench: no executable at $bin" >&2
    exit 2
fi
bin=$(realpath "$bin")

ns="dqplb-paths-$$"
cleanup() {
    ip netns del "$ns" 2> /dev/null || true
}
trap cleanup EXIT
trap 'exit 130' INT TERM
if ! ip netns add "$ns"; then
    echo "paths-bench: cannot create network namespace $ns (ip netns unavailable?)" >&2
    exit 2
fi
ip netns exec "$ns" ip link set lo up
in_ns() {
    nice -n "${PATHS_NICE:--10}" ip netns exec "$ns" "$@"
}

if [[ ${PATHS_CEILING:-1} != 0 ]]; then
    echo "# unshaped ceiling of this machine (no tc, 4 streams, dqplb):"
    in_ns "$bin" paths-bench --no-shape --scenario 1 --policy dqplb --unit-mbit 100000 --duration-ms 2000 | grep -v '^#' |
        sed -e 's/ideal.*per-path/per-path/'
fi

if [[ $# -eq 0 ]]; then
    set -- --data-dir docs/data --img-dir docs/img
fi
echo "# ${bin##*/} paths-bench $*"
in_ns "$bin" paths-bench "$@"
