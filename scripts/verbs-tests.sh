#!/bin/bash
# Runs the verbs test suite on real libibverbs code inside one Soft-RoCE VM boot: sets the VM up
# (cached), builds tests/verbs_*.rs and the NCCL harness and emulator (release, against the release
# plugin .so) and the dqplb binary on the host, runs them, the layer's throughput probe, perftest
# ib_write_bw, `dqplb devices` (rxe0 listed ACTIVE and used with its RoCE v2 GID, table and JSON)
# and a two-process `dqplb perf --server` / `--client` over verbs (one way and --bidir, bytes
# checked) in that boot, checks every shipped step reported and ran tests, and that the plugin
# steps moved packets over rxe0.  Exit 0 all passed, 1 a step failed or went missing, 2 the VM gave no result, 77
# skipped (loudly) only when this host can never run the VM (not root).
# Env: DQPLB_REQUIRE_VM=1 turns even that skip into a failure (CI); HARNESS=0 skips the NCCL-call-
#      pattern harness and emulator (run over rxe0; ~2.5 min); PERFTEST=quick (default, 1 MiB),
#      full (1 MiB and 64 MiB, ~2-4 extra minutes under TCG), bench (scripts/softroce/
#      bench-steps.txt: perftest and dqplb perf at 1-64 MiB, message rate and latency; BENCH_BASE=
#      a dqplb binary adds its dqbase steps, the same runs with it; BENCH_STEPS= another steps
#      file in that format; BENCH_IB_TIMEOUT= the ACK timeout exponent of perftest (-u) and of
#      dqplb perf (NCCL_IB_TIMEOUT), default 14 = 67 ms) or 0; PROBE_REPS (default 2);
#      KEEP_SHARE=1 keeps the share folder with all logs; CARGO_TARGET_DIR as for cargo.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
VM=$ROOT/scripts/softroce
cd "$ROOT" || exit 1

loud_skip() {
  echo "##############################################################################" >&2
  echo "## verbs-tests: SKIPPED - $*" >&2
  echo "## The verbs suite did NOT run. Nothing about RDMA was tested." >&2
  echo "##############################################################################" >&2
  [ "${DQPLB_REQUIRE_VM:-0}" = 1 ] && exit 1
  exit 77 # "skipped" for scripts/test.sh
}

echo "verbs-tests: setting up the Soft-RoCE VM (cached after the first run)"
"$VM/setup.sh"
rc=$?
[ $rc -eq 3 ] && loud_skip "this host cannot run the Soft-RoCE VM (see the setup line above)"
[ $rc -eq 0 ] || { echo "verbs-tests: FAILED: VM setup failed (setup.sh exit $rc, reason above)" >&2; exit 1; }
must() { "$@" || { echo "verbs-tests: FAILED: $*" >&2; exit 1; }; }

echo "verbs-tests: building test binaries"
json=$(mktemp)
trap 'rm -f "$json"' EXIT
harness_args=()
if [ "${HARNESS:-1}" = 1 ]; then
  for h in nccl_harness nccl_emulator; do [ -f tests/$h.rs ] && harness_args+=(--test $h); done
fi
# release: the harness and emulator drive the shipped (release) library, not the debug build
cargo test --release --no-run --features verbs --test 'verbs_*' "${harness_args[@]}" --message-format=json >"$json" \
  || { echo "verbs-tests: FAILED: cargo build of the verbs test binaries" >&2; exit 1; }
mapfile -t bins < <(python3 -c '
import json, sys
for line in open(sys.argv[1]):
    try:
        m = json.loads(line)
    except ValueError:
        continue
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["kind"] == ["test"]:
        print(m["target"]["name"] + "\t" + m["executable"])
' "$json")
[ ${#bins[@]} -gt 0 ] || { echo "verbs-tests: FAILED: no verbs_* test binaries were built" >&2; exit 1; }

share=$(mktemp -d "${TMPDIR:-/tmp}/verbs-tests.XXXXXX")
[ "${KEEP_SHARE:-0}" = 1 ] || trap 'rm -f "$json"; rm -rf "$share"' EXIT
mkdir -p "$share/bin" "$share/probe" "$share/lib" "$share/harness/dqplb-logger"
expected=() # every step the guest must report, in the order it runs them
for entry in "${bins[@]}"; do
  name=${entry%%$'\t'*}
  exe=${entry#*$'\t'}
  case $name in
    nccl_harness | nccl_emulator)
      # they dlopen the plugin .so built next to them and load a C logger they would compile
      # with cc (absent in the VM): build that once here, ship all
      must cp "$exe" "$share/harness/$name"
      must cp "$(dirname "$exe")/libnccl_net_dqplb.so" "$share/harness/"
      [ -s "$share/harness/dqplb-logger/dqplb-logger.so" ] \
        || must cc -shared -fPIC -O1 -o "$share/harness/dqplb-logger/dqplb-logger.so" crates/test-support/src/logger.c
      exe=$share/harness/libnccl_net_dqplb.so # for the ldd scan below
      ;;
    verbs_probe) must cp "$exe" "$share/probe/verbs_probe" ;; # only ignored tests: run as the probe step
    # host-only checks: the guest has no verbs.h or cc (layout) and no plugin .so next to bin/
    # (hidden libibverbs): there they could only skip, so they are not shipped as "passing" steps
    verbs_abi_layout | verbs_hidden) continue ;;
    *)
      must cp "$exe" "$share/bin/$name"
      expected+=("$name")
      ;;
  esac
  ldd "$exe" | awk '$2 == "=>" && $3 ~ /^\// {print $3}' | while read -r lib; do
    [ -e "$VM/initramfs-root/usr/lib/x86_64-linux-gnu/${lib##*/}" ] || cp -L "$lib" "$share/lib/"
  done
