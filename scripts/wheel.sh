#!/usr/bin/env bash
# Builds the dqplb-net wheel from the portable build's artifacts:
#
#   bash scripts/wheel.sh [--auditwheel]
#
#   in:  dist/libnccl-net-dqplb.so, dist/dqplb    (bash scripts/build.sh --portable)
#   out: dist/dqplb_net-<version>-py3-none-manylinux_2_28_x86_64.whl
#
# The package is python/ (pure Python: dqplb_net, the `dqplb` console script) staged in
# target/pkg/wheel/ with the two binaries (debug info stripped: panic messages keep file:line,
# backtraces keep function names) and the version and git hash read from `dist/dqplb --version`
# stamped into dqplb_net/_build_info.py; setuptools (pinned, in target/tools/pyvenv) builds it
# with `pip wheel`. File dates are the commit's (SOURCE_DATE_EPOCH): the same commit gives the
# same bytes. Checks: no file in the wheel needs a GLIBC symbol version above 2.28;
# --auditwheel also runs `auditwheel show` from PyPI in a throwaway venv.
set -euo pipefail
cd "$(dirname "$0")/.."

SETUPTOOLS_VERSION=80.9.0
AUDITWHEEL_VERSION=6.8.2
GLIBC_MAX=2.28
TOOLS=target/tools/pyvenv
STAGE=target/pkg/wheel

audit=0
case "${1:-}" in
  "") ;;
  --auditwheel) audit=1 ;;
  -h | --help) sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
  *) echo "wheel.sh: unknown option '$1' (use --auditwheel or nothing)" >&2; exit 2 ;;
esac

source scripts/pkg-common.sh
pkg_read_version wheel.sh

# setuptools for the build, pinned, in its own venv (nothing system-wide)
if ! "$TOOLS/bin/python3" -c "import setuptools, sys; sys.exit(setuptools.__version__ != '$SETUPTOOLS_VERSION')" 2>/dev/null; then
  echo "wheel.sh: installing setuptools $SETUPTOOLS_VERSION from PyPI into $TOOLS"
  rm -rf "$TOOLS"
  python3 -m venv "$TOOLS"
  "$TOOLS/bin/pip" install --quiet --disable-pip-version-check "setuptools==$SETUPTOOLS_VERSION"
fi

rm -rf "$STAGE"
mkdir -p "$STAGE/src" "$STAGE/out"
src=$STAGE/src
cp python/pyproject.toml python/setup.py python/README.md "$src/"
mkdir -p "$src/dqplb_net/lib" "$src/dqplb_net/bin"
cp python/dqplb_net/*.py "$src/dqplb_net/"
if [ -f LICENSE ]; then cp LICENSE "$src/"; else echo "wheel.sh: warning: no LICENSE at the repository's top; the wheel carries none" >&2; fi
strip --strip-debug -o "$src/dqplb_net/lib/libnccl-net-dqplb.so" "$PKG_LIB"
strip --strip-debug -o "$src/dqplb_net/bin/dqplb" "$PKG_BIN"
chmod 0755 "$src/dqplb_net/lib/libnccl-net-dqplb.so" "$src/dqplb_net/bin/dqplb"
pkg_build_info "$src/dqplb_net/_build_info.py" None None
find "$src" -exec touch -h -d "@$SOURCE_DATE_EPOCH" {} +

"$TOOLS/bin/pip" wheel --quiet --disable-pip-version-check --no-deps --no-build-isolation \
  --no-index -w "$STAGE/out" "$src"
whl=$(ls "$STAGE"/out/dqplb_net-*.whl)
want="dqplb_net-$PKG_VERSION-py3-none-manylinux_2_28_x86_64.whl"
[ "$(basename "$whl")" = "$want" ] ||
  { echo "wheel.sh: built $(basename "$whl"), expected $want" >&2; exit 1; }

# what is inside: the binaries, executable, and their GLIBC needs
chk=$STAGE/check
rm -rf "$chk"
mkdir -p "$chk"
python3 - "$whl" "$chk" <<'PY'
import sys, zipfile, stat, os
whl, out = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(whl) as z:
    names = z.namelist()
    for need in ("dqplb_net/lib/libnccl-net-dqplb.so", "dqplb_net/bin/dqplb", "dqplb_net/_build_info.py"):
        if need not in names:
            sys.exit("wheel.sh: %s is not in the wheel" % need)
    mode = z.getinfo("dqplb_net/bin/dqplb").external_attr >> 16
    if not mode & stat.S_IXUSR:
        sys.exit("wheel.sh: dqplb_net/bin/dqplb is not executable in the wheel (mode %o)" % mode)
    wheel_meta = [n for n in names if n.endswith(".dist-info/WHEEL")][0]
    meta = z.read(wheel_meta).decode()
    if "Root-Is-Purelib: false" not in meta or "Tag: py3-none-manylinux_2_28_x86_64" not in meta:
        sys.exit("wheel.sh: unexpected WHEEL metadata:\n" + meta)
    z.extract("dqplb_net/lib/libnccl-net-dqplb.so", out)
    z.extract("dqplb_net/bin/dqplb", out)
PY
for f in "$chk/dqplb_net/lib/libnccl-net-dqplb.so" "$chk/dqplb_net/bin/dqplb"; do
  pkg_glibc_check wheel.sh "$f" "$GLIBC_MAX"
done
rm -rf "$chk"

if [ $audit = 1 ]; then
  av=$(mktemp -d)
  python3 -m venv "$av"
  "$av/bin/pip" install --quiet --disable-pip-version-check "auditwheel==$AUDITWHEEL_VERSION"
  echo "wheel.sh: auditwheel $AUDITWHEEL_VERSION show $(basename "$whl"):"
  "$av/bin/auditwheel" show "$whl" | sed 's/^/  /'
  rm -rf "$av"
fi

mkdir -p dist
rm -f dist/dqplb_net-*.whl
mv "$whl" dist/
echo "wheel.sh: dist/$want ($(stat -c %s "dist/$want") bytes, $(numfmt --to=iec "$(stat -c %s "dist/$want")")): dqplb-net $PKG_VERSION ($PKG_HASH)"
