#!/usr/bin/env bash
# fresh-root.sh: proves the README's set-up on clean machines. For each suite it unpacks a fresh
# Debian root (debootstrap --variant=minbase from the host's Debian mirror), copies a clean
# `git archive HEAD` of this repository in, bind-mounts the host's Rust toolchain read-only (an
# empty CARGO_HOME, nothing else preinstalled) and, chrooted as a new user would, runs:
#
#   bookworm (Debian 12): bash scripts/main-job.sh, then bash scripts/setup-deps.sh --test and
#                         cargo test --locked --no-fail-fast (unit + integration tests; not the
#                         Soft-RoCE VM suite nor the shaped-path guard)
#   trixie   (Debian 13): bash scripts/build.sh, then cargo test --locked --lib
#
# and, on Debian 12 roots WITHOUT the toolchain or the repository (the packages as a user gets
# them; built on the host first: bash scripts/build.sh --portable && bash scripts/wheel.sh &&
# bash scripts/deb.sh, which scripts/test.sh does):
#
#   wheel: python3-venv from apt, a venv, pip install --no-index dist/dqplb_net-*.whl,
#          python -m dqplb_net selftest and the `dqplb` console script
#   deb:   apt install ./dist/dqplb-net_*.deb, python3 -m dqplb_net selftest through the installed
#          library, the installed files, apt purge
#
# usage: sudo bash scripts/fresh-root.sh [bookworm|trixie|wheel|deb|all] [--rebuild-base] [--keep]
#   default all (the four). --rebuild-base ignores the cached base tarball; --keep leaves the
#   unpacked roots in $DQPLB_ROOT_WORK for inspection (mounts are always removed).
# environment: DQPLB_ROOT_CACHE (default /var/cache/dqplb-roots) holds <suite>.tar, the
#   debootstrapped base, reused while younger than DQPLB_ROOT_MAX_AGE_DAYS (default 14) and made
#   from the same mirror; DQPLB_ROOT_WORK (default /var/tmp) is where roots are unpacked;
#   DQPLB_ROOT_MIRROR overrides the mirror; DQPLB_ROOT_NICE (default 0) runs each root niced;
#   DQPLB_ROOT_REV (default HEAD) is the commit whose tree is copied in;
#   CARGO_BUILD_JOBS is passed into the root when set; DQPLB_ROOT_DIST (default dist/ of this
#   checkout) holds the wheel and the .deb, which must be builds of DQPLB_ROOT_REV.
# exit: 0 all phases passed; 1 a phase failed (named in the summary); 2 bad usage; 3 the Debian
#   mirror is unreachable or debootstrap could not fetch from it (the reason is printed);
#   77 not root (skipped).
set -uo pipefail
# The whole script is one { ... } block, read before it runs: editing or checking out this file
# during a run cannot change what the run does.
{
REPO=$(cd "$(dirname "$0")/.." && pwd)
HELPERS="$REPO/scripts/fresh-root"
CACHE=${DQPLB_ROOT_CACHE:-/var/cache/dqplb-roots}
WORK=${DQPLB_ROOT_WORK:-/var/tmp}
MAX_AGE_DAYS=${DQPLB_ROOT_MAX_AGE_DAYS:-14}
NICE=${DQPLB_ROOT_NICE:-0}
REV=${DQPLB_ROOT_REV:-HEAD}
DIST=${DQPLB_ROOT_DIST:-$REPO/dist}

suites=() rebuild=0 keep=0
for a in "$@"; do
  case "$a" in
    bookworm | trixie | wheel | deb) suites+=("$a") ;;
    all) suites+=(bookworm trixie wheel deb) ;;
    --rebuild-base) rebuild=1 ;;
    --keep) keep=1 ;;
    -h | --help) sed -n '2,33p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "fresh-root: unknown argument '$a'" >&2; exit 2 ;;
  esac
