#!/usr/bin/env bash
# Builds the release plugin and CLI, then names the library as NCCL looks for it.
#
#   bash scripts/build.sh             target/release/libnccl-net-dqplb.so (NCCL_NET_PLUGIN=dqplb)
#                                     next to the `dqplb` command, linked against this machine's glibc
#   bash scripts/build.sh --portable  dist/libnccl-net-dqplb.so and dist/dqplb for any x86_64 Linux
#                                     with glibc >= 2.28 (RHEL 8, Debian 10, Ubuntu 20.04 and later):
#                                     cargo-zigbuild with zig from PyPI, installed into target/tools/
#                                     (nothing system-wide but python3-venv); the script fails if the
#                                     artifacts need a GLIBC symbol version above 2.28
#
# Both report the sizes with and without symbols (the release profile keeps line tables so that a
# panic caught at the plugin boundary logs file:line; `strip` the .so for the smallest install).
set -euo pipefail
cd "$(dirname "$0")/.."

portable=0
case "${1:-}" in
  "") ;;
  --portable) portable=1 ;;
  -h | --help) sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
  *) echo "build.sh: unknown option '$1' (use --portable or nothing)" >&2; exit 2 ;;
esac

GLIBC_MAX=2.28
ZIGLANG_VERSION=0.17.1
ZIGBUILD_VERSION=0.24.1
TOOLS=target/tools

t=$SECONDS
if [ $portable = 0 ]; then bash scripts/setup-deps.sh --build; else bash scripts/setup-deps.sh --portable; fi
echo "build: system packages checked/installed in $((SECONDS - t)) s"
if ! command -v cargo >/dev/null 2>&1 && [ -x "${CARGO_HOME:-$HOME/.cargo}/bin/cargo" ]; then
  export PATH="${CARGO_HOME:-$HOME/.cargo}/bin:$PATH"
fi

# "<bytes> unstripped, <bytes> stripped" for a file
sizes() {
  local tmp
  tmp=$(mktemp)
  strip -o "$tmp" "$1"
  printf '%s: %s bytes (%s), stripped %s bytes (%s)\n' "$1" \
    "$(stat -c %s "$1")" "$(numfmt --to=iec "$(stat -c %s "$1")")" \
    "$(stat -c %s "$tmp")" "$(numfmt --to=iec "$(stat -c %s "$tmp")")"
  rm -f "$tmp"
}

# highest GLIBC_x.y symbol version a file needs (empty when none)
glibc_max() {
  objdump -T "$1" | grep -o 'GLIBC_[0-9][0-9.]*' | sed 's/GLIBC_//' | sort -uV | tail -n1
}

if [ $portable = 0 ]; then
  t=$SECONDS
  cargo build --release --locked --quiet
  echo "build: cargo build --release in $((SECONDS - t)) s"
  cp -f target/release/libnccl_net_dqplb.so target/release/libnccl-net-dqplb.so
  syms=$(nm -D --defined-only target/release/libnccl-net-dqplb.so | awk '{print $3}' | tr '\n' ' ')
  echo "built target/release/libnccl-net-dqplb.so (exports: $syms) and target/release/dqplb"
  sizes target/release/libnccl-net-dqplb.so
  sizes target/release/dqplb
  exit 0
fi

# ---- portable build -------------------------------------------------------------------------
t=$SECONDS
venv=$TOOLS/venv
if ! "$venv/bin/cargo-zigbuild" --version 2>/dev/null | grep -qF "$ZIGBUILD_VERSION" ||
  ! "$venv/bin/python3" -m ziglang version 2>/dev/null | grep -qF "$ZIGLANG_VERSION"; then
  echo "build: installing ziglang $ZIGLANG_VERSION and cargo-zigbuild $ZIGBUILD_VERSION from PyPI into $venv"
  rm -rf "$venv"
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check \
    "ziglang==$ZIGLANG_VERSION" "cargo-zigbuild==$ZIGBUILD_VERSION"
fi
# cargo-zigbuild runs zig as `python3 -m ziglang` from the venv
export PATH="$PWD/$venv/bin:$PATH"
echo "build: $(cargo-zigbuild --version), zig $(python3 -m ziglang version) ready in $((SECONDS - t)) s"

t=$SECONDS
target=x86_64-unknown-linux-gnu
# Its own target dir: zig-linked build scripts and the host build's must not share artifacts.
cargo zigbuild --release --locked --quiet --target "$target.$GLIBC_MAX" --target-dir target/portable
echo "build: cargo zigbuild --release --target $target.$GLIBC_MAX in $((SECONDS - t)) s"
mkdir -p dist
cp -f "target/portable/$target/release/libnccl_net_dqplb.so" dist/libnccl-net-dqplb.so
cp -f "target/portable/$target/release/dqplb" dist/dqplb

bad=0
for f in dist/libnccl-net-dqplb.so dist/dqplb; do
  v=$(glibc_max "$f")
  if [ -n "$v" ] && [ "$(printf '%s\n%s\n' "$v" "$GLIBC_MAX" | sort -V | tail -n1)" != "$GLIBC_MAX" ]; then
    echo "build: $f needs GLIBC_$v, above the portable limit GLIBC_$GLIBC_MAX:" >&2
    objdump -T "$f" | grep -E "GLIBC_$v([^0-9.]|$)" | head -n 10 >&2
    bad=1
  else
    echo "build: $f: highest GLIBC symbol version ${v:-none} (limit $GLIBC_MAX)"
  fi
done
[ $bad = 0 ] || exit 1
# it loads here (dlopen, as NCCL does) and the command runs
if ! python3 -c 'import ctypes, sys; ctypes.CDLL(sys.argv[1]).ncclNetPlugin_v8' dist/libnccl-net-dqplb.so; then
  echo "build: dist/libnccl-net-dqplb.so does not dlopen here" >&2
  exit 1
fi
dist/dqplb --help >/dev/null || { echo "build: dist/dqplb --help failed" >&2; exit 1; }
echo "build: dist/libnccl-net-dqplb.so dlopens and dist/dqplb --help runs on this machine"
syms=$(nm -D --defined-only dist/libnccl-net-dqplb.so | awk '{print $3}' | tr '\n' ' ')
echo "built dist/libnccl-net-dqplb.so (exports: $syms) and dist/dqplb"
sizes dist/libnccl-net-dqplb.so
sizes dist/dqplb
