#!/bin/bash
# Runs the verbs test suite on real libibverbs code inside one Soft-RoCE VM boot: sets the VM up
# (cached), builds tests/verbs_*.rs on the host, runs every binary, the layer's throughput probe and
# perftest ib_write_bw baselines in that boot, prints a summary.  Exit 0 all passed, 1 a step
# failed, 2 the VM gave no result, 77 skipped (loudly) because the VM cannot be set up here.
# Env: DQPLB_REQUIRE_VM=1 turns "VM unavailable" into a failure; HARNESS=0 skips the NCCL-call-
#      pattern harness (tests/nccl_harness.rs, run over rxe0; ~2.5 min); PERFTEST=quick (default, 1 MiB),
#      full (1 MiB and 64 MiB, ~2-4 extra minutes under TCG) or 0; PROBE_REPS (default 2);
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
[ $rc -eq 3 ] && loud_skip "the Soft-RoCE VM is unavailable (qemu or kernel could not be installed)"
[ $rc -eq 0 ] || { echo "verbs-tests: FAILED: setup.sh exited $rc" >&2; exit 1; }

echo "verbs-tests: building test binaries"
json=$(mktemp)
trap 'rm -f "$json"' EXIT
harness_args=()
[ "${HARNESS:-1}" = 1 ] && [ -f tests/nccl_harness.rs ] && harness_args=(--test nccl_harness)
cargo test --no-run --features verbs --test 'verbs_*' "${harness_args[@]}" --message-format=json >"$json" \
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
mkdir -p "$share/bin" "$share/probe" "$share/lib" "$share/harness/dqplb-harness"
for entry in "${bins[@]}"; do
  name=${entry%%$'\t'*}
  exe=${entry#*$'\t'}
  if [ "$name" = nccl_harness ]; then
    # the NCCL-call-pattern harness dlopens the plugin .so built next to it and loads a C logger
    # it would compile with cc (absent in the VM): build that once here, ship both
    cp "$exe" "$share/harness/nccl_harness"
    cp "$(dirname "$exe")/libnccl_net_dqplb.so" "$share/harness/"
    cc -shared -fPIC -O1 -o "$share/harness/dqplb-harness/harness-logger.so" tests/harness/logger.c \
      || { echo "verbs-tests: FAILED: compiling tests/harness/logger.c" >&2; exit 1; }
    exe=$share/harness/libnccl_net_dqplb.so # for the ldd scan below
  else
    cp "$exe" "$share/bin/$name"
  fi
  [ "$name" = verbs_probe ] && cp "$exe" "$share/probe/verbs_probe"
  ldd "$exe" | awk '$2 == "=>" && $3 ~ /^\// {print $3}' | while read -r lib; do
    [ -e "$VM/initramfs-root/usr/lib/x86_64-linux-gnu/${lib##*/}" ] || cp -L "$lib" "$share/lib/"
  done
done
# dqplb perf --transport verbs runs in the same boot as perftest (the ratio is what counts)
if [ "${PERFTEST:-quick}" != 0 ]; then
  cargo build --release --bin dqplb --quiet || { echo "verbs-tests: FAILED: cargo build --release --bin dqplb" >&2; exit 1; }
  mkdir -p "$share/perf"
  cp "${CARGO_TARGET_DIR:-target}/release/dqplb" "$share/perf/dqplb"
  ldd "$share/perf/dqplb" | awk '$2 == "=>" && $3 ~ /^\// {print $3}' | while read -r lib; do
    [ -e "$VM/initramfs-root/usr/lib/x86_64-linux-gnu/${lib##*/}" ] || cp -L "$lib" "$share/lib/"
  done
fi
printf 'PERFTEST=%s\nPROBE_REPS=%s\n' "${PERFTEST:-quick}" "${PROBE_REPS:-2}" >"$share/suite.env"
cp "$VM/guest-suite.sh" "$share/guest-run.sh"

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
echo
while read -r step src secs; do
  echo "==================== $step (rc=$src, ${secs}s) ===================="
  case $step in
    perftest_*) sed -n '/#bytes/,/^-----/p' "$share/logs/$step.log" ;;
    dqplb_perf_*) grep -E '^#  |^ +[0-9]+ ' "$share/logs/$step.log" ;;
    probe) grep -E 'probe|Gb/s|test result' "$share/logs/probe.log" ;;
    nccl_harness) grep -E '^test .*(ok|FAILED|ignored)$|test result' "$share/logs/$step.log" ;;
    *) grep -E '^test |test result|SKIPPED|panicked|Error|error' "$share/logs/$step.log" ;;
  esac
  if [ "$src" = 0 ]; then pass=$((pass + 1)); else
    fail=$((fail + 1))
    echo "---- full log of failed step $step:"
    cat "$share/logs/$step.log"
  fi
done <"$share/results.txt"
echo
echo "rxe0 counters after the run (non-zero only): $(tr '\n' ' ' <"$share/logs/rxe_counters.log" 2>/dev/null)"
echo
echo "verbs-tests summary (VM steps: test binaries, probe, perftest):"
while read -r step src secs; do
  printf '  %-36s %s (%ss)\n' "$step" "$([ "$src" = 0 ] && echo ok || echo FAILED)" "$secs"
done <"$share/results.txt"
echo "verbs-tests: $pass passed, $fail failed"
[ $fail -eq 0 ] || exit 1
[ $vmrc -eq 0 ] || { echo "verbs-tests: FAILED: VM exited with rc=$vmrc" >&2; exit 2; }
exit 0
