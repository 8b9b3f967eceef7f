#!/usr/bin/env bash
# The TCP transport against a peer NCCL net plugin, aws-ofi-nccl over libfabric's tcp provider,
# driven by the same `dqplb perf` (two processes, same in-flight count and polling; --plugin for
# the peer), and against plain TCP on the same streams. Builds the host-only CUDA stub
# (scripts/peer/cuda-stub), optionally libfabric, and the peer into a scratch directory; never
# downloads. Runs the kinds in turn size by size (so all see the same machine load), prints
# bandwidth (GB/s, median of --pairs runs) and CPU seconds per GB moved (user + system of both
# processes, /usr/bin/time) with the ratios dqplb/peer, as a markdown table.
# Every run happens in a network namespace of its own (--netns, created and removed here; needs
# root) on the address of a veth end inside it: libfabric offers an interface only when it can
# reach remote peers (FI_LOCAL_COMM|FI_REMOTE_COMM, which the peer asks for), which loopback
# cannot; traffic to that address stays inside the namespace like loopback.
# libfabric: the peer's sendrecv protocol needs the native tcp RDM provider; Debian 12's 1.17
# offers only tcp;ofi_rxm / net, where the peer's memory registrations fail (duplicate MR keys),
# so give --libfabric-src a newer tree (Debian trixie's libfabric_2.1.0.orig.tar.xz works).
#   --src DIR            an aws-ofi-nccl source tree (a release tag's; required)
#   --libfabric-src DIR  a libfabric source tree to build (tcp and rxm providers only) and build
#                        the peer against; default: the system's libfabric (libfabric-dev)
#   --work DIR           scratch directory (default: a new one under /tmp); a peer already built
#                        there is reused
#   --bin PATH           the dqplb binary (default: cargo build --release -p dqplb-cli, then
#                        target/release/dqplb)
#   --pairs N            runs of each kind per size (default 3)
#   --streams L          comma list of dqplb stream counts, --qps (default 1,4)
#   --inflight L         comma list of messages in flight, --inflight of both plugins (default 4:
#                        NCCL's ring all-reduce/all-gather/reduce-scatter over SIMPLE post 8 steps
#                        of 2 (ALLREDUCE_SLICESTEPS); 8 is its send/recv and LL/LL128 regime,
#                        one step per message)
#   --sizes L            space-separated message sizes in bytes (default 64 KiB, 1, 4, 64 MiB)
#   --no-raw             leave out plain TCP
#   --syscalls           instead of the bandwidth table: system calls per message of each thread
#                        (sender, receiver, other) for dqplb and the peer, one run of 4000 + 20
#                        messages per size, stream count and in-flight count under strace -f
#                        (needs strace)
#   --mib N              data per run in MiB (default 4096: /usr/bin/time counts CPU in 10 ms steps,
#                        so a run must move enough for a CPU s/GB figure to resolve)
#   --netns NAME         the namespace's name (default dqplb-peer-bench)
set -uo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
# shellcheck source=scripts/bench-lib.sh
source scripts/bench-lib.sh

src="" lfsrc="" work="" bin=target/release/dqplb bin_given=0 pairs=3 streams=1,4 raw=1 inflights=4 syscalls=0
netns=dqplb-peer-bench mib=4096
sizes="65536 1048576 4194304 67108864"
while [[ $# -gt 0 ]]; do
    case $1 in
        --src) src=$2; shift 2 ;;
        --libfabric-src) lfsrc=$2; shift 2 ;;
        --work) work=$2; shift 2 ;;
        --bin) bin=$2; bin_given=1; shift 2 ;;
        --pairs) pairs=$2; shift 2 ;;
        --streams) streams=$2; shift 2 ;;
        --inflight) inflights=$2; shift 2 ;;
        --sizes) sizes=$2; shift 2 ;;
        --no-raw) raw=0; shift ;;
        --syscalls) syscalls=1; shift ;;
        --netns) netns=$2; shift 2 ;;
        --mib) mib=$2; shift 2 ;;
        *) echo "peer-bench: unknown option $1" >&2; exit 2 ;;
    esac
done
[[ -n $src && -f $src/configure.ac ]] || {
    echo "peer-bench: --src DIR must be an aws-ofi-nccl source tree (configure.ac missing)" >&2
    exit 2
}
src=$(realpath "$src")
[[ -z $lfsrc ]] || lfsrc=$(realpath "$lfsrc")
[[ -x /usr/bin/time ]] || { echo "peer-bench: SKIPPED: /usr/bin/time (GNU time) not installed"; exit 77; }
if [[ $syscalls == 1 ]] && ! command -v strace > /dev/null; then
    echo "peer-bench: SKIPPED: --syscalls needs strace"; exit 77
