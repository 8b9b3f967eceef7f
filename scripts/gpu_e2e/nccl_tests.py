"""Builds nccl-tests' all_reduce_perf against torch's NCCL and runs it as two MPI ranks on one GPU
through the plugin; parses its table and "Out of bounds values" footer.

Without MPI, nccl-tests cannot start two processes, and one process cannot give its ranks
different NCCL_HOSTIDs: the stage is then skipped with a loud message (see docs/records/gpu-e2e.md).
"""

import argparse
import json
import os
import shlex
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from typing import List, Optional

if __package__ in (None, ""):
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from gpu_e2e import launch, nccl_log  # noqa: E402


@dataclass
class Row:
    size: int
    count: int
    dtype: str
    redop: str
    oop_time_us: float
    oop_algbw: float
    oop_busbw: float
    oop_wrong: Optional[int]  # None when the data check was off ("N/A")
    ip_time_us: float
    ip_algbw: float
    ip_busbw: float
    ip_wrong: Optional[int]


@dataclass
class PerfOutput:
    rows: List[Row] = field(default_factory=list)
    out_of_bounds: Optional[int] = None
    avg_busbw: Optional[float] = None
    wrong_lines: List[str] = field(default_factory=list)
    validation: Optional[int] = None  # the header's "validation: N" (the -c check count)

    def verdict(self):
        """(ok, reason)."""
        if not self.rows:
            return False, "no result rows in the all_reduce_perf output"
        if self.out_of_bounds is None:
            return False, "no 'Out of bounds values' footer (the run did not finish)"
        # With -c 0 nothing is compared, yet the footer still says "0 OK": #wrong is then "N/A"
        # (older nccl-tests) or -1 (newer), and the header says "validation: 0".
        unchecked = [r.size for r in self.rows if r.oop_wrong is None or r.oop_wrong < 0
                     or r.ip_wrong is None or r.ip_wrong < 0]
        if self.validation == 0 or unchecked:
            return False, "results not checked (validation %s, #wrong N/A or -1 at sizes %s)" % (
                self.validation, unchecked)
        bad = [r.size for r in self.rows if (r.oop_wrong or 0) > 0 or (r.ip_wrong or 0) > 0]
        if self.out_of_bounds != 0 or bad or self.wrong_lines:
            return False, "wrong results: %d out of bounds, sizes %s" % (self.out_of_bounds, bad)
        return True, "%d sizes, avg busbw %s GB/s" % (len(self.rows), self.avg_busbw)


def _wrong(tok):
    return None if tok == "N/A" else int(tok)


def parse_perf_output(text: str) -> PerfOutput:
    """Rows look like: size count type redop root time algbw busbw #wrong time algbw busbw #wrong
    (newer versions may append per-iteration columns, which are ignored)."""
    out = PerfOutput()
    for line in text.splitlines():
        s = line.strip()
        if s.startswith("# Out of bounds values"):
            out.out_of_bounds = int(s.split(":", 1)[1].split()[0])
            continue
        if s.startswith("# nThread ") and " validation: " in s:
            try:
                out.validation = int(s.split(" validation: ", 1)[1].split()[0])
            except ValueError:
                pass
            continue
        if s.startswith("# Avg bus bandwidth"):
            out.avg_busbw = float(s.split(":", 1)[1].split()[0])
            continue
        if "#wrong=" in s:
            out.wrong_lines.append(s)
            continue
        tok = s.split()
        if len(tok) < 13 or not tok[0].isdigit() or not tok[1].isdigit():
            continue
        try:
            out.rows.append(Row(int(tok[0]), int(tok[1]), tok[2], tok[3], float(tok[5]), float(tok[6]),
                                float(tok[7]), _wrong(tok[8]), float(tok[9]), float(tok[10]), float(tok[11]),
                                _wrong(tok[12])))
        except ValueError:
            continue
    return out


def build_cmd(src, build_dir, cuda_home, nccl_home, mpi_home, gencode, jobs):
    cmd = ["make", "-C", src, "-j%d" % jobs, "MPI=1", "MPI_HOME=" + mpi_home, "CUDA_HOME=" + cuda_home,
           "NCCL_HOME=" + nccl_home, "BUILDDIR=" + build_dir]
    if gencode:
        cmd.append("NVCC_GENCODE=" + gencode)
    return cmd


def gencode_for(cc):
    """'9.0' -> '-gencode=arch=compute_90,code=sm_90' (only the GPU's own arch: a short build)."""
    if not cc:
        return None
    major, _, minor = str(cc).partition(".")
    if not (major.isdigit() and (minor or "0").isdigit()):
        return None
    arch = "%s%s" % (major, minor or "0")
    return "-gencode=arch=compute_%s,code=sm_%s" % (arch, arch)


