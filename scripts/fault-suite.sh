#!/usr/bin/env bash
# The fault suite: the TCP transport under abuse, each case with an exact pass criterion and a
# bounded time (crates/transport/tests/faults_*.rs; their tests are #[ignore]d in a plain
# `cargo test` and run here on a release build, one at a time). Listener abuse, a silent service,
# peers killed, stopped and closed under fork, and a soak run as any user; loss and a rate
# limit between two network namespaces need root: without it they are skipped and the script
# exits 77 (DQPLB_REQUIRE_ALL=1 in scripts/test.sh turns that into a failure). Prints the table
# (attack | criterion | measured) at the end.
set -uo pipefail
cd "$(dirname "$0")/.."
t0=$SECONDS
log=$(mktemp)
trap 'rm -f "$log"' EXIT
run() { # test target, extra env...
  local t=$1; shift
  env "$@" cargo test --release --locked -p dqplb-transport --test "$t" -- --ignored --nocapture \
    --test-threads=1 2>&1 | tee -a "$log"
  return "${PIPESTATUS[0]}"
}
rc=0
run faults_listener || rc=1
run faults_peer || rc=1

netns=skipped
# the namespace cases' tools: bash scripts/setup-deps.sh --test installs them (this suite installs
# nothing; a missing one fails it, naming the package)
missing=()
for tool in nft:nftables ethtool:ethtool; do
  command -v "${tool%%:*}" >/dev/null || missing+=("${tool#*:}")
done
if [ "$(id -u)" = 0 ] && [ ${#missing[@]} -gt 0 ]; then
  echo "fault suite: FAILED: the namespace cases need the package(s) ${missing[*]}: run bash scripts/setup-deps.sh --test" >&2
  rc=1
  netns="not run (${missing[*]} missing)"
elif [ "$(id -u)" = 0 ]; then
  A=dqplbfA$$ B=dqplbfB$$
  cleanup() { ip netns del "$A" 2>/dev/null; ip netns del "$B" 2>/dev/null; rm -f "$log"; }
  trap cleanup EXIT
  if ip netns add "$A" && ip netns add "$B" &&
     ip link add fvA netns "$A" type veth peer name fvB netns "$B" &&
     ip -n "$A" addr add 10.77.0.1/24 dev fvA && ip -n "$B" addr add 10.77.0.2/24 dev fvB &&
     ip -n "$A" link set fvA up && ip -n "$B" link set fvB up &&
     ip -n "$A" link set lo up && ip -n "$B" link set lo up &&
     # Segmentation offloads off: nft then sees (and drops) wire-sized packets, not 64 KiB ones.
     ip netns exec "$A" ethtool -K fvA tso off gso off gro off >/dev/null &&
     ip netns exec "$B" ethtool -K fvB tso off gso off gro off >/dev/null; then
    run faults_netns DQPLB_FAULT_NS="$A $B 10.77.0.1" || rc=1
    netns=ran
    # Delay needs sch_netem; nft and tbf cannot hold packets back for a time.
    if ip netns exec "$A" tc qdisc add dev fvA root netem delay 10ms 2>/dev/null; then
      ip netns exec "$A" tc qdisc del dev fvA root
      echo "FAULT | delay | not run: netem is available but no case uses it yet | -" >>"$log"
    else
      echo "FAULT | delay | not run: this kernel has no sch_netem, and nft/tbf cannot delay packets | -" >>"$log"
    fi
  else
    echo "fault suite: could not set up the namespace pair"; rc=1
  fi
fi

echo
echo "attack | criterion | measured"
grep -o 'FAULT | .*' "$log" | sed 's/^FAULT | //'
echo "fault suite: $((SECONDS - t0)) s; namespace cases: $netns"
[ $rc -ne 0 ] && exit 1
[ "$netns" = skipped ] && { echo "loss and rate cases need root: skipped"; exit 77; }
exit 0
