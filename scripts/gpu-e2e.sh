#!/usr/bin/env bash
# gpu-e2e.sh: real-NCCL end-to-end run of the DQPLB net plugin on one Linux machine with an NVIDIA GPU.
# Two ranks on one GPU (own NCCL_HOSTID each) connect through the plugin; see docs/records/gpu-e2e.md.
set -euo pipefail

SCRIPT_DIR=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd)
REPO_ROOT=$(cd -- "$SCRIPT_DIR/.." && pwd)
PYTHON=${PYTHON:-python3}
PLUGIN_NAME=DQPLB
DEFAULT_PLUGIN="$REPO_ROOT/target/release/libnccl-net-dqplb.so"
BUDGET_S=470 # everything after the plugin library exists must end within 8 minutes

# Exit codes (documented in docs/records/gpu-e2e.md).
EXIT_FAIL=1
EXIT_USAGE=2
EXIT_ENV=3
EXIT_PLUGIN=4

usage() {
  cat <<EOF
Usage: scripts/gpu-e2e.sh [options]

Runs torch.distributed all_reduce, all_gather, reduce_scatter and send/recv (8 B .. 256 MiB,
float32 and bfloat16, exact result checks) as two ranks on one GPU through the DQPLB NCCL net
plugin, then the same with NCCL's built-in Socket transport, then nccl-tests all_reduce_perf
through the plugin when its sources and MPI are available. Writes logs, summary.md,
summary.csv and verdict.json to the output folder.

Options:
  --out DIR             output folder (default: out/gpu-e2e-<date>-<time>)
  --plugin PATH         plugin library (default: target/release/libnccl-net-dqplb.so,
                        built with scripts/build.sh when missing)
  --max-bytes N         largest size, e.g. 64M (default 256M; binary units, min 8)
  --quick               sizes up to 1M (unless --max-bytes), fewer iterations
  --skip-socket         no built-in Socket baseline (no ratio)
  --skip-nccl-tests     no nccl-tests all_reduce_perf run
  --nccl-tests-dir DIR  nccl-tests source tree (nothing is downloaded); a failed build
                        then fails the run
  --enforce-ratio       fail when plugin busbw < Socket busbw at >= 64 MiB
                        (otherwise the ratio is recorded and only warned about)
  --check-env           report what this machine has and lacks, then exit
  -h, --help            this text

Exit codes: 0 pass; 1 a wrong result, the plugin not shown in use, a failed or timed-out
stage (or a low ratio with --enforce-ratio); 2 usage error; 3 required item missing
(--check-env or preflight); 4 plugin library missing and not buildable.
EOF
}

die_usage() {
  echo "gpu-e2e.sh: $*" >&2
  echo "Try 'scripts/gpu-e2e.sh --help'." >&2
  exit "$EXIT_USAGE"
}

# parse_bytes TEXT: prints the byte count of 8, 64K, 256M, 1G (binary units) or fails.
parse_bytes() {
  local text=$1 num unit
  if [[ ! $text =~ ^([0-9]+)([KkMmGg]?)$ ]]; then
    return 1
  fi
  num=${BASH_REMATCH[1]}
  unit=${BASH_REMATCH[2]}
  ((${#num} <= 12)) || return 1
  case "$unit" in
    K | k) echo $((10#$num << 10)) ;;
    M | m) echo $((10#$num << 20)) ;;
    G | g) echo $((10#$num << 30)) ;;
    *) echo $((10#$num)) ;;
  esac
}

OUT_DIR=""
PLUGIN=""
MAX_BYTES=""
QUICK=0
SKIP_SOCKET=0
SKIP_NCCL_TESTS=0
NCCL_TESTS_DIR_ARG=""
ENFORCE_RATIO=0
CHECK_ENV=0

need_value() {
  # need_value OPTION REMAINING_ARG_COUNT VALUE
  if (($2 < 2)) || [[ -z $3 || $3 == --* ]]; then
    die_usage "option $1 needs a value"
  fi
}

while (($# > 0)); do
  case "$1" in
    -h | --help)
      usage
      exit 0
      ;;
    --out | --plugin | --max-bytes | --nccl-tests-dir)
      need_value "$1" "$#" "${2:-}"
      case "$1" in
        --out) OUT_DIR=$2 ;;
        --plugin) PLUGIN=$2 ;;
        --max-bytes) MAX_BYTES=$2 ;;
        --nccl-tests-dir) NCCL_TESTS_DIR_ARG=$2 ;;
      esac
      shift 2
      ;;
    --out=* | --plugin=* | --max-bytes=* | --nccl-tests-dir=*)
      value=${1#*=}
      [[ -n $value ]] || die_usage "option ${1%%=*} needs a value"
      case "$1" in
        --out=*) OUT_DIR=$value ;;
        --plugin=*) PLUGIN=$value ;;
        --max-bytes=*) MAX_BYTES=$value ;;
        --nccl-tests-dir=*) NCCL_TESTS_DIR_ARG=$value ;;
      esac
      shift
      ;;
    --quick) QUICK=1 && shift ;;
    --skip-socket) SKIP_SOCKET=1 && shift ;;
    --skip-nccl-tests) SKIP_NCCL_TESTS=1 && shift ;;
    --enforce-ratio) ENFORCE_RATIO=1 && shift ;;
    --check-env) CHECK_ENV=1 && shift ;;
    *) die_usage "unknown option '$1'" ;;
  esac