done
[ -x "$share/probe/verbs_probe" ] && expected+=(probe)
for h in nccl_harness nccl_emulator; do [ -x "$share/harness/$h" ] && expected+=("$h"); done
case ${PERFTEST:-quick} in # step names as scripts/softroce/guest-suite.sh writes them
  quick) expected+=(perftest_write_bw_q4_1MiB dqplb_perf_verbs_q4_1MiB) ;;
  full) expected+=(perftest_write_bw_q4_1MiB perftest_write_bw_q4_64MiB dqplb_perf_verbs_q4_1MiB
    dqplb_perf_verbs_q4_64MiB dqplb_perf_verbs_q4_64MiB_seg16M) ;;
  bench)
    while read -r kind name _; do
      case $kind in
        bw | bwhog | lat | dq) expected+=("$name") ;;
        dqbase) [ -n "${BENCH_BASE:-}" ] && expected+=("$name") ;;
      esac
    done <"${BENCH_STEPS:-$VM/bench-steps.txt}"
    ;;
esac
# the dqplb binary, in every run: dqplb devices on rxe0 and a two-process dqplb perf --server /
# --client over verbs (one way and --bidir); with PERFTEST also dqplb perf --transport verbs in
# the same boot as perftest (the ratio is what counts)
expected+=(dqplb_devices dqplb_devices_json dqplb_perf_2proc_verbs dqplb_perf_2proc_verbs_bidir)
cargo build --release --bin dqplb --quiet || { echo "verbs-tests: FAILED: cargo build --release --bin dqplb" >&2; exit 1; }
mkdir -p "$share/perf"
must cp "${CARGO_TARGET_DIR:-target}/release/dqplb" "$share/perf/dqplb"
if [ "${PERFTEST:-quick}" = bench ]; then
  must cp "${BENCH_STEPS:-$VM/bench-steps.txt}" "$share/bench-steps.txt"
  [ -n "${BENCH_BASE:-}" ] && must cp "$BENCH_BASE" "$share/perf/dqplb-base"
fi
ldd "$share/perf/dqplb" | awk '$2 == "=>" && $3 ~ /^\// {print $3}' | while read -r lib; do
  [ -e "$VM/initramfs-root/usr/lib/x86_64-linux-gnu/${lib##*/}" ] || cp -L "$lib" "$share/lib/"
done
printf 'PERFTEST=%s\nPROBE_REPS=%s\nBENCH_IB_TIMEOUT=%s\n' "${PERFTEST:-quick}" "${PROBE_REPS:-2}" \
  "${BENCH_IB_TIMEOUT:-14}" >"$share/suite.env"
must cp "$VM/guest-suite.sh" "$share/guest-run.sh"

echo "verbs-tests: booting the VM with ${#bins[@]} test binaries"
SHARE=$share LOG=$share/console.log TIMEOUT=${VM_TIMEOUT:-1500} "$VM/run-vm.sh" share >/dev/null 2>&1
vmrc=$?
[ "${KEEP_SHARE:-0}" = 1 ] && echo "verbs-tests: logs kept in $share"
if [ ! -s "$share/results.txt" ]; then
  echo "verbs-tests: FAILED: the VM returned no results (run-vm rc=$vmrc); console tail:" >&2
  tr -d '\r' <"$share/console.log" | tail -n 40 >&2
  exit 2
fi

pass=0
fail=0
failed_steps=()
step_ok() { # step_ok STEP RC: the guest's rc, plus what its log must show
  local step=$1 src=$2 log=$share/logs/$1.log
  [ "$src" = 0 ] || { echo "  -> exit status $src"; return 1; }
  case $step in
    perftest_* | dqplb_perf_* | dqplb_base_* | dqplb_devices*) ;;
    probe) grep -qE 'test result: ok\. [1-9][0-9]* passed' "$log" || { echo "  -> the probe ran no test"; return 1; } ;;
    *) grep -qE 'test result: ok\. [1-9][0-9]* passed' "$log" || { echo "  -> ran no test"; return 1; } ;;
  esac
  case $step in
    dqplb_devices_json)
      # the document itself, field by field (the guest has no python: it grepped the lines)
      python3 - "$log" <<'PY' || return 1
import json, sys
def fail(why):
    print("  -> " + why)
    sys.exit(1)