def mpirun_cmd(mpirun, flavor, is_root, wrapper, binary, max_bytes, env_names):
    cmd = [mpirun, "-np", "2"]
    if flavor == "openmpi":
        cmd += ["--oversubscribe", "--bind-to", "none"]
        if is_root:
            cmd.append("--allow-run-as-root")
        for name in env_names:
            cmd += ["-x", name]
    elif env_names:  # MPICH/Hydra
        cmd += ["-envlist", ",".join(env_names)]
    return cmd + [wrapper, binary, "-b", "8", "-e", str(max_bytes), "-f", "2", "-g", "1", "-c", "1"]


def make_nccl_home(dst, include_dir, lib_path):
    """nccl-tests links -lnccl from $NCCL_HOME/lib: pip's NCCL has only libnccl.so.2, so build a
    folder with include/ and lib/libnccl.so linking to torch's copy."""
    os.makedirs(os.path.join(dst, "lib"), exist_ok=True)
    for link, target in ((os.path.join(dst, "include"), include_dir),
                         (os.path.join(dst, "lib", "libnccl.so"), lib_path),
                         (os.path.join(dst, "lib", os.path.basename(lib_path)), lib_path)):
        if os.path.lexists(link):
            os.remove(link)
        if link != target:
            os.symlink(target, link)
    return dst


_RANK_WRAPPER = """#!/bin/sh
# One nccl-tests rank: its own NCCL_HOSTID so NCCL connects the two ranks through the network.
r="${OMPI_COMM_WORLD_RANK:-${PMI_RANK:-${PMIX_RANK:-0}}}"
NCCL_HOSTID="dqplb-e2e-host${r}"
NCCL_TESTS_DEVICE="${NCCL_TESTS_DEVICE:-0}"
export NCCL_HOSTID NCCL_TESTS_DEVICE
exec "$@"
"""


def _log(msg):
    print("nccl-tests: %s" % msg, flush=True)


