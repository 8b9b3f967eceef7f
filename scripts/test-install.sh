#!/usr/bin/env bash
# test-install.sh [--portable]: installs into a temporary prefix with scripts/install.sh and checks
# the installed tree: the files and modes, the plugin's exports (the v8..v12 vtables only) and that it dlopens, that no
# site config was installed, that every example site config parses, and that
# `PREFIX/bin/dqplb plan --hca '=mlx5_0:1:0'` runs.
set -uo pipefail
cd "$(dirname "$0")/.."
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
prefix=$tmp/prefix
fails=0 checks=0
check() { # description, command...
  local d=$1
  shift
  checks=$((checks + 1))
  if "$@" >"$tmp/out" 2>&1; then
    echo "ok   $d"
  else
    fails=$((fails + 1))
    echo "FAIL $d"
    sed 's/^/     /' "$tmp/out" | tail -n 20
  fi
}

if ! bash scripts/install.sh --prefix "$prefix" "$@" >"$tmp/install.log" 2>&1; then
  cat "$tmp/install.log"
  echo "test-install: scripts/install.sh --prefix $prefix $* failed"
  exit 1
fi
tail -n 12 "$tmp/install.log"

check "lib/libnccl-net-dqplb.so is an executable file" test -x "$prefix/lib/libnccl-net-dqplb.so"
check "bin/dqplb is an executable file" test -x "$prefix/bin/dqplb"
for f in plugin-conf/*.toml; do
  check "share/dqplb/$f installed, mode 644, same bytes" \
    bash -c '[ "$(stat -c %a "$1")" = 644 ] && cmp "$1" "$2"' _ "$prefix/share/dqplb/$f" "$f"
done
check "no site config installed (no etc/)" test ! -e "$prefix/etc"
check "the plugin exports exactly ncclNetPlugin_v8 .. ncclNetPlugin_v12" \
  bash -c '[ "$(nm -D --defined-only "$1" | awk "{print \$3}" | sort -V | tr "\n" " ")" = "ncclNetPlugin_v8 ncclNetPlugin_v9 ncclNetPlugin_v10 ncclNetPlugin_v11 ncclNetPlugin_v12 " ]' _ "$prefix/lib/libnccl-net-dqplb.so"
check "the plugin dlopens and has ncclNetPlugin_v8" \
  python3 -c 'import ctypes, sys; l = ctypes.CDLL(sys.argv[1]); l.ncclNetPlugin_v8' "$prefix/lib/libnccl-net-dqplb.so"
check "dqplb --help runs" "$prefix/bin/dqplb" --help
check "dqplb plan --hca '=mlx5_0:1:0' runs and names the device" \
  bash -c 'out=$(env -u NCCL_DQPLB_CONF "$1" plan --hca "=mlx5_0:1:0") && grep -q mlx5_0 <<<"$out"' _ "$prefix/bin/dqplb"
for f in default rail-optimized-8rail-roce two-dc; do
  check "dqplb plan --config share/dqplb/plugin-conf/$f.toml parses" \
    env -u NCCL_DQPLB_CONF "$prefix/bin/dqplb" plan --config "$prefix/share/dqplb/plugin-conf/$f.toml" --hca '=mlx5_0:1:0'
done
check "install.sh without --prefix is a usage error (exit 2)" \
  bash -c 'bash scripts/install.sh --no-build; [ $? = 2 ]'

echo "test-install: $((checks - fails)) of $checks checks ok"
[ $fails = 0 ]
