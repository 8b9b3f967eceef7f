#!/usr/bin/env bash
# inside.sh SUITE TIMINGS_FILE: the phases scripts/fresh-root.sh runs inside a fresh Debian root,
# from the repository's top, as a new user would: the README's commands, which install their
# own dependencies. Writes one "name<TAB>seconds<TAB>ok|FAILED (exit N)" line per phase.
set -uo pipefail
suite=$1 tfile=$2
cd /root/dqplb-net
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
echo "[$suite] $(. /etc/os-release; echo "$PRETTY_NAME"), $(cargo --version), nproc $(nproc)"
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
  *) echo "inside.sh: unknown suite $suite" >&2; exit 2 ;;
esac
exit $rc_all
