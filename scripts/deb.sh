#!/usr/bin/env bash
# Builds the Debian package from the portable build's artifacts, with dpkg-deb:
#
#   bash scripts/deb.sh
#
#   in:  dist/libnccl-net-dqplb.so, dist/dqplb    (bash scripts/build.sh --portable)
#   out: dist/dqplb-net_<version>_amd64.deb
#
#   /usr/lib/<multiarch>/libnccl-net-dqplb.so     the plugin (NCCL_NET_PLUGIN=dqplb finds it through
#                                                 ld.so's cache: ldconfig runs by trigger)
#   /usr/bin/dqplb                                the operator command
#   /usr/lib/python3/dist-packages/dqplb_net/     the Python module, stamped with the two paths
#                                                 above: python3 -m dqplb_net selftest | path
#   /usr/share/doc/dqplb-net/                     copyright, changelog, user docs, examples/*.toml
#
# No site config is installed (/etc/nccl-dqplb.toml is read by every NCCL job on the host: an
# operator's decision). Depends: libc6 (>= the highest GLIBC symbol version the binaries need),
# derived from their NEEDED entries. Recommends: python3 (for the self test and `import
# dqplb_net`; the plugin and dqplb do not need it), libibverbs1 and ibverbs-providers (RDMA;
# libibverbs is dlopen'ed, so without them the plugin runs over TCP). Binaries are shipped with
# debug info stripped. DEBFULLNAME / DEBEMAIL set the Maintainer field.
set -euo pipefail
cd "$(dirname "$0")/.."

case "${1:-}" in
  "") ;;
  -h | --help) sed -n '2,21p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
  *) echo "deb.sh: unknown option '$1'" >&2; exit 2 ;;
esac
for c in dpkg-deb objdump readelf strip gzip md5sum; do
  command -v $c >/dev/null || { echo "deb.sh: needs $c (apt-get install dpkg binutils gzip coreutils)" >&2; exit 1; }
done

source scripts/pkg-common.sh
pkg_read_version deb.sh

# the portable build is x86_64 only; dpkg-architecture (dpkg-dev), when there, must agree
ARCH=amd64 MULTIARCH=x86_64-linux-gnu
if command -v dpkg-architecture >/dev/null &&
  [ "$(dpkg-architecture -a"$ARCH" -qDEB_HOST_MULTIARCH 2>/dev/null)" != "$MULTIARCH" ]; then
  echo "deb.sh: dpkg-architecture says the multiarch triplet of $ARCH is not $MULTIARCH" >&2
  exit 1
