#!/bin/sh
# Runs inside the Soft-RoCE VM from the 9p share (copied there as guest-run.sh by verbs-tests.sh):
# every test binary in bin/, the layer's throughput probe, perftest ib_write_bw baselines, and
# the dqplb binary (perf/dqplb): devices, perf over verbs in one and in two processes.
# Writes logs/<step>.log and one "step rc seconds" line per step to results.txt; exits 1 when any
# step failed. rxe0's sent_pkts counter is recorded around each plugin step (logs/<step>.rxe).
# PERFTEST=bench runs bench-steps.txt instead of the perftest baselines.
cd /mnt/host || exit 1
[ -f suite.env ] && . ./suite.env
mkdir -p logs
: >results.txt
now() { cut -d' ' -f1 /proc/uptime; }
FAILED=0
# the guest's clock source (each clock read of the plugin pays it; TSC is read in user space)
for f in current_clocksource available_clocksource; do
  echo "$f $(cat /sys/devices/system/clocksource/clocksource0/$f 2>/dev/null)"
done >logs/clocksource.log
record() { # record NAME RC START
  echo "$1 $2 $(awk -v a="$3" -v b="$(now)" 'BEGIN{printf "%.1f", b - a}')" >>results.txt
  [ "$2" = 0 ] || FAILED=1
}
sent_pkts() { cat /sys/class/infiniband/"$SOFTROCE_DEV"/ports/1/hw_counters/sent_pkts 2>/dev/null || echo -1; }
# rxe's ACK-timeout retransmissions (each costs the QP's timeout: 67 ms at NCCL_IB_TIMEOUT=14)
retries() { cat /sys/class/infiniband/"$SOFTROCE_DEV"/ports/1/hw_counters/completer_retry_err 2>/dev/null || echo -1; }
# plugin_step NAME CMD...: a run of the plugin over rxe0, with rxe0's packet counter before/after
plugin_step() {
  name=$1
  shift
  t=$(now)
  before=$(sent_pkts)
  echo "guest-suite: running $name"
  "$@" >"logs/$name.log" 2>&1
  rc=$?
  echo "$before $(sent_pkts)" >"logs/$name.rxe"
  record "$name" $rc "$t"
}
for b in bin/*; do
  [ -x "$b" ] || continue
  name=${b##*/}
  t=$(now)
  echo "guest-suite: running $name"
  timeout 300 ./"$b" --include-ignored >"logs/$name.log" 2>&1
  record "$name" $? "$t"
done
# throughput probe of the project's verbs layer (an ignored test, run on purpose)
if [ -x probe/verbs_probe ]; then
  t=$(now)
  PROBE_REPS=${PROBE_REPS:-2} timeout 300 ./probe/verbs_probe --ignored --nocapture --test-threads=1 >logs/probe.log 2>&1
  record probe $? "$t"
fi
# the NCCL-call-pattern harness against the plugin .so, forced onto RDMA (rxe0); test ACK timeout
# 14 (67 ms) as in tests/verbs_support: rxe under emulation drops a packet now and then
# The emulator over rxe0: every policy (P4 x C4 ring on LL/LL128/SIMPLE plus all-to-all), the GDR
# probe sequence (also with CUDA forced on, and GDR receives whose iflush READs run on rxe0) and
# abort with requests in flight, every net ABI version as the NCCL that first looks for it loads it
# (traffic class read back from the data QPs, profiler events, per-communicator init/finalize,
# rail/plane) and setNetAttr's per-pattern policy; the full P x C matrix runs over TCP on the host
# (under TCG the 8-process, 8-channel cases would take most of an hour).
EMULATOR_FILTER="policy_ gdr_probe abort_with native_versions set_net_attr"
for h in nccl_harness nccl_emulator; do
  [ -x harness/$h ] || continue
  filter=""
  [ $h = nccl_emulator ] && filter=$EMULATOR_FILTER
  # shellcheck disable=SC2086 # the filter is a list of test-name filters
  plugin_step $h env DQPLB_PLUGIN_SO=/mnt/host/harness/libnccl_net_dqplb.so NCCL_DQPLB_TRANSPORT=verbs \
    NCCL_IB_TIMEOUT=14 timeout 1200 ./harness/$h --test-threads=1 $filter
