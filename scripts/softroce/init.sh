#!/bin/sh
# PID 1 of the Soft-RoCE VM (busybox sh): loads rdma_rxe, creates rxe0 on dummy0 (VM-internal
# 10.77.0.1/24, MTU 9000), then runs the host share's guest-run.sh (mode share) or a selftest.
export PATH=/usr/bin
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
mkdir -p /dev/pts /dev/shm
mount -t devpts pts /dev/pts
mount -t tmpfs shm /dev/shm
mount -t tmpfs tmp /tmp
up() { cut -d' ' -f1 /proc/uptime; }
cmdarg() { for w in $(cat /proc/cmdline); do case $w in "$1"=*) echo "${w#*=}" ;; esac; done; }
MODE=$(cmdarg softroce.mode)
[ -n "$MODE" ] || MODE=selftest
echo "softroce-init: up at $(up)s, mode $MODE"

while read -r ko; do insmod "/modules/$ko" || echo "softroce-init: insmod $ko failed"; done < /modules/order

ip link set lo up
ip link show dummy0 >/dev/null 2>&1 || ip link add dummy0 type dummy
ip addr add 10.77.0.1/24 dev dummy0
ip link set dummy0 mtu 9000          # MTU 1500 would cap rxe's active_mtu at 1024
ip link set dummy0 up
rdma link add rxe0 type rxe netdev dummy0 || echo "softroce-init: rdma link add rxe0 FAILED"

# RoCE v2 GID that carries 10.77.0.1 (::ffff:10.77.0.1); perftest needs its index
SOFTROCE_GID_INDEX=
for g in /sys/class/infiniband/rxe0/ports/1/gids/*; do
  if [ "$(cat "$g" 2>/dev/null)" = 0000:0000:0000:0000:0000:ffff:0a4d:0001 ]; then
    SOFTROCE_GID_INDEX=${g##*/}
    break
  fi
done
export SOFTROCE_DEV=rxe0 SOFTROCE_GID_INDEX
# test binaries must fail, not skip, when they find no RDMA device here
export DQPLB_REQUIRE_RDMA=1
echo "softroce-init: rxe0 ready at $(up)s, RoCE v2 GID index ${SOFTROCE_GID_INDEX:-none}"

if grep -qs hostshare /sys/bus/virtio/drivers/9pnet_virtio/*/mount_tag; then
  mount -t 9p -o trans=virtio,version=9p2000.L,msize=512000 hostshare /mnt/host \
    || echo "softroce-init: 9p mount FAILED"
fi
[ -d /mnt/host/lib ] && export LD_LIBRARY_PATH=/mnt/host/lib

RC=0
case $MODE in
  share)
    if [ -x /mnt/host/guest-run.sh ]; then
      (cd /mnt/host && ./guest-run.sh) || RC=1
    else
      echo "softroce-init: no executable /mnt/host/guest-run.sh"
      RC=1
    fi
    ;;
  selftest)
    ibv_devinfo -d rxe0 || RC=1
    ib_write_bw -d rxe0 -x "$SOFTROCE_GID_INDEX" -F --report_gbits -s 65536 -n 200 >/tmp/srv.log 2>&1 &
    srv=$!
    sleep 1
    ib_write_bw -d rxe0 -x "$SOFTROCE_GID_INDEX" -F --report_gbits -s 65536 -n 200 127.0.0.1 || RC=1
    wait $srv || RC=1
    ;;
  *) echo "softroce-init: unknown mode $MODE"; RC=1 ;;
esac

echo "softroce-init: done at $(up)s"
echo "GUEST_RESULT_RC=$RC"
sync
poweroff -f
