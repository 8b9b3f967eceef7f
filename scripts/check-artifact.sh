#!/usr/bin/env bash
# Checks a built plugin library the way NCCL and a GPU node see it: it exports the ncclNetPlugin_v8
# .. _v12 vtables and nothing else, is marked NODELETE (NCCL dlcloses it), and needs only the C runtime
# (no libibverbs/librdmacm: those are dlopen'ed at init). Usage: check-artifact.sh LIB.so
set -uo pipefail
lib=${1:?usage: check-artifact.sh LIB.so}
[ -f "$lib" ] || { echo "check-artifact: FAILED: $lib not found" >&2; exit 1; }
fail=0
bad() { echo "check-artifact: FAILED: $*" >&2; fail=1; }

exports=$(nm -D --defined-only "$lib" | awk '{print $3}' | sort)
[ -n "$exports" ] || bad "$lib exports nothing"
extra=$(echo "$exports" | grep -Ev '^ncclNetPlugin_v[0-9]+$' || true)
[ -z "$extra" ] || bad "exports beyond the vtables: $(echo "$extra" | tr '\n' ' ')"
for v in 8 9 10 11 12; do
  echo "$exports" | grep -qx "ncclNetPlugin_v$v" || bad "no ncclNetPlugin_v$v export"
done

dyn=$(readelf -d "$lib")
echo "$dyn" | grep -E 'FLAGS_1' | grep -qw NODELETE || bad "not linked with -z nodelete (FLAGS_1 lacks NODELETE)"
needed=$(echo "$dyn" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' | sort | tr '\n' ' ')
for n in $needed; do
  case $n in
    libc.so.* | libm.so.* | libgcc_s.so.* | ld-linux*.so.* | libpthread.so.* | libdl.so.* | librt.so.*) ;;
    *) bad "NEEDED $n: the plugin must load on a node without it (only the C runtime may be linked)" ;;
  esac
done
glibc=$(objdump -T "$lib" | grep -o 'GLIBC_[0-9.]*' | sort -Vu | tail -1)
size=$(stat -c %s "$lib")
tmp=$(mktemp)
strip -o "$tmp" "$lib" && stripped=$(stat -c %s "$tmp") || stripped="?"
rm -f "$tmp"
echo "check-artifact: $lib: exports [$(echo "$exports" | tr '\n' ' ')], NODELETE, NEEDED [$needed], highest $glibc, $size bytes ($stripped stripped)"
exit $fail
