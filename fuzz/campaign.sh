#!/usr/bin/env bash
# Runs every fuzz target for SECS seconds (default 300), one after another, single process each,
# and prints libFuzzer's final stats per target. Usage: fuzz/campaign.sh [SECS] [TARGET...]
set -u
cd "$(dirname "$0")"
secs=${1:-300}
shift || true
targets=${*:-wire_frames engine_receiver engine_sender_receiver config_toml tcp_stream_bytes}
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-/work/target-fuzz}
for t in $targets; do
    mkdir -p "corpus/$t" "seeds/$t"
    echo "== $t ($secs s)"
    cargo +nightly fuzz run --target-dir "$CARGO_TARGET_DIR/fuzz" "$t" "corpus/$t" "seeds/$t" -- \
        -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 2>&1 |
        grep -E "^(stat::|Done|==[0-9]+==|SUMMARY|thread '|artifact_prefix|Test unit written)|panicked|cov: .*corp" | tail -n 12
done
