#!/bin/bash
# Prepares the Soft-RoCE test VM: host packages (qemu, perftest, busybox, verbs tools), Debian's
# kernel unpacked beside this script (never installed), an uncompressed vmlinux and the initramfs.
# Idempotent and cached: a second run only checks.  Exit 0 = ready; 3 = this host can never run
# the VM (not root, so nothing can be installed); 4 = setup failed (apt, mirror, kernel download:
# retried first); anything else = a bug. Only 3 may be skipped by callers.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
cd "$HERE"
export DEBIAN_FRONTEND=noninteractive
APT=(apt-get -o DPkg::Lock::Timeout=300 -q)

log() { echo "softroce-setup: $*" >&2; }
never() { log "CANNOT RUN ON THIS HOST: $*"; exit 3; }
unavailable() { log "SETUP FAILED: $*"; exit 4; }
# retry N CMD...: transient apt/mirror errors get N tries, 10 s apart
retry() {
  local n=$1 i; shift
  for ((i = 1; i <= n; i++)); do
    "$@" && return 0
    [ "$i" -lt "$n" ] && { log "attempt $i of $n failed: $*; retrying in 10 s"; sleep 10; }
  done
  return 1
}

# Host packages: the VM's userland is copied from the host, so the host needs them installed.
PKGS=(busybox-static ibverbs-utils perftest ibverbs-providers rdma-core cpio kmod iproute2 python3 gzip)
missing=()
for p in "${PKGS[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
lists_ready() { ls /var/lib/apt/lists/*_Packages* >/dev/null 2>&1; }
if [ ${#missing[@]} -gt 0 ] || ! command -v qemu-system-x86_64 >/dev/null; then
  [ "$(id -u)" = 0 ] || never "not root: cannot install ${missing[*]} qemu-system-x86"
  lists_ready || retry 3 "${APT[@]}" update -qq || unavailable "apt-get update failed"
fi
if [ ${#missing[@]} -gt 0 ]; then
  log "installing ${missing[*]}"
  retry 3 "${APT[@]}" install -y -qq --no-install-recommends "${missing[@]}" >/dev/null \
    || unavailable "apt-get install ${missing[*]} failed"
fi

if ! command -v qemu-system-x86_64 >/dev/null; then
  # A qemu-utils from bookworm-backports (as on the project machines) conflicts with bookworm's
  # qemu-system-x86: take qemu-system-x86 from backports too, with a private apt source list.
  if dpkg -s qemu-utils 2>/dev/null | grep -q '^Version: .*bpo12'; then
    mirror=$(awk '/^URIs:/{print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)
    [ -n "$mirror" ] || mirror=$(awk '/^deb /{print $2; exit}' /etc/apt/sources.list 2>/dev/null || true)
    [ -n "$mirror" ] || unavailable "no Debian mirror configured for bookworm-backports"
    mkdir -p apt-bpo/lists/partial apt-bpo/archives/partial
    echo "deb $mirror bookworm-backports main" > apt-bpo/sources.list
    BPO=(-o Dir::Etc::sourcelist="$HERE/apt-bpo/sources.list"
         -o Dir::State::lists="$HERE/apt-bpo/lists" -o Dir::Cache::archives="$HERE/apt-bpo/archives")
    log "installing qemu-system-x86 from bookworm-backports"
    retry 3 "${APT[@]}" "${BPO[@]}" update -qq || unavailable "backports list download failed"
    retry 3 "${APT[@]}" "${BPO[@]}" install -y -qq --no-install-recommends -t bookworm-backports qemu-system-x86 \
      >/dev/null || unavailable "qemu-system-x86 (backports) install failed"
  else
    log "installing qemu-system-x86"
    retry 3 "${APT[@]}" install -y -qq --no-install-recommends qemu-system-x86 >/dev/null \
      || unavailable "qemu-system-x86 install failed"
  fi
fi
command -v qemu-system-x86_64 >/dev/null || unavailable "qemu-system-x86_64 not on PATH after install"

# Kernel: the ABI of the current Debian 12 kernel (old ABIs disappear from the mirror), cached.
resolve_kver() {
  apt-cache depends linux-image-amd64 2>/dev/null \
    | awk '/Depends: linux-image-[0-9]/{sub("linux-image-", "", $2); print $2; exit}'
}
download_kernel() { # download_kernel ABI -> unpacks into kroot/, false on failure
  local dl ok=0
  mkdir -p kroot
  dl=$(mktemp -d "$HERE/kroot/.download.XXXXXX")
  if (cd "$dl" && "${APT[@]}" download "linux-image-$1" >/dev/null 2>&1); then
    dpkg-deb -x "$dl"/linux-image-"$1"_*.deb kroot && ok=1
  fi
  rm -rf "$dl"
  [ $ok = 1 ]
}
kver_file=kroot/KVER
if [ -z "${KVER:-}" ] && [ -s "$kver_file" ]; then KVER=$(cat "$kver_file"); fi
if [ -z "${KVER:-}" ]; then
  lists_ready || retry 3 "${APT[@]}" update -qq || unavailable "apt-get update failed"
  KVER=$(resolve_kver)
  [ -n "$KVER" ] || unavailable "cannot resolve the linux-image-amd64 kernel ABI"
fi
if [ ! -f "kroot/boot/vmlinuz-$KVER" ]; then
  log "downloading linux-image-$KVER"
  if ! download_kernel "$KVER"; then
    # stale package lists name an ABI the mirror no longer has: refresh once and retry
    log "download failed; refreshing package lists"
    retry 3 "${APT[@]}" update -qq || unavailable "apt-get update failed"
    KVER=$(resolve_kver)
    [ -n "$KVER" ] || unavailable "cannot resolve the linux-image-amd64 kernel ABI"
    retry 3 download_kernel "$KVER" || unavailable "kernel linux-image-$KVER download failed"
  fi
fi
echo "$KVER" > "$kver_file"
# the .deb ships no modules.dep (a dpkg trigger makes it on real installs)
[ -f "kroot/lib/modules/$KVER/modules.dep" ] || depmod -b "$HERE/kroot" "$KVER"

# Uncompressed kernel: qemu boots an ELF vmlinux directly (PVH entry), saving seconds under TCG.
if [ ! -s vmlinux ] || [ "$(cat kroot/VMLINUX_KVER 2>/dev/null)" != "$KVER" ]; then
  log "extracting vmlinux"
  python3 - "kroot/boot/vmlinuz-$KVER" kroot/vmlinux.tmp <<'PY'
import lzma, sys
blob = open(sys.argv[1], "rb").read()
start = blob.find(b"\xfd7zXZ\x00")
if start < 0:
    sys.exit("no xz stream in " + sys.argv[1])
out = lzma.LZMADecompressor(format=lzma.FORMAT_XZ).decompress(blob[start:])
open(sys.argv[2], "wb").write(out)
PY
  mv kroot/vmlinux.tmp vmlinux
  echo "$KVER" > kroot/VMLINUX_KVER
fi

# initramfs: rebuilt when absent or older than the scripts that make it
img=initramfs.cpio.gz
if [ ! -s "$img" ] || [ build-initramfs.sh -nt "$img" ] || [ init.sh -nt "$img" ] \
   || [ "$(cat kroot/INITRAMFS_KVER 2>/dev/null)" != "$KVER" ]; then
  KVER=$KVER ./build-initramfs.sh
  echo "$KVER" > kroot/INITRAMFS_KVER
fi
log "ready: kernel $KVER, $(du -h vmlinux | cut -f1) vmlinux, $(du -h "$img" | cut -f1) initramfs"