done
# perftest baselines: loopback server/client pair on rxe0. The server may take a while to listen
# under emulation: the client retries; every process runs under a timeout, so nothing can hang.
perf() { # perf NAME ARGS...
  name=$1
  shift
  t=$(now)
  r0=$(retries)
  timeout 300 "${PERF_BIN:-ib_write_bw}" -d "$SOFTROCE_DEV" -x "$SOFTROCE_GID_INDEX" -u "${BENCH_IB_TIMEOUT:-14}" -F ${PERF_FLAGS---report_gbits} "$@" \
    >"logs/$name.server.log" 2>&1 &
  srv=$!
  crc=1
  for _try in 1 2 3 4 5 6 7 8 9 10; do
    sleep 1
    timeout 300 "${PERF_BIN:-ib_write_bw}" -d "$SOFTROCE_DEV" -x "$SOFTROCE_GID_INDEX" -u "${BENCH_IB_TIMEOUT:-14}" -F ${PERF_FLAGS---report_gbits} "$@" \
      127.0.0.1 >"logs/$name.log" 2>&1
    crc=$?
    [ $crc -eq 0 ] && break
    grep -q "Couldn't connect" "logs/$name.log" || break # a real failure, not "not listening yet"
  done
  [ $crc -eq 0 ] || kill "$srv" 2>/dev/null
  wait $srv
  src=$?
  [ $crc -eq 0 ] && [ $src -eq 0 ]
  prc=$?
  echo "$r0 $(retries)" >"logs/$name.retries"
  record "$name" $prc "$t"
}
# quick (default): 1 MiB only; full: also 64 MiB (perftest's own buffer setup for 64 MiB x 4 QPs
# costs ~100 s under TCG, so CI keeps to quick); bench: bench-steps.txt (below); 0: none
case ${PERFTEST:-quick} in
  quick) perf perftest_write_bw_q4_1MiB -q 4 -s 1048576 -n 50 ;;
  full)
    perf perftest_write_bw_q4_1MiB -q 4 -s 1048576 -n 100
    perf perftest_write_bw_q4_64MiB -q 4 -s 67108864 -n 5
    # 8-byte round trip (ib_write_lat takes no --report_gbits)
    PERF_BIN=ib_write_lat PERF_FLAGS= perf perftest_write_lat_8B -s 8 -n 1000
    ;;
esac
# the plugin over the same rxe0, same QP count, through its vtable (dqplb perf --transport verbs)
dqperf() { # dqperf NAME [VAR=VALUE...] ARGS...  (leading VAR=VALUE: environment of this run)
  name=$1
  shift
  vars=""
  while [ $# -gt 0 ]; do
    case $1 in
      *=*) vars="$vars $1" && shift ;;
      *) break ;;
    esac
  done
  [ -x "${DQPLB_BIN:-perf/dqplb}" ] || return 0
  t=$(now)
  r0=$(retries)
  # shellcheck disable=SC2086 # vars is a list of VAR=VALUE words
  env $vars NCCL_SOCKET_IFNAME=lo NCCL_IB_TIMEOUT=${BENCH_IB_TIMEOUT:-14} timeout 600 "./${DQPLB_BIN:-perf/dqplb}" perf --transport verbs --qps 4 --no-check "$@" \
    >"logs/$name.log" 2>&1
  drc=$?
  echo "$r0 $(retries)" >"logs/$name.retries"
  record "$name" $drc "$t"
}
case ${PERFTEST:-quick} in
  quick) dqperf dqplb_perf_verbs_q4_1MiB --min-bytes 1M --max-bytes 1M --iters 50 --warmup 5 ;;
  full)
    dqperf dqplb_perf_verbs_q4_1MiB --min-bytes 1M --max-bytes 1M --iters 100 --warmup 5
    dqperf dqplb_perf_verbs_q4_64MiB --min-bytes 64M --max-bytes 64M --iters 5 --warmup 1
    # rxe under TCG pays per work request: the same transfer with 16 MiB segments
    dqperf dqplb_perf_verbs_q4_64MiB_seg16M --min-bytes 64M --max-bytes 64M --iters 5 --warmup 1 --segment 16M
    # --warmup 4 uses each of the 4 in-flight buffers once before the timed window (registration
    # itself now happens at regMr, before both; the pair compares with the earlier lazy figures)
    dqperf dqplb_perf_verbs_q4_64MiB_warm4 --min-bytes 64M --max-bytes 64M --iters 5 --warmup 4
    dqperf dqplb_perf_verbs_latency_8B --latency --iters 1000 --warmup 100
    ;;