fi
# Debian orders '~' before anything: a Cargo pre-release 0.2.0-rc.1 becomes 0.2.0~rc.1
DEB_VERSION=${PKG_VERSION//-/\~}
MAINTAINER="${DEBFULLNAME:-dqplb-net developers} <${DEBEMAIL:-dqplb-net@invalid}>"
STAGE=target/pkg/deb
root=$STAGE/root
rm -rf "$STAGE"
mkdir -p "$root/DEBIAN"

# ---- files ------------------------------------------------------------------------------------
libdir=/usr/lib/$MULTIARCH
pydir=/usr/lib/python3/dist-packages/dqplb_net
doc=/usr/share/doc/dqplb-net
install -d "$root$libdir" "$root/usr/bin" "$root$pydir" "$root$doc/examples"
strip --strip-debug -o "$root$libdir/libnccl-net-dqplb.so" "$PKG_LIB"
strip --strip-debug -o "$root/usr/bin/dqplb" "$PKG_BIN"
chmod 0644 "$root$libdir/libnccl-net-dqplb.so"
chmod 0755 "$root/usr/bin/dqplb"
install -m 0644 python/dqplb_net/*.py "$root$pydir/"
pkg_build_info "$root$pydir/_build_info.py" "\"$libdir/libnccl-net-dqplb.so\"" '"/usr/bin/dqplb"'
install -m 0644 plugin-conf/*.toml "$root$doc/examples/"
install -m 0644 README.md docs/install.md docs/quickstart.md docs/configuration.md \
  docs/operations.md docs/troubleshooting.md "$root$doc/"
# Debian policy 12.3: documentation over 4 KiB is compressed (gzip -n: no name, no date),
# (not the example configs: operators copy them as they are)
find "$root$doc" -path "$root$doc/examples" -prune -o -type f -size +4k -exec gzip -9n {} +

year=$(date -u -d "@$SOURCE_DATE_EPOCH" +%Y)
cat >"$root$doc/copyright" <<EOF
Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/
Upstream-Name: dqplb-net
Comment: Built from git commit $PKG_HASH. The Rust crates linked into the binaries are listed
 with their licenses in Cargo.lock of the source tree.

Files: *
Copyright: $year dqplb-net developers
License: Apache-2.0
 Licensed under the Apache License, Version 2.0 (the "License"); you may not use this file
 except in compliance with the License. You may obtain a copy of the License at
 .
     http://www.apache.org/licenses/LICENSE-2.0
 .
 Unless required by applicable law or agreed to in writing, software distributed under the
 License is distributed on an "AS IS" BASIS, WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND,
 either express or implied. See the License for the specific language governing permissions
 and limitations under the License.
 .
 On Debian systems, the full text of the Apache License, Version 2.0 can be found in
 /usr/share/common-licenses/Apache-2.0.
EOF
chmod 0644 "$root$doc/copyright"
{
  echo "dqplb-net ($DEB_VERSION) unstable; urgency=medium"
  echo
  echo "  * Built from git commit $PKG_HASH (dqplb --version: $PKG_VERSION ($PKG_HASH))."
  echo
  echo " -- $MAINTAINER  $(date -u -R -d "@$SOURCE_DATE_EPOCH")"
} | gzip -9n >"$root$doc/changelog.Debian.gz"
chmod 0644 "$root$doc/changelog.Debian.gz"

# ---- Depends from the binaries' NEEDED entries --------------------------------------------------
glibc=""
for f in "$PKG_LIB" "$PKG_BIN"; do
  v=$(pkg_glibc_max "$f")
  glibc=$(printf '%s\n%s\n' "$glibc" "$v" | sed '/^$/d' | sort -V | tail -n1)
  for n in $(readelf -d "$f" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p'); do
    case "$n" in
      libc.so.6 | libm.so.6 | libpthread.so.0 | libdl.so.2 | librt.so.1 | ld-linux-x86-64.so.2) ;;
      libgcc_s.so.1) gcc_dep="libgcc-s1 | libgcc1" ;;
      *) echo "deb.sh: $f needs $n, which deb.sh has no Debian package for: add it to Depends" >&2; exit 1 ;;
    esac
  done
done
depends="libc6 (>= $glibc)${gcc_dep:+, $gcc_dep}"

# ---- control ------------------------------------------------------------------------------------
cat >"$root/DEBIAN/control" <<EOF
Package: dqplb-net
Version: $DEB_VERSION
Architecture: $ARCH
Maintainer: $MAINTAINER
Installed-Size: $(du -sk --apparent-size "$root/usr" | cut -f1)
Depends: $depends
Recommends: python3, libibverbs1, ibverbs-providers
Section: net
Priority: optional
Description: NCCL network plugin with Dynamic QP Load Balancing (DQPLB)
 libnccl-net-dqplb.so is an NCCL net plugin (NCCL 2.20 or newer) that spreads each
 connection's messages over several RDMA queue pairs, sending each segment to the queue pair
 whose last completion came back first, and checks the NICs' DCQCN congestion control
 parameters at init. Without a usable RDMA device it runs the same engine over TCP.
 .
 Use it with NCCL_NET_PLUGIN=dqplb NCCL_NET=DQPLB. The dqplb command shows the per-class
 plan, checks DCQCN settings, reads statistics and measures the plugin on loopback;
 python3 -m dqplb_net selftest moves byte-checked messages through the library.
 .
 Built from git commit $PKG_HASH.
EOF
# ldconfig after install/removal, so that NCCL_NET_PLUGIN=dqplb (a dlopen by file name) finds it
echo "activate-noawait ldconfig" >"$root/DEBIAN/triggers"
# Python writes byte-code caches next to the module when run as root: remove them with it
cat >"$root/DEBIAN/prerm" <<EOF
#!/bin/sh
set -e
rm -rf $pydir/__pycache__
EOF
chmod 0755 "$root/DEBIAN/prerm"
chmod 0644 "$root/DEBIAN/control" "$root/DEBIAN/triggers"
(cd "$root" && find usr -type f -printf '%P\n' | LC_ALL=C sort | sed 's|^|usr/|' | xargs md5sum >DEBIAN/md5sums)
chmod 0644 "$root/DEBIAN/md5sums"
find "$root" -exec touch -h -d "@$SOURCE_DATE_EPOCH" {} +

deb="dqplb-net_${DEB_VERSION}_$ARCH.deb"
dpkg-deb --root-owner-group -Zxz --build "$root" "$STAGE/$deb" >/dev/null

# ---- checks -------------------------------------------------------------------------------------
contents=$(dpkg-deb --contents "$STAGE/$deb")
for p in ".$libdir/libnccl-net-dqplb.so" ./usr/bin/dqplb ".$pydir/_build_info.py" ".$pydir/_selftest.py" \
  ".$doc/copyright" ".$doc/examples/rail-optimized-8rail-roce.toml"; do
  grep -qF " $p" <<<"$contents" || { echo "deb.sh: $p is not in $deb" >&2; exit 1; }
done
if grep -qE ' \./etc(/| |$)' <<<"$contents"; then
  echo "deb.sh: $deb installs under /etc (it must install no config)" >&2
  exit 1
fi
mkdir -p dist
rm -f dist/dqplb-net_*.deb
mv "$STAGE/$deb" dist/
echo "deb.sh: Depends: $depends"
echo "deb.sh: dist/$deb ($(stat -c %s "dist/$deb") bytes, $(numfmt --to=iec "$(stat -c %s "dist/$deb")")): dqplb-net $DEB_VERSION ($PKG_HASH), $(grep -c . <<<"$contents") entries"
