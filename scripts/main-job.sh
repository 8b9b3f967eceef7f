#!/usr/bin/env bash
# The main job on a fresh Debian/Ubuntu machine: build the plugin, show how it would treat each
# connection class, then run a two-process transfer through its vtable on loopback and print results.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
export NCCL_SOCKET_IFNAME=${NCCL_SOCKET_IFNAME:-lo}
unset NCCL_DQPLB_CONF || true
echo
echo "== dqplb plan (embedded default config, two sample NICs on rails 0 and 1)"
target/release/dqplb plan --hca '=mlx5_0:1:0,mlx5_1:1:1'
echo
echo "== dqplb perf: sender and receiver processes on loopback through ncclNetPlugin_v8"
target/release/dqplb perf "$@"
