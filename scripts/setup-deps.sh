#!/usr/bin/env bash
# Installs the system packages dqplb-net needs on Debian/Ubuntu (idempotent, quiet when present).
#
#   bash scripts/setup-deps.sh --build   what `bash scripts/main-job.sh` / scripts/build.sh need:
#                                        gcc + libc6-dev (linker, C runtime), libclang for bindgen
#                                        (build.rs parses nccl-headers/), ca-certificates (cargo
#                                        fetches crates over https)
#   bash scripts/setup-deps.sh --test    the above plus what `bash scripts/test.sh` needs:
#   bash scripts/setup-deps.sh           libibverbs-dev (a layout test compiles C against
#                                        infiniband/verbs.h), python3, iproute2 (ip, tc),
#                                        util-linux (unshare), binutils (readelf, nm, objdump),
#                                        nftables and ethtool (the fault suite's loss and rate
#                                        cases), and the toolchain's rustfmt and clippy
#   bash scripts/setup-deps.sh --portable  python3 with venv (scripts/build.sh --portable puts zig
#                                        and cargo-zigbuild from PyPI into target/tools/)
#
# The Soft-RoCE VM suite installs its own packages (scripts/softroce/setup.sh). The Rust toolchain
# itself comes from rustup (https://rustup.rs); this script only checks that it is there.
# The verbs transport dlopens libibverbs at run time: nothing of rdma-core is needed to build.
set -euo pipefail
cd "$(dirname "$0")/.."

mode=test
case "${1:-}" in
  --build) mode=build ;;
  --test | "") mode=test ;;
  --portable) mode=portable ;;
  -h | --help)
    sed -n '2,19p' "$0" | sed 's/^# \{0,1\}//'
    exit 0
    ;;
  *)
    echo "setup-deps: unknown option '$1' (use --build, --test or --portable)" >&2
    exit 2
    ;;
esac

pkgs=(gcc libc6-dev ca-certificates)

# libclang for bindgen (any version: the distribution's default)
pkgs+=(libclang-dev)

if [ "$mode" = test ]; then
  pkgs+=(libibverbs-dev python3 iproute2 util-linux binutils nftables ethtool)
fi
if [ "$mode" = portable ]; then
  # Debian's python3 keeps venv/ensurepip in python3-venv; another python3 on PATH may have them
  python3 -c 'import venv, ensurepip' >/dev/null 2>&1 || pkgs+=(python3 python3-venv)
fi

need=()
for p in "${pkgs[@]}"; do
  # dpkg -s also reports removed-but-configured packages; ask for the installed state.
  st=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
  case "$st" in *" installed") ;; *) need+=("$p") ;; esac
done
# de-duplicate (libibverbs-dev can be listed twice)
if [ ${#need[@]} -gt 0 ]; then
  mapfile -t need < <(printf '%s\n' "${need[@]}" | awk '!seen[$0]++')
fi

if [ ${#need[@]} -gt 0 ]; then
  SUDO=""
  if [ "$(id -u)" != 0 ]; then
    if command -v sudo >/dev/null 2>&1; then
      SUDO="sudo"
    else
      echo "setup-deps: need root (or sudo) to install: ${need[*]}" >&2
      exit 1
    fi
  fi
  echo "setup-deps ($mode): installing ${need[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt_opts=(-o DPkg::Lock::Timeout=300 -o Dpkg::Use-Pty=0)
  $SUDO apt-get "${apt_opts[@]}" update -qq
  if ! $SUDO apt-get "${apt_opts[@]}" install -y -qq --no-install-recommends "${need[@]}" >/tmp/setup-deps.$$.log 2>&1; then
    tail -n 30 /tmp/setup-deps.$$.log >&2
    rm -f /tmp/setup-deps.$$.log
    echo "setup-deps: apt-get install ${need[*]} failed" >&2
    exit 1
  fi
  rm -f /tmp/setup-deps.$$.log
fi

if ! command -v cargo >/dev/null 2>&1 && [ -x "${CARGO_HOME:-$HOME/.cargo}/bin/cargo" ]; then
  export PATH="${CARGO_HOME:-$HOME/.cargo}/bin:$PATH"
fi
if ! command -v cargo >/dev/null 2>&1; then
  echo "setup-deps: no Rust toolchain found. Install one (Rust >= 1.88, the workspace's rust-version) with rustup: https://rustup.rs" >&2
  exit 1
fi
if [ "$mode" = test ]; then
  missing=()
  cargo fmt --version >/dev/null 2>&1 || missing+=(rustfmt)
  cargo clippy --version >/dev/null 2>&1 || missing+=(clippy)
  if [ ${#missing[@]} -gt 0 ]; then
    if command -v rustup >/dev/null 2>&1; then
      echo "setup-deps: adding toolchain components ${missing[*]}"
      rustup component add "${missing[@]}"
    else
      echo "setup-deps: the toolchain lacks ${missing[*]} (rustup component add ${missing[*]})" >&2
      exit 1
    fi
  fi
fi