text, checks = open(sys.argv[1]).read().split("\n---- checks: SOFTROCE_GID_INDEX=")
gid_index = checks.split("\n")[0]
ports = [p for p in json.loads(text)["ports"] if p["device"] == "rxe0" and p["port"] == 1]
if len(ports) != 1:
    fail("rxe0 port 1 is not listed exactly once")
p = ports[0]
gids = [g for g in p["gids"] if g["index"] == p["selected_gid"]]
bad = [what for what, ok in [
    ("state ACTIVE", p["state"] == "ACTIVE"),
    ("used: yes", p["used"] is True and p["reason"] is None),
    ("link layer Ethernet", p["link_layer"] == "Ethernet"),
    ("selected GID index " + gid_index, str(p["selected_gid"]) == gid_index),
    ("selected GID RoCE v2 10.77.0.1 on dummy0", len(gids) == 1 and gids[0]["kind"] == "RoCE v2"
     and gids[0]["address"] == "10.77.0.1" and gids[0]["netdev"] == "dummy0"),
] if not ok]
if bad:
    fail("rxe0 in dqplb devices --json lacks: " + ", ".join(bad))
print("  rxe0 port 1: %s, used, GID %s %s %s on %s" % (p["state"], gids[0]["index"], gids[0]["kind"],
      gids[0]["address"], gids[0]["netdev"]))
PY
      ;;
    dqplb_perf_2proc_*)
      # every size of the sweep, in each direction, on both processes: 20 iterations, 0 wrong
      local dirs=1 want
      [ "$step" = dqplb_perf_2proc_verbs_bidir ] && dirs=2
      want=$((3 * dirs))
      awk -v want="$want" '
        BEGIN { side = 0 }
        /^---- server/ { side = 1; next }
        !/^#/ && NF == 8 { n[side]++; if ($4 != 20 || $8 != 0) bad++ }
        END {
          printf "  rows: client %d, server %d (want %d each), wrong or short rows %d\n", n[0], n[1], want, bad
          exit !(n[0] == want && n[1] == want && !bad)
        }' "$log" || { echo "  -> not every size moved 20 checked iterations on both sides"; return 1; }
      ;;&
    nccl_harness | nccl_emulator | dqplb_perf_2proc_*)
      # proof that the plugin used rxe0, not TCP: rxe0's sent_pkts grew during the step
      read -r before after <"$share/logs/$step.rxe" || { echo "  -> no rxe0 counter record"; return 1; }
      echo "  rxe0 sent_pkts during $step: $before -> $after"
      [ "$before" -ge 0 ] && [ "$after" -gt "$before" ] || { echo "  -> rxe0 carried no packets: the plugin did not use RDMA"; return 1; }
      ;;
  esac
}
echo
while read -r step src secs; do
  echo "==================== $step (rc=$src, ${secs}s) ===================="
  case $step in
    perftest_*) sed -n '/#bytes/,/^-----/p' "$share/logs/$step.log" ;;
    dqplb_devices*) cat "$share/logs/$step.log" ;;
    dqplb_perf_2proc_*) cat "$share/logs/$step.log" ;;
    dqplb_perf_* | dqplb_base_*) grep -E '^#  |^ +[0-9]+ |^ +(plugin|raw-tcp) |ops per message' "$share/logs/$step.log" ;;
    probe) grep -E 'probe|Gb/s|test result' "$share/logs/probe.log" ;;
    nccl_harness | nccl_emulator) grep -E '^test .*(ok|FAILED|ignored)$|test result' "$share/logs/$step.log" ;;
    *) grep -E '^test |test result|SKIPPED|panicked|Error|error' "$share/logs/$step.log" ;;
  esac
  if step_ok "$step" "$src"; then pass=$((pass + 1)); else
    fail=$((fail + 1))
    failed_steps+=("$step")
    echo "---- full log of failed step $step:"
    cat "$share/logs/$step.log"
  fi
done <"$share/results.txt"
missing=()
for want in "${expected[@]}"; do
  awk -v w="$want" '$1 == w {found = 1} END {exit !found}' "$share/results.txt" || missing+=("$want")
done
echo
echo "rxe0 counters after the run (non-zero only): $(tr '\n' ' ' <"$share/logs/rxe_counters.log" 2>/dev/null)"
echo
echo "verbs-tests summary (VM steps: test binaries, probe, harness, emulator, perftest):"
while read -r step src secs; do
  printf '  %-36s %s (%ss)\n' "$step" "$(printf '%s\n' "${failed_steps[@]}" | grep -qx "$step" && echo FAILED || echo ok)" "$secs"
done <"$share/results.txt"
for m in "${missing[@]}"; do printf '  %-36s MISSING (shipped, never reported)\n' "$m"; done
fail=$((fail + ${#missing[@]}))
echo "verbs-tests: $pass passed, $fail failed"
[ $fail -eq 0 ] || exit 1
[ $vmrc -eq 0 ] || { echo "verbs-tests: FAILED: VM exited with rc=$vmrc" >&2; exit 2; }
exit 0
