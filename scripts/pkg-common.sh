# Sourced by scripts/wheel.sh, scripts/deb.sh and scripts/release.sh (from the repository's top):
# the portable artifacts they package, their version and git hash, and shared checks.

PKG_LIB=dist/libnccl-net-dqplb.so
PKG_BIN=dist/dqplb

# pkg_read_version NAME: sets PKG_VERSION (0.1.0) and PKG_HASH (c302e4d) from `dist/dqplb
# --version`; fails when the artifacts are missing, when the library embeds another version
# string; warns when they were built from a commit other than HEAD (scripts/release.sh fails
# then). Sets SOURCE_DATE_EPOCH (the built commit's time, else HEAD's) for reproducible archives.
pkg_read_version() {
  local me=$1 f line head
  for f in "$PKG_LIB" "$PKG_BIN"; do
    [ -f "$f" ] || { echo "$me: $f is missing: build it with bash scripts/build.sh --portable" >&2; exit 1; }
  done
  line=$("$PKG_BIN" --version) || { echo "$me: $PKG_BIN --version failed" >&2; exit 1; }
  # "dqplb 0.1.0 (c302e4d)"
  if ! [[ $line =~ ^dqplb\ ([0-9A-Za-z.+~-]+)\ \(([0-9a-z]+)\)$ ]]; then
    echo "$me: cannot read the version from '$PKG_BIN --version': '$line'" >&2
    exit 1
  fi
  PKG_VERSION=${BASH_REMATCH[1]} PKG_HASH=${BASH_REMATCH[2]}
  if ! grep -qaF "$PKG_VERSION ($PKG_HASH)" "$PKG_LIB"; then
    echo "$me: $PKG_LIB does not embed '$PKG_VERSION ($PKG_HASH)' as $PKG_BIN does: rebuild with bash scripts/build.sh --portable" >&2
    exit 1
  fi
  head=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
  if [ "$PKG_HASH" != "$head" ]; then
    echo "$me: warning: dist/ holds a build of $PKG_HASH, the checkout is at $head (bash scripts/build.sh --portable rebuilds it)" >&2
  fi
  SOURCE_DATE_EPOCH=$(git log -1 --format=%ct "$PKG_HASH" 2>/dev/null || git log -1 --format=%ct HEAD)
  export SOURCE_DATE_EPOCH
}

# pkg_build_info FILE LIBRARY COMMAND: writes dqplb_net/_build_info.py with the version, hash and
# the two paths (Python literals: None, or a quoted absolute path).
pkg_build_info() {
  cat >"$1" <<EOF
"""Stamped by the package build (scripts/wheel.sh, scripts/deb.sh): what this package holds."""

VERSION = "$PKG_VERSION"
GIT_HASH = "$PKG_HASH"
LIBRARY = $2
COMMAND = $3
EOF
}

# pkg_glibc_max FILE: the highest GLIBC_x.y symbol version FILE needs (empty when none)
pkg_glibc_max() {
  objdump -T "$1" | grep -o 'GLIBC_[0-9][0-9.]*' | sed 's/GLIBC_//' | sort -uV | tail -n1
}

# pkg_glibc_check NAME FILE MAX: fails when FILE needs a GLIBC symbol version above MAX
pkg_glibc_check() {
  local v
  v=$(pkg_glibc_max "$2")
  if [ -n "$v" ] && [ "$(printf '%s\n%s\n' "$v" "$3" | sort -V | tail -n1)" != "$3" ]; then
    echo "$1: $2 needs GLIBC_$v, above GLIBC_$3" >&2
    exit 1
  fi
  echo "$1: $(basename "$2"): highest GLIBC symbol version ${v:-none} (limit $3)"
}
