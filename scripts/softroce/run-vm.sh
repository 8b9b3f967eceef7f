#!/bin/bash
# Boots the Soft-RoCE VM once (qemu TCG; ACCEL=kvm to try KVM), prints its console, powers off.
#   run-vm.sh [selftest|share]   share: runs $SHARE/guest-run.sh inside the VM (9p, /mnt/host)
# Env: SHARE (host folder, default ./share), LOG (console copy), TIMEOUT (s, default 600), MEM,
#      CLOCK_ARGS (kernel clock options; default TSC, read in user space as on a real host: the
#      kernel otherwise picks the emulated HPET, where every clock read is a ~1 us system call).
# Exit: the guest's result (0 ok, 1 a guest step failed), 2 no result line (boot failure/timeout).
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
MODE=${1:-selftest}
KERNEL=${KERNEL:-$HERE/vmlinux}
[ -f "$KERNEL" ] || KERNEL=$(ls "$HERE"/kroot/boot/vmlinuz-* 2>/dev/null | head -1)
INITRD=${INITRD:-$HERE/initramfs.cpio.gz}
SHARE=${SHARE:-$HERE/initramfs-share}
LOG=${LOG:-$(mktemp "${TMPDIR:-/tmp}/softroce-console.XXXXXX")}
TIMEOUT=${TIMEOUT:-600}
if [ -z "$KERNEL" ] || [ ! -f "$KERNEL" ] || [ ! -f "$INITRD" ]; then
  echo "run-vm: kernel/initramfs missing: run $HERE/setup.sh" >&2
  exit 2
fi
mkdir -p "$SHARE"
if [ "${ACCEL:-tcg}" = kvm ]; then
  ACC=(-enable-kvm -cpu host)
else
  ACC=(-accel "tcg,thread=multi" -cpu max)
fi
t0=$(date +%s.%N)
timeout --foreground "$TIMEOUT" qemu-system-x86_64 "${ACC[@]}" -m "${MEM:-2G}" -smp 2 \
  -nographic -no-reboot -nic none -kernel "$KERNEL" -initrd "$INITRD" \
  -append "console=ttyS0 panic=-1 loglevel=4 softroce.mode=$MODE ${CLOCK_ARGS-clocksource=tsc tsc=reliable}" \
  -virtfs local,path="$SHARE",mount_tag=hostshare,security_model=none,id=hostshare \
  </dev/null 2>&1 | tee "$LOG"
qrc=${PIPESTATUS[0]}
t1=$(date +%s.%N)
echo "run-vm: qemu rc=$qrc after $(awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.1f", b - a}') s, console log $LOG"
rc=$(tr -d '\r' <"$LOG" | sed -n 's/^GUEST_RESULT_RC=\([0-9][0-9]*\).*/\1/p' | tail -n 1)
if [ -z "$rc" ]; then
  echo "run-vm: no GUEST_RESULT_RC line (boot failure or timeout after ${TIMEOUT}s)" >&2
  exit 2
fi
exit "$rc"