fi
if [[ $bin_given == 0 ]]; then
    cargo build --release --locked --quiet -p dqplb-cli >&2 || exit 1
fi
bin=$(realpath "$bin")
[[ -n $work ]] || work=$(mktemp -d /tmp/peer-bench.XXXXXX)
mkdir -p "$work"
work=$(realpath "$work")
log=$work/build.log

step() { echo "peer-bench: $*" >&2; }
fail() { echo "peer-bench: FAILED: $*" >&2; tail -n 30 "$log" | sed 's/^/    /' >&2; exit 1; }

# 1. The host-only CUDA stub: headers + libcudart.so in $work/cuda/{include,lib64}, the layout
#    the peer's --with-cuda expects.
mkdir -p "$work/cuda/lib64"
cp -r scripts/peer/cuda-stub/include "$work/cuda/"
gcc -O2 -Wall -Wextra -shared -fPIC -I"$work/cuda/include" \
    -o "$work/cuda/lib64/libcudart.so" scripts/peer/cuda-stub/cudart_stub.c >> "$log" 2>&1 \
    || fail "building the CUDA stub"

# 2. libfabric, if a source tree was given: only the tcp provider (and rxm over it).
lfpre=""
if [[ -n $lfsrc ]]; then
    lfpre=$work/libfabric
    if [[ ! -e $lfpre/lib/libfabric.so ]]; then
        step "building libfabric from $lfsrc"
        rm -rf "$work/libfabric-src" && cp -r "$lfsrc" "$work/libfabric-src" || fail "copying $lfsrc"
        off=""
        for p in verbs efa psm2 psm3 usnic shm sm2 opx ucx lnx cxi lpp mrail rxd udp sockets coll; do
            off+=" --enable-$p=no"
        done
        # shellcheck disable=SC2086
        (cd "$work/libfabric-src" && { [[ -x configure ]] || ./autogen.sh; } \
            && ./configure --prefix="$lfpre" --disable-static --enable-tcp=yes --enable-rxm=yes $off \
            && make -j"$(nproc)" && make install) >> "$log" 2>&1 || fail "building libfabric"
    fi
fi

# 3. The peer plugin.
peer=$work/peer/lib/libnccl-net.so
if [[ ! -e $peer ]]; then
    step "building aws-ofi-nccl from $src"
    rm -rf "$work/peer-src" && cp -r "$src" "$work/peer-src" || fail "copying $src"
    lfopt=()
    [[ -n $lfpre ]] && lfopt=(--with-libfabric="$lfpre")
    (cd "$work/peer-src" && ./autogen.sh && ./configure --prefix="$work/peer" \
        --with-cuda="$work/cuda" --enable-cudart-dynamic --enable-platform-aws=no \
        --disable-tests "${lfopt[@]}" && make -j"$(nproc)" && make install) >> "$log" 2>&1 \
        || fail "building aws-ofi-nccl"
fi
ver=$(sed -n 's/^AC_INIT(\[aws-ofi-nccl\], \[\([^]]*\)\].*/\1/p' "$src/configure.ac")
if [[ -n $lfpre ]]; then
    lfver=$("$lfpre/bin/fi_info" --version 2>/dev/null | sed -n 's/^libfabric: //p')
    lflib=$lfpre/lib
else
    lfver=$(dpkg-query -W -f '${Version}' libfabric1 2>/dev/null || echo unknown)
    lflib=""
fi

# The namespace: lo plus a veth pair, 10.99.0.1/24 on v0 (both ends stay inside).
if ! ip netns list | grep -qw "$netns"; then
    { ip netns add "$netns" && ip -n "$netns" link set lo up \
        && ip -n "$netns" link add v0 type veth peer name v1 \
        && ip -n "$netns" addr add 10.99.0.1/24 dev v0 \
        && ip -n "$netns" link set v0 up && ip -n "$netns" link set v1 up; } >> "$log" 2>&1 \
        || fail "creating network namespace $netns (needs root)"
    trap 'ip netns del "$netns" 2>/dev/null' EXIT
fi
ns=(ip netns exec "$netns")

