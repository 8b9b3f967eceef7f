#!/bin/bash
# Cargo target runner: runs one binary (with its arguments) inside one Soft-RoCE VM boot and
# returns its exit status.  Use:
#   CARGO_TARGET_X86_64_UNKNOWN_LINUX_GNU_RUNNER=scripts/softroce/cargo-vm-runner.sh cargo test ...
# Libraries the initramfs lacks travel in the share's lib/ (init puts it on LD_LIBRARY_PATH).
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
[ $# -ge 1 ] || { echo "usage: $0 BINARY [ARGS...]" >&2; exit 64; }
bin=$1
shift
share=$(mktemp -d "${TMPDIR:-/tmp}/softroce-run.XXXXXX")
trap 'rm -rf "$share"' EXIT
mkdir -p "$share/lib"
cp "$bin" "$share/testbin"
ldd "$bin" | awk '$2 == "=>" && $3 ~ /^\// {print $3}' | while read -r lib; do
  [ -e "$HERE/initramfs-root/usr/lib/x86_64-linux-gnu/${lib##*/}" ] || cp -L "$lib" "$share/lib/"
done
quote() { printf "'%s'" "$(printf '%s' "$1" | sed "s/'/'\\\\''/g")"; }
{
  echo '#!/bin/sh'
  printf './testbin'
  for a in "$@"; do printf ' %s' "$(quote "$a")"; done
  echo ' >./out.txt 2>&1'
  echo 'echo $? >./rc'
} >"$share/guest-run.sh"
chmod +x "$share/guest-run.sh"
SHARE=$share LOG=$share/console.log "$HERE/run-vm.sh" share >/dev/null 2>&1
cat "$share/out.txt" 2>/dev/null
if [ ! -s "$share/rc" ]; then
  echo "cargo-vm-runner: the VM returned no result; console tail:" >&2
  tr -d '\r' <"$share/console.log" | tail -n 40 >&2
  exit 101
fi
exit "$(cat "$share/rc")"