esac
# bench: perftest and the plugin at every size of bench-steps.txt, in its order, in this boot
# (dqbase: the same plugin runs with the baseline binary perf/dqplb-base, when shipped)
if [ "${PERFTEST:-quick}" = bench ] && [ -f bench-steps.txt ]; then
  grep -v '^#' bench-steps.txt >bench.list
  while read -r kind name args <&3; do
    [ -n "$kind" ] || continue
    # shellcheck disable=SC2086 # args is the step's argument list
    case $kind in
      bw) PERF_BIN=ib_write_bw PERF_FLAGS=--report_gbits perf "$name" $args ;;
      lat) PERF_BIN=ib_write_lat PERF_FLAGS= perf "$name" $args ;;
      # perftest with one busy process beside it, as dqplb perf's receiver polls (ib_write_bw's
      # server does not): what a spinning receiver leaves rxe of the 2 vCPUs
      bwhog)
        sh -c 'while :; do :; done' &
        hog=$!
        PERF_BIN=ib_write_bw PERF_FLAGS=--report_gbits perf "$name" $args
        kill $hog
        wait $hog 2>/dev/null
        ;;
      dq) DQPLB_BIN=perf/dqplb dqperf "$name" $args ;;
      dqbase) [ -x perf/dqplb-base ] && DQPLB_BIN=perf/dqplb-base dqperf "$name" $args ;;
    esac
  done 3<bench.list