# The peer's environment: the stub and libfabric on the loader path; libfabric's tcp provider on
# v0; the sendrecv protocol (the one for providers without RDMA writes).
peer_env=(LD_LIBRARY_PATH="$work/cuda/lib64${lflib:+:$lflib}" FI_PROVIDER=tcp FI_TCP_IFACE=v0
    OFI_NCCL_PROTOCOL=SENDRECV)

# Sanity: the peer moves every byte right (checked run, 64 KiB .. 1 MiB).
if ! "${ns[@]}" env "${peer_env[@]}" "$bin" perf --plugin "$peer" --min-bytes 64K --max-bytes 1M \
    --step-factor 4 --iters 20 > "$work/check.out" 2> "$work/check.err"; then
    cat "$work/check.out" "$work/check.err" | head -n 30 | sed 's/^/    /' >&2
    echo "peer-bench: FAILED: the peer's checked run failed" >&2
    exit 1
fi
grep -q "^# Out of bounds values : 0 OK" "$work/check.out" || {
    cat "$work/check.out" >&2; echo "peer-bench: FAILED: the peer delivered wrong bytes" >&2; exit 1; }
peer_head=$(grep "^# plugin:" "$work/check.out" | sed 's/^# plugin: //')

out=$work/run
mkdir -p "$out"

# iterations: about --mib MiB per run, at least 10; warm-up a tenth (at least 1, at most 20).
iters_for() { local n=$(( (mib << 20) / $1 )); (( n < 10 )) && n=10; echo "$n"; }

# run KIND SIZE STREAMS INFLIGHT -> "GBps CPU_s_per_GB" (or "fail")
run() {
    local kind=$1 size=$2 qps=$3 inflight=$4 it wu extra=() env=(NCCL_DEBUG=WARN NCCL_SOCKET_IFNAME=v0)
    it=$(iters_for "$size"); wu=$(( it / 10 )); (( wu < 1 )) && wu=1; (( wu > 20 )) && wu=20
    case $kind in
        dqplb) extra=(--qps "$qps" --inflight "$inflight") ;;
        peer) extra=(--plugin "$peer" --inflight "$inflight"); env+=("${peer_env[@]}") ;;
        # A thread per stream writing back to back: no messages in flight to count.
        raw) extra=(--raw-tcp --qps "$qps") ;;
    esac
    timed_perf "$out" "$size" "$it" "$wu" "${ns[@]}" env "${env[@]}" "$bin" perf "${extra[@]}"
}

col() {
    [[ -s $out/$1 ]] || { echo "-"; return; }
    grep -v fail "$out/$1" | awk -v f="$2" '{ print $f }' | median
}
# pair_ratios: dqplb/peer of each pair of runs made one after the other (the same machine
# state), as "min-max" over the pairs where both ran; "n/a" for none.
pair_ratios() {
    paste -d' ' "$out/dqplb" "$out/peer" | awk '
        $1 ~ /^[0-9.]+$/ && $3 ~ /^[0-9.]+$/ && $3 > 0 { r = $1 / $3; if (n == 0 || r < lo) lo = r; if (n == 0 || r > hi) hi = r; n++ }
        END { if (n) printf "%.2f-%.2f", lo, hi; else printf "n/a" }'
}
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a ~ /^[0-9.]+$/ && b ~ /^[0-9.]+$/ && b > 0) printf "%.2f", a / b; else printf "n/a" }'; }
human() { awk -v b="$1" 'BEGIN { if (b >= 1048576) printf "%d MiB", b / 1048576; else printf "%d KiB", b / 1024 }'; }

