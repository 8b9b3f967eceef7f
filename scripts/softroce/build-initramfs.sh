#!/bin/bash
# Builds initramfs.cpio.gz for the Soft-RoCE VM from the unpacked Debian kernel (kroot/) and host
# binaries: busybox, rdma/ip, verbs tools, perftest, the rxe provider, and the libs Rust tests need.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
cd "$HERE"
KROOT=$HERE/kroot
KVER=${KVER:-$(cat "$KROOT/KVER" 2>/dev/null || ls "$KROOT/lib/modules" | head -1)}
ROOT=$HERE/initramfs-root
OUT=$HERE/initramfs.cpio.gz
LIBDIR=/usr/lib/x86_64-linux-gnu

[ -d "$KROOT/lib/modules/$KVER" ] || { echo "build-initramfs: no modules for '$KVER' in $KROOT (run setup.sh)" >&2; exit 1; }
[ -f "$KROOT/lib/modules/$KVER/modules.dep" ] || depmod -b "$KROOT" "$KVER"

rm -rf "$ROOT"
mkdir -p "$ROOT"/{usr/bin,usr/lib64,"usr/lib/x86_64-linux-gnu/libibverbs",etc/libibverbs.d,proc,sys,dev,tmp,run,root,mnt/host,modules}
for d in bin sbin; do ln -s usr/bin "$ROOT/$d"; done
ln -s usr/bin "$ROOT/usr/sbin"
ln -s usr/lib "$ROOT/lib"
ln -s usr/lib64 "$ROOT/lib64"

# Kernel modules in dependency order (rxe needs crc32_generic before it; 9p for the host share).
WANT=(crc32_generic rdma_rxe ib_uverbs rdma_ucm dummy 9pnet_virtio 9p virtio_pci)
for m in "${WANT[@]}"; do
  modprobe -d "$KROOT" -S "$KVER" --show-depends "$m" | awk '$1 == "insmod" {print $2}'
done | awk '!seen[$0]++' > "$ROOT/modules/paths"
while read -r ko; do
  cp "$ko" "$ROOT/modules/"
  basename "$ko" >> "$ROOT/modules/order"
done < "$ROOT/modules/paths"
rm "$ROOT/modules/paths"

# busybox applets as links, skipping names that real binaries take below
cp /usr/bin/busybox "$ROOT/usr/bin/busybox"
/usr/bin/busybox --list | while read -r applet; do
  [ "$applet" = busybox ] || ln -s busybox "$ROOT/usr/bin/$applet"
done

# copy a dynamic ELF and every library ldd resolves for it
add_elf() {
  local src=$1 dst=$2 lib
  cp -L "$src" "$ROOT$dst/"
  ldd "$src" | awk '$2 == "=>" && $3 ~ /^\// {print $3}' | while read -r lib; do
    cp -L "$lib" "$ROOT$LIBDIR/"
  done
}
TOOLS=(ip rdma ibv_devices ibv_devinfo ibv_rc_pingpong ib_write_bw ib_write_lat ib_read_bw ib_send_bw)
for t in "${TOOLS[@]}"; do
  p=$(command -v "$t") || { echo "build-initramfs: $t not installed (run setup.sh)" >&2; exit 1; }
  rm -f "$ROOT/usr/bin/$t"
  add_elf "$p" /usr/bin
done
cp -L /lib64/ld-linux-x86-64.so.2 "$ROOT/usr/lib64/"
# rxe user-space provider is dlopen()ed by libibverbs: ldd cannot see it
add_elf "$LIBDIR/libibverbs/librxe-rdmav34.so" "$LIBDIR/libibverbs"
cp /etc/libibverbs.d/rxe.driver "$ROOT/etc/libibverbs.d/"
# what host-built Rust test binaries link against (std needs libgcc_s)
for l in libgcc_s.so.1 libm.so.6 libc.so.6 libibverbs.so.1 libnl-3.so.200 libnl-route-3.so.200 \
         librdmacm.so.1 libstdc++.so.6 libz.so.1 libnss_files.so.2; do
  [ -e "$LIBDIR/$l" ] && cp -L "$LIBDIR/$l" "$ROOT$LIBDIR/"
done
printf '127.0.0.1 localhost\n' > "$ROOT/etc/hosts"
printf 'hosts: files\n' > "$ROOT/etc/nsswitch.conf"
printf 'root:x:0:0:root:/root:/bin/sh\n' > "$ROOT/etc/passwd"
install -m 0755 "$HERE/init.sh" "$ROOT/init"

(cd "$ROOT" && find . -print0 | cpio --null -o -H newc --quiet) | gzip -1 > "$OUT.tmp"
mv "$OUT.tmp" "$OUT"
echo "build-initramfs: $OUT $(du -h "$OUT" | cut -f1) for kernel $KVER" >&2