done
[ ${#suites[@]} -gt 0 ] || suites=(bookworm trixie wheel deb)

if [ "$(id -u)" != 0 ]; then
  echo "fresh-root: needs root (debootstrap, chroot, bind mounts); skipped" >&2
  exit 77
fi

say() { echo "fresh-root: $*"; }
T0=$SECONDS
timings=() failures=()
timing() { timings+=("$(printf '%-9s %-40s %6s s  %s' "$1" "$2" "$3" "$4")"); }

# ---- host tools -----------------------------------------------------------------------------
host_need=()
for c in debootstrap:debootstrap wget:wget git:git unshare:util-linux chroot:coreutils tar:tar flock:util-linux; do
  command -v "${c%%:*}" >/dev/null 2>&1 || host_need+=("${c#*:}")
done
if [ ${#host_need[@]} -gt 0 ]; then
  say "installing on the host: ${host_need[*]}"
  DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=300 update -qq &&
    DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=300 install -y -qq \
      --no-install-recommends "${host_need[@]}" >/dev/null ||
    { echo "fresh-root: could not install ${host_need[*]} on the host" >&2; exit 1; }
fi

# ---- the Debian mirror the host's apt uses ----------------------------------------------------
host_mirror() {
  local f
  # deb822 sources: the first URI of a 'deb' stanza that is a Debian archive (path .../debian).
  for f in /etc/apt/sources.list.d/*.sources; do
    [ -f "$f" ] || continue
    awk 'BEGIN{RS=""; FS="\n"}
      { types=""; uris=""; en="yes"
        for (i=1;i<=NF;i++) {
          if ($i ~ /^Types:/) types=$i
          if ($i ~ /^URIs:/) uris=$i
          if ($i ~ /^Enabled:[ \t]*no/) en="no"
        }
        if (en=="yes" && types ~ /(^|[ \t])deb([ \t]|$)/) {
          sub(/^URIs:[ \t]*/, "", uris); n=split(uris, u, /[ \t]+/)
          for (j=1;j<=n;j++) if (u[j] ~ /\/debian\/?$/) { print u[j]; exit }
        } }' "$f"
  done
  # one-line sources
  cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null |
    awk '$1=="deb" { for (i=2;i<=NF;i++) if ($i !~ /^\[/ && $i ~ /^[a-z]+:\/\//) { if ($i ~ /\/debian\/?$/) print $i; break } }'
}
if [ -n "${DQPLB_ROOT_MIRROR:-}" ]; then
  MIRROR=$DQPLB_ROOT_MIRROR from="DQPLB_ROOT_MIRROR"
else
  MIRROR=$(host_mirror | head -n1) from="the host's apt sources"
  [ -n "$MIRROR" ] || MIRROR=http://deb.debian.org/debian from="default; the host's apt sources name no Debian archive"
fi
MIRROR=${MIRROR%/}
git -C "$REPO" rev-parse --verify -q "$REV^{commit}" >/dev/null ||
  { echo "fresh-root: DQPLB_ROOT_REV=$REV is not a commit" >&2; exit 2; }
say "tree: $REV = $(git -C "$REPO" rev-parse --short "$REV^{commit}") (git archive, not the working directory)"
say "Debian mirror: $MIRROR ($from)"

# ---- host network settings copied into each root --------------------------------------------
# Not project dependencies: they only let apt and cargo inside the root reach the registries the
# way the host does. The registries are reached through a proxy whose CA certificate is in the
# host's local CA store, so the CA store is copied in for the run (and removed with the root);
# the proxy-related apt settings, any cargo config of the host, and the proxy/CA environment
# variables are passed through likewise.
apt_net_conf=$(grep -hE '^[[:space:]]*Acquire::([A-Za-z]+::)?(Proxy|Check-Valid-Until|Check-Date|Verify-Peer|Verify-Host|CaInfo|CaPath)' \
  /etc/apt/apt.conf /etc/apt/apt.conf.d/* 2>/dev/null || true)
host_cargo_conf=""
for f in "${CARGO_HOME:-$HOME/.cargo}/config.toml" "${CARGO_HOME:-$HOME/.cargo}/config"; do
  [ -f "$f" ] && { host_cargo_conf=$f; break; }
done
pass_env=()
while IFS='=' read -r k _; do
  case "$k" in
    *[Pp][Rr][Oo][Xx][Yy]* | SSL_CERT_FILE | SSL_CERT_DIR | CURL_CA_BUNDLE | GIT_SSL_CAINFO | \
      CARGO_HTTP_* | CARGO_NET_* | CARGO_BUILD_JOBS) pass_env+=("$k=${!k}") ;;
  esac
done < <(env)

# ---- the host's Rust toolchain (mounted read-only; the source suites only) -------------------
tc_mount_src=- tc_mount_dst=- tc_path=/nonexistent tc_env=()
if printf '%s\n' "${suites[@]}" | grep -qxE 'bookworm|trixie'; then
  cargo_real=$(rustup which cargo 2>/dev/null || command -v cargo || true)
  if [ -z "$cargo_real" ]; then
    echo "fresh-root: no Rust toolchain on the host to mount into the roots (rustup which cargo)" >&2
    exit 1
  fi
  cargo_real=$(readlink -f "$cargo_real")
  tc_dir=$(dirname "$(dirname "$cargo_real")")     # <toolchain>/bin/cargo -> <toolchain>
  case "$tc_dir" in
    */toolchains/*)
      host_rustup=$(dirname "$(dirname "$tc_dir")")  # <RUSTUP_HOME>/toolchains/<name>
      tc_name=$(basename "$tc_dir")
      tc_mount_src=$host_rustup tc_mount_dst=/opt/rustup
      tc_path=/opt/rustup/toolchains/$tc_name/bin
      tc_env=(RUSTUP_HOME=/opt/rustup RUSTUP_TOOLCHAIN="$tc_name")
      ;;
    *)
      tc_mount_src=$tc_dir tc_mount_dst=/opt/rust tc_path=/opt/rust/bin tc_env=()
      ;;
  esac
  say "Rust toolchain: $tc_dir ($("$cargo_real" --version 2>/dev/null)), mounted read-only at $tc_mount_dst"
fi

# ---- cleanup ----------------------------------------------------------------------------------
roots=()
cleanup() {
  local r
  for r in "${roots[@]}"; do
    [ -d "$r" ] || continue
    # The mounts live in a private mount namespace that ends with the root's session; this is a
    # safety net should one have leaked.
    if grep -qF " $r/" /proc/self/mounts; then
      awk -v r="$r/" 'index($2, r)==1 {print $2}' /proc/self/mounts | sort -r |
        while read -r m; do umount -l "$m" 2>/dev/null; done
    fi
    if grep -qF " $r/" /proc/self/mounts; then
      echo "fresh-root: mounts remain under $r; not removing it" >&2
    elif [ $keep = 1 ]; then
      say "kept $r"
    else
      rm -rf --one-file-system "$r"
    fi
  done
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# ---- base tarball ---------------------------------------------------------------------------
mirror_check() { # suite -> 0 reachable, else prints why
  local out
  if ! out=$(wget -T 30 -t 2 -O /dev/null "$MIRROR/dists/$1/InRelease" 2>&1); then
    out=$(printf '%s\n' "$out" | grep -v '^[[:space:]]*$' | tail -n 2 | tr '\n' ' ')
    echo "fresh-root: the Debian mirror is unreachable: wget $MIRROR/dists/$1/InRelease failed: $out" >&2
    return 1
  fi
}

base_tar() { # suite -> sets BASE to the tarball path; exits 3 when the mirror is unreachable
  local suite=$1 tarball="$CACHE/$1.tar" meta="$CACHE/$1.meta" t0=$SECONDS
  # apt in the root needs the mirror as much as debootstrap does: check it either way
  mirror_check "$suite" || exit 3
  mkdir -p "$CACHE"
  exec 9>"$CACHE/.$suite.lock"
  flock 9
  if [ $rebuild = 0 ] && [ -f "$tarball" ] && [ "$(cat "$meta" 2>/dev/null)" = "$MIRROR" ] &&
    [ -n "$(find "$tarball" -mtime -"$MAX_AGE_DAYS" 2>/dev/null)" ]; then
    say "$suite: cached base $tarball ($(du -h "$tarball" | cut -f1), $(date -r "$tarball" -u +%F))"
    timing "$suite" "base (cached tarball)" 0 ok
    flock -u 9
    BASE=$tarball
    return 0
  fi
  local tmp="$CACHE/$suite.build.$$"
  rm -rf --one-file-system "$tmp"
  say "$suite: debootstrap --variant=minbase $suite from $MIRROR (cached as $tarball)"
  # In a private mount namespace so that debootstrap's /proc and /sys mounts cannot outlive it.
  if ! unshare --mount --propagation private \
    debootstrap --variant=minbase --arch=amd64 "$suite" "$tmp" "$MIRROR" >"$CACHE/$suite.debootstrap.log" 2>&1; then
    tail -n 20 "$CACHE/$suite.debootstrap.log" >&2
    rm -rf --one-file-system "$tmp"
    if grep -qiE "couldn't download|failed getting release|unable to connect|connection refused|name or service not known|temporary failure in name resolution" \
      "$CACHE/$suite.debootstrap.log"; then
      echo "fresh-root: debootstrap could not download from $MIRROR (log: $CACHE/$suite.debootstrap.log)" >&2
      exit 3
    fi
    echo "fresh-root: debootstrap $suite failed (log: $CACHE/$suite.debootstrap.log)" >&2
    exit 1
  fi
  rm -rf "$tmp"/var/cache/apt/archives/*.deb "$tmp"/var/lib/apt/lists/* 2>/dev/null
  tar --numeric-owner --xattrs -C "$tmp" -cf "$tarball.part" . && mv -f "$tarball.part" "$tarball" &&
    echo "$MIRROR" >"$meta"
  rm -rf --one-file-system "$tmp"
  flock -u 9
  [ -f "$tarball" ] || { echo "fresh-root: could not write $tarball" >&2; exit 1; }
  timing "$suite" "base (debootstrap + tar)" $((SECONDS - t0)) ok
  BASE=$tarball
}

# ---- one root -------------------------------------------------------------------------------
# the one package file for a package suite (wheel|deb), built from $REV; else a message, return 1
package_file() {
  local suite=$1 files want built
  want=$(git -C "$REPO" rev-parse --short "$REV^{commit}")
  case "$suite" in
    wheel) files=("$DIST"/dqplb_net-*-py3-none-manylinux_2_28_x86_64.whl) ;;
    deb) files=("$DIST"/dqplb-net_*_amd64.deb) ;;
  esac
  if [ ${#files[@]} != 1 ] || [ ! -f "${files[0]}" ]; then
    echo "fresh-root: $suite: expected one package file in $DIST (${files[*]}); build it on the host first: bash scripts/build.sh --portable && bash scripts/wheel.sh && bash scripts/deb.sh" >&2
    return 1
  fi
  case "$suite" in
    wheel) built=$(python3 -c 'import sys, zipfile; print(zipfile.ZipFile(sys.argv[1]).read("dqplb_net/_build_info.py").decode())' \
      "${files[0]}" 2>/dev/null | sed -n 's/^GIT_HASH = "\(.*\)"$/\1/p') ;;
    deb) built=$(dpkg-deb -f "${files[0]}" Description 2>/dev/null | sed -n 's/.*Built from git commit \([0-9a-f]*\)\..*/\1/p') ;;
  esac
  if [ "$built" != "$want" ]; then
    echo "fresh-root: $suite: ${files[0]} is a build of '${built:-?}', the tree is $REV = $want: rebuild it (bash scripts/build.sh --portable && bash scripts/wheel.sh && bash scripts/deb.sh)" >&2
    return 1
  fi
  PKG_FILE=${files[0]}
}

run_root() { # suite
  local suite=$1 t0 tarball root rc base_suite=$1 packaged=0 what
  case "$suite" in wheel | deb) base_suite=bookworm packaged=1 ;; esac
  if [ $packaged = 1 ] && ! package_file "$suite"; then
    failures+=("$suite: package file")
    return 1
  fi
  base_tar "$base_suite"
  tarball=$BASE

  t0=$SECONDS
  root=$(mktemp -d "$WORK/dqplb-root-$suite.XXXXXX")
  roots+=("$root")
  tar --numeric-owner --xattrs -C "$root" -xf "$tarball" || { failures+=("$suite: unpack"); return 1; }
  if [ $packaged = 1 ]; then
    # only the package file: no repository, no toolchain, no cargo
    mkdir -p "$root/root/pkg"
    cp "$PKG_FILE" "$root/root/pkg/" || { failures+=("$suite: copy $PKG_FILE"); return 1; }
  else
    # the repository as committed (a clean checkout, not this working directory and its target/)
    mkdir -p "$root/root/dqplb-net" "$root/root/.cargo" "$root$tc_mount_dst"
    git -C "$REPO" archive --format=tar "$REV" | tar -C "$root/root/dqplb-net" -xf - ||
      { failures+=("$suite: git archive"); return 1; }
  fi
  # host network settings (see above): resolver, CA store, apt proxy settings, cargo config
  rm -f "$root/etc/resolv.conf"
  cp -L /etc/resolv.conf "$root/etc/resolv.conf"
  mkdir -p "$root/usr/local/share/ca-certificates" "$root/etc/ssl/certs"
  cp -a /usr/local/share/ca-certificates/. "$root/usr/local/share/ca-certificates/" 2>/dev/null
  cp -L /etc/ssl/certs/ca-certificates.crt "$root/etc/ssl/certs/ca-certificates.crt" 2>/dev/null
  [ -z "$apt_net_conf" ] || printf '// copied from the host by scripts/fresh-root.sh (network only)\n%s\n' \
    "$apt_net_conf" >"$root/etc/apt/apt.conf.d/00host-network"
  [ -z "$host_cargo_conf" ] || [ $packaged = 1 ] || { cp "$host_cargo_conf" "$root/root/.cargo/"; say "$suite: copied the host's $host_cargo_conf (network settings) into CARGO_HOME"; }
  # the phases are this script's (so that DQPLB_ROOT_REV may name any commit)
  cp "$HELPERS/inside.sh" "$root/root/fresh-root-inside.sh"
  if [ $packaged = 1 ]; then what=package; else what=repo; fi
  timing "$suite" "unpack + copy $what and host settings" $((SECONDS - t0)) ok

  say "$suite: root $root; running the phases of scripts/fresh-root/inside.sh $suite"
  local mount_src=$tc_mount_src mount_dst=$tc_mount_dst
  if [ $packaged = 1 ]; then
    say "$suite: $(basename "$PKG_FILE") copied in; no Rust toolchain mounted"
    mount_src=- mount_dst=-
    env_in=(HOME=/root USER=root LOGNAME=root SHELL=/bin/bash TERM=dumb LANG=C.UTF-8
      PATH="/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" "${pass_env[@]}")
  else
    env_in=(HOME=/root USER=root LOGNAME=root SHELL=/bin/bash TERM=dumb LANG=C.UTF-8
      PATH="$tc_path:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
      CARGO_HOME=/root/.cargo CARGO_TERM_COLOR=never CARGO_TERM_PROGRESS_WHEN=never
      "${tc_env[@]}" "${pass_env[@]}")
  fi
  local tfile="$root/root/timings"
  t0=$SECONDS
  nice -n "$NICE" unshare --mount --propagation private --pid --fork \
    bash "$HELPERS/enter.sh" "$root" "$mount_src" "$mount_dst" -- "${env_in[@]}" -- \
    bash /root/fresh-root-inside.sh "$suite" /root/timings
  rc=$?
  if [ -f "$tfile" ]; then
    while IFS=$'\t' read -r name secs result; do
      timing "$suite" "$name" "$secs" "$result"
      [ "$result" = ok ] || failures+=("$suite: $name")
    done <"$tfile"
  fi
  if [ $rc -ne 0 ] && [ ! -s "$tfile" ]; then failures+=("$suite: entering the root (exit $rc)"); fi
  say "$suite: done in $((SECONDS - t0)) s (exit $rc)"
  cleanup
  roots=()
  return $rc
}

for s in "${suites[@]}"; do
  run_root "$s"
  rc=$?
  [ $rc -eq 3 ] && exit 3
done

echo
echo "fresh-root: timings"
printf '  %s\n' "${timings[@]}"
echo "fresh-root: total $((SECONDS - T0)) s"
if [ ${#failures[@]} -gt 0 ]; then
  echo "fresh-root: FAILED: ${failures[*]}"
  exit 1
fi
echo "fresh-root: all phases passed (${suites[*]})"
exit 0
}