fi
# The operator's command on rxe0 (perf/dqplb ships with every run): `dqplb devices` must list
# rxe0 port 1 ACTIVE and used, its RoCE v2 GID (10.77.0.1 on dummy0, index $SOFTROCE_GID_INDEX)
# selected, in the table and in --json; each step's log holds the output, then the failed checks.
want() { # want FILE REGEX WHAT: fails, naming WHAT, unless a line of FILE matches REGEX
  grep -Eq "$2" "$1" || { echo "devices-check: FAILED: no $3 (no line matches /$2/)" && return 1; }
}
devices_table() {
  ./perf/dqplb devices >/tmp/devices.out 2>&1
  drc=$?
  cat /tmp/devices.out
  echo "---- checks: SOFTROCE_GID_INDEX=$SOFTROCE_GID_INDEX"
  [ $drc = 0 ] || { echo "devices-check: FAILED: exit status $drc" && return 1; }
  want /tmp/devices.out '^rxe0 +1 +ACTIVE .* yes$' "rxe0 port 1 ACTIVE, used: yes" || return 1
  want /tmp/devices.out "^ +gid +$SOFTROCE_GID_INDEX RoCE v2 +::ffff:10\.77\.0\.1 +10\.77\.0\.1 on dummy0  <- selected$" \
    "RoCE v2 GID $SOFTROCE_GID_INDEX (10.77.0.1 on dummy0) selected" || return 1
  echo "devices-check: ok"
}
devices_json() {
  ./perf/dqplb devices --json >/tmp/devices.json 2>&1
  drc=$?
  cat /tmp/devices.json
  echo "---- checks: SOFTROCE_GID_INDEX=$SOFTROCE_GID_INDEX"
  [ $drc = 0 ] || { echo "devices-check: FAILED: exit status $drc" && return 1; }
  want /tmp/devices.json '^ *"device": "rxe0",$' '"device": "rxe0"' || return 1
  want /tmp/devices.json '^ *"state": "ACTIVE",$' '"state": "ACTIVE"' || return 1
  want /tmp/devices.json '^ *"kind": "RoCE v2",$' '"kind": "RoCE v2"' || return 1
  want /tmp/devices.json '^ *"address": "10\.77\.0\.1",$' '"address": "10.77.0.1"' || return 1
  want /tmp/devices.json "^ *\"selected_gid\": $SOFTROCE_GID_INDEX,\$" "\"selected_gid\": $SOFTROCE_GID_INDEX" || return 1
  want /tmp/devices.json '^ *"used": true,$' '"used": true' || return 1
  echo "devices-check: ok"
}
# A two-process run as on two nodes: `dqplb perf --server` in the background, `dqplb perf --client
# 10.77.0.1` (rxe0's address; TCP control connection) sending its options, both processes' plugin
# over verbs on rxe0, every received byte checked; the log holds the client's then the server's
# output. plugin_step records rxe0's packet counter around it.
perf2() { # perf2 ARGS...: the client's options
  rm -f /tmp/perf2.server.log
  NCCL_SOCKET_IFNAME=lo NCCL_IB_TIMEOUT=14 timeout 600 ./perf/dqplb perf --server --port 0 >/tmp/perf2.server.log 2>&1 &
  srv=$!
  port=
  for _i in $(seq 1 60); do
    port=$(sed -n 's/.*listening on 0\.0\.0\.0:\([0-9][0-9]*\) .*/\1/p' /tmp/perf2.server.log)
    [ -n "$port" ] && break
    sleep 1
  done
  if [ -z "$port" ]; then
    echo "perf2: FAILED: the server printed no port"
    kill $srv 2>/dev/null
    wait $srv
    cat /tmp/perf2.server.log
    return 1
  fi
  NCCL_SOCKET_IFNAME=lo NCCL_IB_TIMEOUT=14 timeout 600 ./perf/dqplb perf --client 10.77.0.1 --port "$port" \
    --transport verbs "$@"
  crc=$?
  [ $crc = 0 ] || kill $srv 2>/dev/null
  wait $srv
  prc=$?
  echo "---- server (exit status $prc)"
  cat /tmp/perf2.server.log
  [ $crc = 0 ] && [ $prc = 0 ]
}
plain_step() { # plain_step NAME CMD...
  name=$1
  shift
  t=$(now)
  echo "guest-suite: running $name"
  "$@" >"logs/$name.log" 2>&1
  record "$name" $? "$t"
}
if [ -x perf/dqplb ]; then
  plain_step dqplb_devices devices_table
  plain_step dqplb_devices_json devices_json
  PERF2="--qps 4 --min-bytes 4K --max-bytes 1M --step-factor 16 --iters 20 --warmup 2"
  # shellcheck disable=SC2086 # PERF2 is an option list
  plugin_step dqplb_perf_2proc_verbs perf2 $PERF2
  # shellcheck disable=SC2086
  plugin_step dqplb_perf_2proc_verbs_bidir perf2 $PERF2 --bidir
fi
# rxe's own counters (drops, retries, RNR) explain slow or stalled runs
for c in /sys/class/infiniband/"$SOFTROCE_DEV"/ports/1/hw_counters/*; do
  v=$(cat "$c" 2>/dev/null) && [ "$v" != 0 ] && echo "${c##*/} $v"
done >logs/rxe_counters.log
echo "guest-suite: done (failed=$FAILED)"
exit $FAILED
