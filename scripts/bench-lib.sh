# Shared by scripts/tcp-bench.sh and scripts/peer-bench.sh (sourced): one timed `dqplb perf` run
# reduced to "GB/s CPU-s-per-GB", and the median of a column of numbers.

# timed_perf OUT SIZE ITERS WARMUP CMD... -> "GBps CPU_s_per_GB" on stdout, or "fail" (the first
# 600 bytes of its stderr go to ours). CMD is the whole `dqplb perf ...` command line, run under
# /usr/bin/time with `--min-bytes SIZE --max-bytes SIZE --iters ITERS --warmup WARMUP --no-check
# --format csv` appended; CPU is user + system of the command and its children (both processes)
# over the bytes of warm-up and timed iterations. Scratch files go in OUT.
timed_perf() {
    local out=$1 size=$2 it=$3 wu=$4
    shift 4
    if ! /usr/bin/time -f "CPU %U %S" -o "$out/time" "$@" --min-bytes "$size" --max-bytes "$size" \
        --iters "$it" --warmup "$wu" --no-check --format csv > "$out/csv" 2> "$out/err"; then
        echo fail; head -c 600 "$out/err" | sed 's/^/    /' >&2; return
    fi
    awk -F, -v it="$it" -v wu="$wu" -v size="$size" '
        FNR == 1 && FILENAME ~ /time$/ { cpu = $0; sub(/^CPU /, "", cpu); split(cpu, c, " ") }
        FILENAME ~ /csv$/ && $1 == size { bw = $6 }
        END { gb = size * (it + wu) / 1e9; printf "%.3f %.3f\n", bw, (c[1] + c[2]) / gb }
    ' "$out/time" "$out/csv"
}

# median: the median of the numbers on stdin (nothing for no input).
median() {
    sort -g | awk '{ v[NR] = $1 } END { if (NR) print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}
