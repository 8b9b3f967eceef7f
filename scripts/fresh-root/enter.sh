#!/usr/bin/env bash
# enter.sh ROOT TOOLCHAIN_SRC TOOLCHAIN_DST -- VAR=VALUE... -- COMMAND...
# (TOOLCHAIN_SRC and _DST both "-": no toolchain is mounted)
# Run by scripts/fresh-root.sh inside `unshare --mount --propagation private --pid --fork`: the
# mounts made here (/proc, /dev, /sys, the read-only toolchain) belong to this private mount
# namespace and disappear with it; the PID namespace ends every process the root leaves behind.
# Chroots into ROOT and runs COMMAND with exactly the VAR=VALUE environment.
set -euo pipefail
root=$1 tc_src=$2 tc_dst=$3
shift 3
[ "$1" = -- ] && shift
envs=()
while [ $# -gt 0 ] && [ "$1" != -- ]; do envs+=("$1"); shift; done
shift
# The root is a mount point of its own, as / is on a real machine: tools that change the propagation
# of / inside (unshare --mount, as tests/verbs_hidden.rs uses) need that.
mount --bind "$root" "$root"
mount --make-private "$root"
mount -t proc proc "$root/proc"
mount --rbind /dev "$root/dev"
mount --make-rslave "$root/dev"
mount --rbind /sys "$root/sys"
mount --make-rslave "$root/sys"
if [ "$tc_src" != - ]; then
  mount --bind "$tc_src" "$root$tc_dst"
  mount -o remount,bind,ro "$root$tc_dst"
fi
exec chroot "$root" /usr/bin/env -i "${envs[@]}" "$@"