done

if [[ -n $MAX_BYTES ]]; then
  MAX_BYTES_N=$(parse_bytes "$MAX_BYTES") || die_usage "--max-bytes: not a byte size: '$MAX_BYTES' (use e.g. 8, 64K, 256M, 1G)"
  ((MAX_BYTES_N >= 8)) || die_usage "--max-bytes: $MAX_BYTES is below the smallest size, 8 bytes"
  ((MAX_BYTES_N <= (4 << 30))) || die_usage "--max-bytes: $MAX_BYTES is above 4G"
elif ((QUICK)); then
  MAX_BYTES_N=$((1 << 20))
else
  MAX_BYTES_N=$((256 << 20))
fi
if [[ -n $NCCL_TESTS_DIR_ARG && ! -d $NCCL_TESTS_DIR_ARG ]]; then
  die_usage "--nccl-tests-dir: no such folder: $NCCL_TESTS_DIR_ARG"
fi

PLUGIN=${PLUGIN:-$DEFAULT_PLUGIN}
[[ $PLUGIN == /* ]] || PLUGIN="$PWD/$PLUGIN"
CAN_BUILD=0
if [[ $PLUGIN == "$DEFAULT_PLUGIN" && -f "$REPO_ROOT/scripts/build.sh" ]] && command -v cargo >/dev/null 2>&1; then
  CAN_BUILD=1
fi

export PYTHONPATH="$SCRIPT_DIR${PYTHONPATH:+:$PYTHONPATH}"
if ! command -v "$PYTHON" >/dev/null 2>&1; then
  echo "gpu-e2e.sh: $PYTHON not found (set PYTHON=...)" >&2
  exit "$EXIT_ENV"
fi

check_env() {
  local args=(--plugin "$PLUGIN" --plugin-name "$PLUGIN_NAME" --python "$PYTHON")
  if [[ -n $NCCL_TESTS_DIR_ARG ]]; then args+=(--nccl-tests-dir "$NCCL_TESTS_DIR_ARG"); fi
  if ((CAN_BUILD)); then args+=(--can-build); fi
  "$PYTHON" -m gpu_e2e.check_env "${args[@]}" "$@"
}

if ((CHECK_ENV)); then
  set +e
  check_env
  rc=$?
  set -e
  exit "$rc"
fi

if [[ -z $OUT_DIR ]]; then
  OUT_DIR="$REPO_ROOT/out/gpu-e2e-$(date +%Y%m%d-%H%M%S)"
fi
mkdir -p "$OUT_DIR"
OUT_DIR=$(cd -- "$OUT_DIR" && pwd)
STAGES="$OUT_DIR/stages.tsv"
: >"$STAGES"

log() { echo "[gpu-e2e $(date +%H:%M:%S)] $*"; }
record_stage() { printf '%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "${4:-}" >>"$STAGES"; }

# 1. The plugin library.
if [[ ! -f $PLUGIN ]]; then
  if ((CAN_BUILD)); then
    log "building the plugin with scripts/build.sh (not counted in the 8-minute budget)"
    t0=$SECONDS
    if ! bash "$REPO_ROOT/scripts/build.sh" >"$OUT_DIR/build-plugin.log" 2>&1; then
      record_stage build-plugin FAILED $((SECONDS - t0)) "see build-plugin.log"
      echo "gpu-e2e.sh: scripts/build.sh failed, see $OUT_DIR/build-plugin.log" >&2
      exit "$EXIT_PLUGIN"
    fi
    record_stage build-plugin OK $((SECONDS - t0)) ""
  fi
  if [[ ! -f $PLUGIN ]]; then
    echo "gpu-e2e.sh: plugin library $PLUGIN not found (build it with scripts/build.sh or give --plugin)" >&2
    exit "$EXIT_PLUGIN"
  fi
fi

# 2. Preflight: everything required must be there.
START=$SECONDS
log "checking the environment"
set +e
check_env --json "$OUT_DIR/env.json" | tee "$OUT_DIR/check-env.txt"
rc=${PIPESTATUS[0]}
set -e
if ((rc != 0)); then
  echo "gpu-e2e.sh: required items missing (see above); nothing run" >&2
  exit "$EXIT_ENV"
fi
# json_get FILE KEY...: prints FILE's value at that key path ("" when absent).
json_get() {
  "$PYTHON" -c '
import json, sys
v = json.load(open(sys.argv[1]))
for k in sys.argv[2:]:
    v = v.get(k) if isinstance(v, dict) else None
print("" if v is None else v)' "$@"
}
NCCL_VERSION=$(json_get "$OUT_DIR/env.json" nccl version)
DTYPES=float32,bfloat16
if [[ $(json_get "$OUT_DIR/env.json" bf16) != True ]]; then
  DTYPES=float32
  log "WARNING: this GPU has no bfloat16 support: float32 only"
fi
log "NCCL $NCCL_VERSION, plugin $PLUGIN, sizes 8 B .. $MAX_BYTES_N B, output $OUT_DIR"

remaining() { echo $((BUDGET_S - (SECONDS - START))); }

# run_launch MODE BUDGET_S: one torch.distributed run (two ranks).
run_launch() {
  local mode=$1 budget=$2 left t0 rc
  left=$(remaining)
  ((budget < left)) || budget=$left
  if ((budget < 20)); then
    record_stage "$mode" TIMEOUT 0 "no time left in the ${BUDGET_S}s budget"
    return 0
  fi
  local args=(--mode "$mode" --out "$OUT_DIR/$mode" --max-bytes "$MAX_BYTES_N" --dtypes "$DTYPES"
    --nccl-version "$NCCL_VERSION" --timeout-s "$budget" --plugin "$PLUGIN" --plugin-name "$PLUGIN_NAME")
  if ((QUICK)); then args+=(--quick); fi
  log "run $mode: two ranks, timeout ${budget}s"
  t0=$SECONDS
  set +e
  "$PYTHON" -m gpu_e2e.launch "${args[@]}"
  rc=$?
  set -e
  if ((rc == 0)); then
    record_stage "$mode" OK $((SECONDS - t0)) ""
  elif grep -q '"timed_out": true' "$OUT_DIR/$mode/run.json" 2>/dev/null; then
    record_stage "$mode" TIMEOUT $((SECONDS - t0)) "ranks killed after ${budget}s"
  else
    record_stage "$mode" FAILED $((SECONDS - t0)) "launch exit $rc, see $mode/rank*.log"
  fi
}

# 3. Plugin run, 4. Socket baseline.
run_launch plugin 200
if ((SKIP_SOCKET)); then
  record_stage socket SKIPPED 0 "--skip-socket"
else
  run_launch socket 150
fi

# 5. nccl-tests all_reduce_perf through the plugin.
if ((SKIP_NCCL_TESTS)); then
  record_stage nccl-tests SKIPPED 0 "--skip-nccl-tests"
else
  left=$(remaining)
  if ((left < 30)); then
    record_stage nccl-tests SKIPPED 0 "no time left in the ${BUDGET_S}s budget"
  else
    build_s=$((left * 6 / 10))
    run_s=$((left - build_s))
    nt_args=(--env "$OUT_DIR/env.json" --out "$OUT_DIR/nccl-tests" --plugin "$PLUGIN"
      --plugin-name "$PLUGIN_NAME" --max-bytes "$MAX_BYTES_N" --build-timeout-s "$build_s" --run-timeout-s "$run_s")
    if [[ -n $NCCL_TESTS_DIR_ARG ]]; then nt_args+=(--src "$NCCL_TESTS_DIR_ARG" --src-given); fi
    t0=$SECONDS
    set +e
    "$PYTHON" -m gpu_e2e.nccl_tests "${nt_args[@]}"
    rc=$?
    set -e
    status=$(json_get "$OUT_DIR/nccl-tests/status.json" status 2>/dev/null || true)
    reason=$(json_get "$OUT_DIR/nccl-tests/status.json" reason 2>/dev/null || true)
    record_stage nccl-tests "${status:-FAILED}" $((SECONDS - t0)) "${reason:-exit $rc}"
  fi
fi

# 6. Summary and verdict.
sum_args=(--out "$OUT_DIR" --plugin-name "$PLUGIN_NAME" --plugin "$PLUGIN")
if ((ENFORCE_RATIO)); then sum_args+=(--enforce-ratio); fi
if ((SKIP_SOCKET)); then sum_args+=(--skip-socket); fi
log "total $((SECONDS - START))s after the plugin was available"
set +e
"$PYTHON" -m gpu_e2e.summary "${sum_args[@]}"
rc=$?
set -e
((rc == 0)) || exit "$EXIT_FAIL"
exit 0