def run_stage(a, envinfo):
    """Returns the status dict written to status.json."""
    st = {"status": "SKIPPED", "reason": "", "build_s": None, "run_s": None}
    src = a.src or envinfo.get("nccl_tests_src")
    if not src:
        st["reason"] = "no nccl-tests source tree (give --nccl-tests-dir; nothing can be downloaded)"
        return st
    mpi = envinfo.get("mpi") or {}
    if not mpi.get("mpirun") or not mpi.get("home"):
        st["reason"] = ("no MPI (mpirun + mpi.h): all_reduce_perf needs MPI to start two ranks with "
                        "different NCCL_HOSTIDs; a single-process -g 1 run would not touch the network")
        return st
    nccl = envinfo.get("nccl") or {}
    cuda_home = envinfo.get("cuda_home")
    if not nccl.get("lib") or not nccl.get("include"):
        st["reason"] = "torch's libnccl.so.2 or nccl.h not found"
        return st
    if not cuda_home:
        st["reason"] = "no CUDA toolkit (nvcc) to build nccl-tests"
        return st
    os.makedirs(a.out, exist_ok=True)
    build_dir = os.path.join(a.out, "build")
    binary = os.path.join(build_dir, "all_reduce_perf")
    prebuilt = os.path.join(src, "build", "all_reduce_perf")
    if not os.path.exists(binary):
        home = make_nccl_home(os.path.join(a.out, "nccl_home"), nccl["include"], nccl["lib"])
        cmd = build_cmd(src, build_dir, cuda_home, home, mpi["home"], gencode_for(envinfo.get("gpu_cc")),
                        os.cpu_count() or 4)
        _log("building: " + " ".join(shlex.quote(c) for c in cmd))
        t0 = time.monotonic()
        with open(os.path.join(a.out, "build.log"), "w", encoding="utf-8") as log:
            try:
                rc = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, timeout=a.build_timeout_s).returncode
            except subprocess.TimeoutExpired:
                rc = "timeout"
        st["build_s"] = round(time.monotonic() - t0, 1)
        if rc != 0 or not os.path.exists(binary):
            if os.path.exists(prebuilt) and not a.src_given:
                binary = prebuilt
                _log("build failed (%s); using the prebuilt %s" % (rc, prebuilt))
            else:
                st["status"] = "FAILED" if a.src_given else "SKIPPED"
                st["reason"] = "build failed (%s), see build.log" % rc
                return st
    wrapper = os.path.join(a.out, "rank-wrapper.sh")
    with open(wrapper, "w", encoding="utf-8") as fh:
        fh.write(_RANK_WRAPPER)
    os.chmod(wrapper, 0o755)
    version = launch.parse_version(nccl.get("version"))
    try:
        env = launch.rank_env(dict(os.environ), "plugin", 0, a.plugin, a.plugin_name, version,
                              launch.ensure_plugin_link(a.out, a.plugin))
    except ValueError as exc:
        st["status"], st["reason"] = "FAILED", str(exc)
        return st
    del env["NCCL_HOSTID"]  # set per rank by the wrapper
    env["NCCL_DEBUG_FILE"] = os.path.join(a.out, "nccl-debug.%h.%p.log")
    libdir = os.path.dirname(nccl["lib"])
    env["LD_LIBRARY_PATH"] = libdir + (":" + env["LD_LIBRARY_PATH"] if env.get("LD_LIBRARY_PATH") else "")
    if os.geteuid() == 0 and mpi.get("flavor") == "openmpi":
        env["OMPI_ALLOW_RUN_AS_ROOT"] = "1"
        env["OMPI_ALLOW_RUN_AS_ROOT_CONFIRM"] = "1"
    names = sorted(k for k in env if k.startswith("NCCL_") or k == "LD_LIBRARY_PATH")
    cmd = mpirun_cmd(mpi["mpirun"], mpi.get("flavor"), os.geteuid() == 0, wrapper, binary, a.max_bytes, names)
    _log("running: " + " ".join(shlex.quote(c) for c in cmd))
    t0 = time.monotonic()
    out_path = os.path.join(a.out, "all_reduce_perf.txt")
    with open(out_path, "w", encoding="utf-8") as fh:
        try:
            rc = subprocess.run(cmd, stdout=fh, stderr=subprocess.STDOUT, env=env, timeout=a.run_timeout_s).returncode
        except subprocess.TimeoutExpired:
            rc = "timeout"
    st["run_s"] = round(time.monotonic() - t0, 1)
    with open(out_path, "r", encoding="utf-8", errors="replace") as fh:
        perf = parse_perf_output(fh.read())
    ok, why = perf.verdict()
    logs = sorted(f for f in os.listdir(a.out) if f.startswith("nccl-debug."))
    verdicts = {}
    for f in logs:
        with open(os.path.join(a.out, f), "r", encoding="utf-8", errors="replace") as fh:
            verdicts[f] = nccl_log.parse_log(fh.read(), a.plugin_name, os.path.basename(a.plugin)).verdict
    st["rows"] = [asdict(r) for r in perf.rows]
    st["avg_busbw"] = perf.avg_busbw
    st["log_verdicts"] = verdicts
    if rc != 0:
        st["status"], st["reason"] = "FAILED", "all_reduce_perf exited %s; %s" % (rc, why)
    elif not ok:
        st["status"], st["reason"] = "FAILED", why
    elif len(verdicts) < 2 or any(v != nccl_log.USED for v in verdicts.values()):
        st["status"], st["reason"] = "FAILED", "plugin not shown in use in both rank logs: %s" % verdicts
    else:
        st["status"], st["reason"] = "OK", why
    return st


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--env", required=True, help="env.json written by check_env")
    ap.add_argument("--out", required=True)
    ap.add_argument("--plugin", required=True)
    ap.add_argument("--plugin-name", default="DQPLB")
    ap.add_argument("--src", default=None, help="nccl-tests source tree")
    ap.add_argument("--src-given", action="store_true", help="the user named --src: a failed build fails")
    ap.add_argument("--max-bytes", default="256M")
    ap.add_argument("--build-timeout-s", type=float, default=150)
    ap.add_argument("--run-timeout-s", type=float, default=90)
    a = ap.parse_args(argv)
    a.plugin = os.path.abspath(a.plugin)
    with open(a.env, "r", encoding="utf-8") as fh:
        envinfo = json.load(fh)
    os.makedirs(a.out, exist_ok=True)
    st = run_stage(a, envinfo)
    with open(os.path.join(a.out, "status.json"), "w", encoding="utf-8") as fh:
        json.dump(st, fh, indent=2)
    if st["status"] == "SKIPPED":
        bar = "!" * 78
        print("%s\nnccl-tests SKIPPED: %s\n%s" % (bar, st["reason"], bar), flush=True)
    else:
        _log("%s: %s" % (st["status"], st["reason"]))
    return 1 if st["status"] == "FAILED" else 0


if __name__ == "__main__":
    sys.exit(main())
