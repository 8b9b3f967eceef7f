#!/usr/bin/env bash
# Installs the plugin, the operator command and the example site configs under a prefix:
#
#   bash scripts/install.sh --prefix DIR [--portable] [--no-build]
#
#   DIR/lib/libnccl-net-dqplb.so        the NCCL net plugin (NCCL_NET_PLUGIN=DIR/lib/libnccl-net-dqplb.so)
#   DIR/bin/dqplb                       the operator command (plan, check, perf, paths-bench)
#   DIR/share/dqplb/plugin-conf/*.toml  the embedded default, example sites, DCQCN profiles
#
# It builds first (scripts/build.sh, or scripts/build.sh --portable for the glibc 2.28 artifacts
# in dist/) unless --no-build. It installs no site config: a file at /etc/nccl-dqplb.toml is read
# by every NCCL job on the host, so that is an operator's decision (see the message at the end).
# DESTDIR is honoured for staging (files go to $DESTDIR$DIR).
set -euo pipefail
cd "$(dirname "$0")/.."

prefix="" portable=0 build=1
while [ $# -gt 0 ]; do
  case "$1" in
    --prefix) [ $# -ge 2 ] || { echo "install.sh: --prefix needs a directory" >&2; exit 2; }; prefix=$2; shift ;;
    --prefix=*) prefix=${1#--prefix=} ;;
    --portable) portable=1 ;;
    --no-build) build=0 ;;
    -h | --help) sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "install.sh: unknown option '$1'" >&2; exit 2 ;;
  esac
  shift
done
[ -n "$prefix" ] || { echo "usage: bash scripts/install.sh --prefix DIR [--portable] [--no-build]" >&2; exit 2; }
case "$prefix" in /*) ;; *) prefix="$PWD/$prefix" ;; esac

if [ $portable = 1 ]; then
  [ $build = 0 ] || bash scripts/build.sh --portable
  lib=dist/libnccl-net-dqplb.so bin=dist/dqplb
else
  [ $build = 0 ] || bash scripts/build.sh
  lib=target/release/libnccl-net-dqplb.so bin=target/release/dqplb
fi
for f in "$lib" "$bin"; do
  [ -f "$f" ] || { echo "install.sh: $f is missing (build it, or drop --no-build)" >&2; exit 1; }
done

dest="${DESTDIR:-}$prefix"
install -d "$dest/lib" "$dest/bin" "$dest/share/dqplb/plugin-conf"
install -m 0755 "$lib" "$dest/lib/libnccl-net-dqplb.so"
install -m 0755 "$bin" "$dest/bin/dqplb"
install -m 0644 plugin-conf/*.toml "$dest/share/dqplb/plugin-conf/"

echo "installed into $dest:"
echo "  lib/libnccl-net-dqplb.so  bin/dqplb  share/dqplb/plugin-conf/{$(cd plugin-conf && ls -- *.toml | tr '\n' ' ' | sed 's/ $//;s/ /,/g')}"
cat <<MSG

Use it:
  PyTorch:     NCCL_NET_PLUGIN=$prefix/lib/libnccl-net-dqplb.so NCCL_NET=DQPLB torchrun ...
  nccl-tests:  NCCL_NET_PLUGIN=$prefix/lib/libnccl-net-dqplb.so NCCL_NET=DQPLB mpirun ... ./build/all_reduce_perf -b 8 -e 4G -f 2 -g 1
  check:       $prefix/bin/dqplb plan --hca "\$NCCL_IB_HCA"

No site config was installed; the plugin uses its embedded default until an operator puts one at
/etc/nccl-dqplb.toml (read by every NCCL job on the host) or points NCCL_DQPLB_CONF at one, e.g.
  cp $prefix/share/dqplb/plugin-conf/rail-optimized-8rail-roce.toml /etc/nccl-dqplb.toml
MSG
