#!/usr/bin/env bash
# Builds the release plugin and CLI, then names the library as NCCL looks for it:
# target/release/libnccl-net-dqplb.so (NCCL_NET_PLUGIN=dqplb) next to the `dqplb` command.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup-deps.sh
cargo build --release --locked --quiet
cp -f target/release/libnccl_net_dqplb.so target/release/libnccl-net-dqplb.so
syms=$(nm -D --defined-only target/release/libnccl-net-dqplb.so | awk '{print $3}' | tr '\n' ' ')
echo "built target/release/libnccl-net-dqplb.so (exports: $syms) and target/release/dqplb"
