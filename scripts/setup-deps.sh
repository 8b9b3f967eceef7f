#!/usr/bin/env bash
# Installs the system packages dqplb-net needs on Debian/Ubuntu (idempotent, quiet when present):
# libibverbs-dev for rdma-sys, libclang 15 for bindgen (rdma-sys breaks with newer clang), python3.
set -euo pipefail
need=()
for p in libibverbs-dev libclang-15-dev clang-15 pkg-config iproute2 python3 gcc libc6-dev; do
  dpkg -s "$p" >/dev/null 2>&1 || need+=("$p")
done
if [ ${#need[@]} -gt 0 ]; then
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo"
  echo "setup-deps: installing ${need[*]}"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get -o DPkg::Lock::Timeout=300 update -qq
  $SUDO apt-get -o DPkg::Lock::Timeout=300 install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
if ! command -v cargo >/dev/null 2>&1; then
  [ -x "$HOME/.cargo/bin/cargo" ] && export PATH="$HOME/.cargo/bin:$PATH"
fi
if ! command -v cargo >/dev/null 2>&1; then
  echo "setup-deps: no Rust toolchain found. Install one (Rust >= 1.80) with rustup: https://rustup.rs" >&2
  exit 1
fi