# per_thread KIND SIZE STREAMS INFLIGHT: one run of $sys_msgs + 20 messages under strace -f; prints a markdown row per
# thread that made the calls counted once per 100 messages or more, with its calls per message:
# "sender" is the thread whose sendmsg calls moved the most bytes, "receiver" the one whose reads
# did, any other "other".
calls="sendmsg recvfrom readv poll epoll_wait sched_yield" sys_msgs=4000
per_thread() {
    local kind=$1 size=$2 qps=$3 inflight=$4 n=$sys_msgs extra=() env=(NCCL_DEBUG=WARN NCCL_SOCKET_IFNAME=v0)
    case $kind in
        dqplb) extra=(--qps "$qps" --inflight "$inflight") ;;
        peer) extra=(--plugin "$peer" --inflight "$inflight"); env+=("${peer_env[@]}") ;;
    esac
    if ! "${ns[@]}" env "${env[@]}" strace -f -qq -e trace="${calls// /,}" -o "$out/strace" \
        "$bin" perf "${extra[@]}" --min-bytes "$size" --max-bytes "$size" --iters "$n" \
        --warmup 20 --no-check > "$out/csv" 2> "$out/err"; then
        echo "| $kind | $inflight | $qps | $(human "$size") | failed: $(head -c 200 "$out/err" | tr '\n|' '  ') |"
        return
    fi
    awk -v n=$((n + 20)) -v kind="$kind" -v inflight="$inflight" -v qps="$qps" -v size="$(human "$size")" \
        -v calls="$calls" '
        # A call that another thread interrupted shows as "<unfinished ...>" and later as
        # "<... NAME resumed>": count the start, take the byte count from the line that ends it.
        $2 ~ /^[a-z_0-9]+\(/ { name = $2; sub(/\(.*/, "", name); cnt[$1, name]++; tids[$1] = 1 }
        / = [0-9]+$/ && /sendmsg/ { sent[$1] += $NF }
        / = [0-9]+$/ && /recvfrom|readv/ { got[$1] += $NF }
        END {
            snd = ""; rcv = ""
            for (t in tids) {
                if (snd == "" || sent[t] > sent[snd]) snd = t
                if (rcv == "" || got[t] > got[rcv]) rcv = t
            }
            nc = split(calls, c, " ")
            for (t in tids) {
                role = t == snd ? "sender" : t == rcv ? "receiver" : "other"
                total = 0; for (i = 1; i <= nc; i++) total += cnt[t, c[i]]
                # Set-up threads and the parent of the two processes: a handful of calls.
                if (role == "other" && total < n / 100) continue
                line = sprintf("| %s | %s | %s | %s | %s |", kind, inflight, qps, size, role)
                for (i = 1; i <= nc; i++) line = line sprintf(" %.2f |", cnt[t, c[i]] / n)
                print line
            }
        }' "$out/strace" | sort -t'|' -k6,6r
}

if [[ $syscalls == 1 ]]; then
    echo "system calls per message of each thread that makes them, $((sys_msgs + 20)) messages per run, --no-check, under strace -f"
    echo "(dqplb: $bin; peer: aws-ofi-nccl $ver; namespace $netns)"
    echo
    echo "| plugin | in flight | streams | size | thread | ${calls// / | } |"
    echo "|---|---:|---:|---:|---|$(for _ in $calls; do printf -- '---:|'; done)"
    for inflight in ${inflights//,/ }; do
        for qps in ${streams//,/ }; do
            for size in $sizes; do
                per_thread dqplb "$size" "$qps" "$inflight"
                per_thread peer "$size" "$qps" "$inflight"
            done
        done
    done
    exit 0
fi

kinds=(dqplb peer)
[[ $raw == 1 ]] && kinds+=(raw)
echo "peer: aws-ofi-nccl $ver, libfabric $lfver (FI_PROVIDER=tcp, OFI_NCCL_PROTOCOL=SENDRECV); $peer_head"
echo "all runs in network namespace $netns: dqplb and the peer on 10.99.0.1 (v0), raw TCP on 127.0.0.1"
echo "dqplb: $bin; $pairs runs of each kind per size, in turn, $mib MiB each; medians; --no-check"
echo "per pair: dqplb/peer of the two runs made one after the other, lowest-highest over the $pairs pairs"
echo
echo "| in flight | streams | size | dqplb GB/s | peer GB/s | raw TCP GB/s | dqplb/peer | per pair | dqplb CPU s/GB | peer CPU s/GB | raw CPU s/GB | CPU dqplb/peer |"
echo "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
for inflight in ${inflights//,/ }; do
    for qps in ${streams//,/ }; do
        for size in $sizes; do
            for k in dqplb peer raw; do : > "$out/$k"; done
            for ((p = 0; p < pairs; p++)); do
                for k in "${kinds[@]}"; do
                    run "$k" "$size" "$qps" "$inflight" >> "$out/$k"
                done
            done
            db=$(col dqplb 1) pb=$(col peer 1) rb=$(col raw 1)
            dc=$(col dqplb 2) pc=$(col peer 2) rc=$(col raw 2)
            echo "| $inflight | $qps | $(human "$size") | $db | $pb | $rb | $(ratio "$db" "$pb") | $(pair_ratios) | $dc | $pc | $rc | $(ratio "$dc" "$pc") |"
        done
    done
done
