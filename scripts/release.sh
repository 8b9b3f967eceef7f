#!/usr/bin/env bash
# Builds the release set into dist/, all from one commit, one version and one git hash:
#
#   bash scripts/release.sh [--no-build] [--allow-dirty]
#
#   dist/libnccl-net-dqplb.so                                   the plugin (portable: glibc >= 2.28)
#   dist/dqplb                                                  the operator command (portable)
#   dist/dqplb_net-<version>-py3-none-manylinux_2_28_x86_64.whl pip install <it>
#   dist/dqplb-net_<version>_amd64.deb                          apt install ./<it>
#   dist/SHA256SUMS                                             sha256sum -c SHA256SUMS
#
# Steps: scripts/build.sh --portable (skipped with --no-build), the self test on dist/'s library,
# scripts/wheel.sh --auditwheel, scripts/deb.sh, then checks that the wheel and the .deb carry
# the same binaries (the dist/ files with debug info stripped, byte for byte) and the same
# version and hash as `dist/dqplb --version`. It refuses a checkout with uncommitted changes (the
# git hash would not describe the files; --allow-dirty builds anyway) and one without LICENSE.
set -euo pipefail
cd "$(dirname "$0")/.."

build=1 dirty_ok=0
for a in "$@"; do
  case "$a" in
    --no-build) build=0 ;;
    --allow-dirty) dirty_ok=1 ;;
    -h | --help) sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "release.sh: unknown option '$a'" >&2; exit 2 ;;
  esac
done

[ -f LICENSE ] || { echo "release.sh: no LICENSE at the repository's top: a release ships its license" >&2; exit 1; }
if [ -n "$(git status --porcelain --untracked-files=normal)" ]; then
  if [ $dirty_ok = 0 ]; then
    git status --short >&2
    echo "release.sh: the checkout has uncommitted changes (above); commit them, or pass --allow-dirty" >&2
    exit 1
  fi
  echo "release.sh: warning: building from a checkout with uncommitted changes (--allow-dirty)" >&2
fi

t0=$SECONDS
[ $build = 0 ] || bash scripts/build.sh --portable
source scripts/pkg-common.sh
pkg_read_version release.sh
head=$(git rev-parse --short HEAD)
[ "$PKG_HASH" = "$head" ] ||
  { echo "release.sh: dist/ holds a build of $PKG_HASH, HEAD is $head (drop --no-build)" >&2; exit 1; }

echo "== self test of dist/libnccl-net-dqplb.so"
PYTHONPATH=$PWD/python python3 -m dqplb_net selftest --library dist/libnccl-net-dqplb.so
echo "== wheel"
bash scripts/wheel.sh --auditwheel
echo "== Debian package"
bash scripts/deb.sh

whl=dist/dqplb_net-$PKG_VERSION-py3-none-manylinux_2_28_x86_64.whl
deb=dist/dqplb-net_${PKG_VERSION//-/\~}_amd64.deb
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
strip --strip-debug -o "$tmp/lib" "$PKG_LIB"
strip --strip-debug -o "$tmp/bin" "$PKG_BIN"
python3 -m zipfile -e "$whl" "$tmp/whl"
dpkg-deb -x "$deb" "$tmp/deb"
multiarch=x86_64-linux-gnu
same() { # what, file, reference
  cmp -s "$2" "$3" || { echo "release.sh: $1 ($2) differs from $3" >&2; exit 1; }
}
same "the wheel's library" "$tmp/whl/dqplb_net/lib/libnccl-net-dqplb.so" "$tmp/lib"
same "the wheel's dqplb" "$tmp/whl/dqplb_net/bin/dqplb" "$tmp/bin"
same "the .deb's library" "$tmp/deb/usr/lib/$multiarch/libnccl-net-dqplb.so" "$tmp/lib"
same "the .deb's dqplb" "$tmp/deb/usr/bin/dqplb" "$tmp/bin"
for info in "$tmp/whl/dqplb_net/_build_info.py" "$tmp/deb/usr/lib/python3/dist-packages/dqplb_net/_build_info.py"; do
  grep -qx "VERSION = \"$PKG_VERSION\"" "$info" && grep -qx "GIT_HASH = \"$PKG_HASH\"" "$info" ||
    { echo "release.sh: $info does not say $PKG_VERSION ($PKG_HASH)" >&2; exit 1; }
done
[ "$(dpkg-deb -f "$deb" Version)" = "${PKG_VERSION//-/\~}" ] ||
  { echo "release.sh: $deb has version $(dpkg-deb -f "$deb" Version)" >&2; exit 1; }
grep -q "Built from git commit $PKG_HASH\." <<<"$(dpkg-deb -f "$deb" Description)" ||
  { echo "release.sh: $deb's description does not name $PKG_HASH" >&2; exit 1; }

set_files=("$(basename "$PKG_LIB")" "$(basename "$PKG_BIN")" "$(basename "$whl")" "$(basename "$deb")")
(cd dist && sha256sum "${set_files[@]}" >SHA256SUMS)
others=$(cd dist && ls -A | grep -vxF -e SHA256SUMS "${set_files[@]/#/-e}" || true)
[ -z "$others" ] || echo "release.sh: note: dist/ also holds files outside the release set: $(tr '\n' ' ' <<<"$others")"

echo
echo "release.sh: dqplb-net $PKG_VERSION ($PKG_HASH) in dist/ ($((SECONDS - t0)) s):"
(cd dist && for f in "${set_files[@]}" SHA256SUMS; do printf '  %-58s %10s bytes\n' "$f" "$(stat -c %s "$f")"; done)
echo "release.sh: sha256sum -c SHA256SUMS:"
(cd dist && sha256sum -c SHA256SUMS | sed 's/^/  /')
