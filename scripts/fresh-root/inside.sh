#!/usr/bin/env bash
# inside.sh SUITE TIMINGS_FILE: the phases scripts/fresh-root.sh runs inside a fresh Debian root,
# as a new user would. bookworm, trixie: from the repository's top, the README's commands, which
# install their own dependencies. wheel, deb: the package file in /root/pkg installed as the
# README says (no repository, no Rust toolchain), then its self test.
# Writes one "name<TAB>seconds<TAB>ok|FAILED (exit N)" line per phase.
set -uo pipefail
suite=$1 tfile=$2
: >"$tfile"
rc_all=0
phase() { # name, command...
  local name=$1 t0=$SECONDS rc
  shift
  echo
  echo "=== [$suite] $name"
  "$@"
  rc=$?
  local dt=$((SECONDS - t0)) res=ok
  [ $rc -eq 0 ] || { res="FAILED (exit $rc)"; rc_all=1; }
  printf '%s\t%s\t%s\n' "$name" "$dt" "$res" >>"$tfile"
  echo "=== [$suite] $name: $res ($dt s)"
  return $rc
}
apt_install() { # packages or ./file.deb...; the log only when it fails
  export DEBIAN_FRONTEND=noninteractive
  if apt-get -o Dpkg::Use-Pty=0 update -qq >/tmp/apt.log 2>&1 &&
    apt-get -o Dpkg::Use-Pty=0 install -y -q "$@" >>/tmp/apt.log 2>&1; then
    echo "apt: $(grep -c '^Setting up ' /tmp/apt.log) packages set up: $(sed -n 's/^Setting up \([^ :]*\).*/\1/p' /tmp/apt.log | tr '\n' ' ')"
  else
    tail -n 30 /tmp/apt.log
    return 1
  fi
}
no_rust() { # the package suites prove the packages need no Rust toolchain
  local found
  found=$(command -v cargo rustc rustup 2>/dev/null; ls -d /root/.cargo /root/.rustup /opt/rust* 2>/dev/null)
  [ -z "$found" ] || { echo "a Rust toolchain is reachable in the root: $found"; return 1; }
  echo "no cargo, rustc or rustup on PATH; no ~/.cargo, ~/.rustup, /opt/rust*"
}
wheel_console_script() { # the `dqplb` console script runs the bundled binary, same version
  local v c
  v=$(/root/venv/bin/python -m dqplb_net --version) && c=$(/root/venv/bin/dqplb --version) || return 1
  echo "python -m dqplb_net --version: $v; dqplb --version: $c"
  [ "$c" = "dqplb $v" ]
}
deb_installed_files() { # what apt installed, where the README says, and nothing in /etc
  local lib=/usr/lib/x86_64-linux-gnu/libnccl-net-dqplb.so p v c
  p=$(python3 -m dqplb_net path) && v=$(python3 -m dqplb_net --version) && c=$(dqplb --version) || return 1
  echo "python3 -m dqplb_net path: $p"
  echo "python3 -m dqplb_net --version: $v; dqplb --version: $c ($(command -v dqplb))"
  [ "$p" = "$lib" ] && [ "$c" = "dqplb $v" ] || return 1
  # NCCL_NET_PLUGIN=dqplb: NCCL dlopens the file name; ld.so's cache (ldconfig trigger) has it
  python3 -c 'import ctypes; ctypes.CDLL("libnccl-net-dqplb.so").ncclNetPlugin_v8' || return 1
  echo "ctypes.CDLL(\"libnccl-net-dqplb.so\") by name: ok"
  dpkg -L dqplb-net | grep -q '^/etc' && { echo "the package installs under /etc"; return 1; }
  [ ! -e /etc/nccl-dqplb.toml ] || { echo "/etc/nccl-dqplb.toml exists"; return 1; }
  ls /usr/share/doc/dqplb-net/examples/
  dpkg-query -W -f='Depends: ${Depends}\nRecommends: ${Recommends}\nInstalled-Size: ${Installed-Size} KiB\n' dqplb-net
}
deb_purge() { # removal leaves nothing behind (prerm removes the byte-code caches Python wrote)
  DEBIAN_FRONTEND=noninteractive apt-get purge -y -qq dqplb-net >/tmp/apt.log 2>&1 || { tail -n 20 /tmp/apt.log; return 1; }
  local left
  left=$(ls -d /usr/lib/python3/dist-packages/dqplb_net /usr/lib/x86_64-linux-gnu/libnccl-net-dqplb.so /usr/bin/dqplb /usr/share/doc/dqplb-net 2>/dev/null)
  [ -z "$left" ] || { echo "left after purge: $left"; return 1; }
  echo "purged: no files left"
}

case "$suite" in
  bookworm | trixie) cd /root/dqplb-net && echo "[$suite] $(. /etc/os-release; echo "$PRETTY_NAME"), $(cargo --version), nproc $(nproc)" ;;
  *) cd /root/pkg && echo "[$suite] $(. /etc/os-release; echo "$PRETTY_NAME"), nproc $(nproc), package: $(ls)" ;;
esac
case "$suite" in
  bookworm)
    phase "bash scripts/main-job.sh" bash scripts/main-job.sh
    phase "bash scripts/setup-deps.sh --test" bash scripts/setup-deps.sh --test &&
      phase "cargo test --locked --no-fail-fast" cargo test --locked --no-fail-fast
    ;;
  trixie)
    phase "bash scripts/build.sh" bash scripts/build.sh &&
      phase "cargo test --locked --lib" cargo test --locked --lib
    ;;
  wheel)
    phase "no Rust toolchain in the root" no_rust &&
      phase "apt-get install python3-venv" apt_install --no-install-recommends python3 python3-venv &&
      phase "pip install --no-index the wheel (venv)" bash -c \
        'python3 -m venv /root/venv && /root/venv/bin/pip install --disable-pip-version-check --no-index /root/pkg/dqplb_net-*.whl' &&
      phase "python -m dqplb_net selftest" /root/venv/bin/python -m dqplb_net selftest &&
      phase "dqplb console script" wheel_console_script
    ;;
  deb)
    phase "no Rust toolchain in the root" no_rust &&
      phase "apt install ./dqplb-net_*.deb" apt_install ./dqplb-net_*.deb &&
      phase "python3 -m dqplb_net selftest" python3 -m dqplb_net selftest &&
      phase "installed files" deb_installed_files &&
      phase "apt purge dqplb-net" deb_purge
    ;;
  *) echo "inside.sh: unknown suite $suite" >&2; exit 2 ;;
esac
exit $rc_all
