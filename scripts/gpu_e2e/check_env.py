"""Reports what the end-to-end run needs and what this machine lacks; writes env.json for the run.

Exit 0 when every required item is present, 3 when one is missing (optional items only warn).
torch and the plugin are probed in child processes so a crash or hang there cannot take this down.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys

if __package__ in (None, ""):
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from gpu_e2e import launch  # noqa: E402

EXIT_OK = 0
EXIT_MISSING = 3

_TORCH_PROBE = r"""
import json, os, sys
info = {}
try:
    import torch
except Exception as e:
    print(json.dumps({"error": "import torch failed: %s: %s" % (type(e).__name__, e)})); sys.exit(0)
info["torch"] = torch.__version__
info["torch_cuda"] = torch.version.cuda
try:
    info["cuda_available"] = bool(torch.cuda.is_available())
    info["device_count"] = torch.cuda.device_count() if info["cuda_available"] else 0
    if info["device_count"]:
        cap = torch.cuda.get_device_capability(0)
        info["gpu_cc"] = "%d.%d" % cap
        info["gpu_name"] = torch.cuda.get_device_name(0)
        info["bf16"] = bool(torch.cuda.is_bf16_supported())
    import torch.distributed as dist
    info["nccl_available"] = bool(dist.is_available() and dist.is_nccl_available())
    need = ("all_reduce", "all_gather_into_tensor", "reduce_scatter_tensor", "batch_isend_irecv", "P2POp")
    info["missing_apis"] = [n for n in need if not hasattr(dist, n)]
    v = torch.cuda.nccl.version()
    info["nccl_version"] = ".".join(str(x) for x in v) if isinstance(v, tuple) else str(v)
except Exception as e:
    info["error"] = "%s: %s" % (type(e).__name__, e)
lib = None
try:
    with open("/proc/self/maps") as fh:
        for line in fh:
            p = line.split()[-1]
            if "libnccl.so" in os.path.basename(p):
                lib = p; break
except OSError:
    pass
info["nccl_lib"] = lib
inc = None
try:
    import nvidia.nccl as nn
    for root in list(getattr(nn, "__path__", [])):
        if os.path.exists(os.path.join(root, "include", "nccl.h")):
            inc = os.path.join(root, "include")
            if lib is None and os.path.exists(os.path.join(root, "lib", "libnccl.so.2")):
                info["nccl_lib"] = os.path.join(root, "lib", "libnccl.so.2")
            break
except Exception:
    pass
if inc is None and info.get("nccl_lib"):
    cand = os.path.join(os.path.dirname(os.path.dirname(info["nccl_lib"])), "include")
    if os.path.exists(os.path.join(cand, "nccl.h")):
        inc = cand
info["nccl_include"] = inc
print(json.dumps(info))
"""

# ncclNet_v8_t as NCCL declares it (plugins/net/example/nccl/net_v8.h, v2.30.7-1; the same order in
# src/include/plugin/net/net_v8.h, v2.28.3-1, and src/include/nccl_net.h, v2.24.3-1): the name, then
# these 18 function pointers.
V8_FIELDS = ("init", "devices", "getProperties", "listen", "connect", "accept", "regMr", "regMrDmaBuf",
             "deregMr", "isend", "irecv", "iflush", "test", "closeSend", "closeRecv", "closeListen",
             "getDeviceMr", "irecvConsumed")

# Entry points NCCL calls without checking them for NULL, so a NULL one crashes NCCL (read in
# NVIDIA/nccl v2.24.3-1, v2.28.3-1 and v2.30.7-1):
# - the v8 shim copies every pointer unchecked: src/net.cc ncclNet_v8_as_v9_init (2.24),
#   src/plugin/net/net_v8.cc ncclNet_init (2.26+); only name and init are read when loading;
# - init and devices: src/plugin/net.cc ncclNetPluginInit (src/net.cc netGetState in 2.24);
#   getProperties: ncclNetCheckDeviceVersion and src/transport/net.cc sendProxySetup/recvProxySetup;
# - listen (recvProxySetup), connect (sendProxyConnect), accept (recvProxyConnect), regMr
#   (send/recvProxyConnect, for every NCCL buffer), deregMr, closeSend, closeRecv, closeListen
#   (send/recvProxyFree, recvProxyConnect), isend/test (sendProxyProgress), irecv/test/iflush
#   (recvProxyProgress; iflush whenever a GPUDirect receive needs a flush, which depends on
#   getProperties' ptrSupport at run time, so it is required here too).
REQUIRED_V8 = ("init", "devices", "getProperties", "listen", "connect", "accept", "regMr", "deregMr",
               "isend", "irecv", "iflush", "test", "closeSend", "closeRecv", "closeListen")
# NULL allowed: NCCL tests these before calling them.
# - regMrDmaBuf: src/init.cc dmaBufSupported ("regMrDmaBuf == NULL" -> no DMA-BUF);
# - getDeviceMr: src/transport/net.cc sendProxyConnect calls it only with a device handle from
#   connect, recvProxyConnect only when netDeviceType != NCCL_NET_DEVICE_HOST: never for a
#   host-offload plugin, so a non-NULL one is harmless there (reported, not failed);
# - irecvConsumed: src/transport/net.cc recvProxyProgress calls it, when non-NULL, after EVERY
#   consumed receive whatever netDeviceType is (v2.20.5-1 .. v2.30.7-1), through NCCLCHECK. A
#   host-offload plugin has nothing to do there (NCCL's net_ib and net_socket leave it NULL), and
#   one that answers anything but ncclSuccess fails the first receive of every communicator, so a
#   non-NULL irecvConsumed is refused: the preflight cannot see what it returns, and DQPLB is
#   host-offload only (docs/records/abi.md).
MUST_BE_NULL_V8 = ("irecvConsumed",)

_PLUGIN_PROBE = r"""
import ctypes, json, os, sys
FIELDS = %r
class NcclNetV8(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p)] + [(f, ctypes.c_void_p) for f in FIELDS]
try:
    lib = ctypes.CDLL(sys.argv[1], mode=os.RTLD_NOW | os.RTLD_LOCAL)
except OSError as e:
    print(json.dumps({"error": "dlopen failed: %%s" %% e})); sys.exit(0)
out = {}
for sym in ("ncclNetPlugin_v8", "ncclNetPlugin_v9", "ncclNetPlugin_v10"):
    try:
        name = ctypes.c_char_p.in_dll(lib, sym).value
        out[sym] = name.decode("utf-8", "replace") if name is not None else None
    except ValueError:
        pass
res = {"symbols": out}
if "ncclNetPlugin_v8" in out:
    v8 = NcclNetV8.in_dll(lib, "ncclNetPlugin_v8")
    res["v8_null"] = [f for f in FIELDS if not getattr(v8, f)]
print(json.dumps(res))
""" % (V8_FIELDS,)


class Report:
    def __init__(self):
        self.lines, self.missing, self.info = [], [], {}

    def ok(self, what, detail):
        self.lines.append("[ OK ] %s: %s" % (what, detail))

    def miss(self, what, detail):
        self.lines.append("[MISS] %s: %s" % (what, detail))
        self.missing.append(what)

    def opt(self, what, detail):
        self.lines.append("[warn] %s: %s (optional)" % (what, detail))

    def note(self, what, detail):
        self.lines.append("[info] %s: %s" % (what, detail))


def _run_json(cmd, timeout):
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return {"error": "%s: %s" % (type(exc).__name__, exc)}
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("{")]
    if not lines:
        tail = (p.stderr or p.stdout).strip().splitlines()[-1:] or ["no output"]
        return {"error": "exit %d: %s" % (p.returncode, tail[0])}
    try:
        return json.loads(lines[-1])
    except ValueError:
        return {"error": "unreadable probe output"}


def find_cuda_home():
    cands = [os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH")]
    nvcc = shutil.which("nvcc")
    if nvcc:
        cands.append(os.path.dirname(os.path.dirname(os.path.realpath(nvcc))))
    cands.append("/usr/local/cuda")
    for c in cands:
        if c and os.access(os.path.join(c, "bin", "nvcc"), os.X_OK):
            return c
    return None


def find_mpi():
    mpirun = shutil.which("mpirun") or shutil.which("mpiexec")
    if not mpirun:
        return {}
    flavor = "unknown"
    try:
        v = subprocess.run([mpirun, "--version"], capture_output=True, text=True, timeout=20)
        text = (v.stdout + v.stderr).lower()
        flavor = "openmpi" if ("open mpi" in text or "openrte" in text or "open-mpi" in text) else (
            "mpich" if ("hydra" in text or "mpich" in text) else "unknown")
    except (OSError, subprocess.TimeoutExpired):
        pass
    cands = [os.environ.get("MPI_HOME"), os.path.dirname(os.path.dirname(os.path.realpath(mpirun))),
             "/usr/local/mpi", "/opt/hpcx/ompi", "/usr/lib/x86_64-linux-gnu/openmpi",
             "/usr/lib/x86_64-linux-gnu/mpich", "/usr/lib/aarch64-linux-gnu/openmpi", "/usr"]
    home = next((c for c in cands if c and os.path.exists(os.path.join(c, "include", "mpi.h"))), None)
    return {"mpirun": mpirun, "flavor": flavor, "home": home}


def find_nccl_tests(given, repo_root):
    cands = [given, os.environ.get("NCCL_TESTS_DIR"), os.path.join(repo_root, "nccl-tests"),
             os.path.join(repo_root, "shared", "nccl-tests"), os.path.expanduser("~/nccl-tests"),
             "/opt/nccl-tests", "/usr/local/nccl-tests", "/workspace/nccl-tests"]
    for c in cands:
        if c and os.path.exists(os.path.join(c, "src", "all_reduce.cu")):
            return os.path.abspath(c)
    return None


def judge_v8_vtable(r, plugin, name, null):
    """The verdict on ncclNetPlugin_v8's entry points (null: the fields the probe read as NULL)."""
    if null is None:
        r.miss("plugin", "%s: ncclNetPlugin_v8 entry points not read" % plugin)
        return
    missing = [f for f in REQUIRED_V8 if f in null]
    extra = [f for f in MUST_BE_NULL_V8 if f not in null]
    if missing:
        r.miss("plugin", "%s: ncclNetPlugin_v8 %r has NULL entry points NCCL calls unchecked: %s" % (
            plugin, name, ", ".join(missing)))
    if extra:
        r.miss("plugin", "%s: ncclNetPlugin_v8 %r sets %s: NCCL calls it after every consumed receive "
               "whatever the device type, a host-offload plugin must leave it NULL" % (
                   plugin, name, ", ".join(extra)))
    if missing or extra:
        return
    r.ok("plugin", "%s exports ncclNetPlugin_v8 named %r, every entry point NCCL calls is set" % (plugin, name))
    if "getDeviceMr" not in null:
        r.opt("plugin getDeviceMr", "set, but NCCL never calls it for a host-offload (netDeviceType HOST) plugin")


def check(args):
    r = Report()
    repo_root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = {"plugin": None, "nccl": {}, "mpi": {}, "cuda_home": None, "nccl_tests_src": None}

    smi = shutil.which("nvidia-smi")
    if not smi:
        r.miss("nvidia-smi", "not on PATH (no NVIDIA driver on this machine?)")
    else:
        try:
            p = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=30)
            gpus = [ln for ln in p.stdout.splitlines() if ln.startswith("GPU ")]
            if p.returncode == 0 and gpus:
                r.ok("nvidia-smi", "; ".join(gpus))
            else:
                r.miss("nvidia-smi", "lists no GPU (exit %d)" % p.returncode)
        except (OSError, subprocess.TimeoutExpired) as exc:
            r.miss("nvidia-smi", "did not run: %s" % exc)

    t = _run_json([args.python, "-c", _TORCH_PROBE], 120)
    env["torch"] = t
    if "torch" not in t:
        r.miss("torch", t.get("error", "not importable by %s" % args.python))
    else:
        r.ok("torch", "%s (CUDA %s) from %s" % (t["torch"], t.get("torch_cuda"), args.python))
        if t.get("error"):
            r.miss("torch CUDA", t["error"])
        elif not t.get("cuda_available") or not t.get("device_count"):
            r.miss("torch CUDA", "torch.cuda.is_available() is False or no device")
        else:
            r.ok("torch CUDA", "%d device(s); %s, compute capability %s" % (
                t["device_count"], t.get("gpu_name"), t.get("gpu_cc")))
            env["gpu_cc"] = t.get("gpu_cc")
            (r.ok if t.get("bf16") else r.opt)("bfloat16", "supported" if t.get("bf16") else "not supported: float32 only")
            env["bf16"] = bool(t.get("bf16"))
        if not t.get("nccl_available"):
            r.miss("torch NCCL backend", "torch.distributed.is_nccl_available() is False")
        if t.get("missing_apis"):
            r.miss("torch.distributed API", "no %s (torch 2.0 or newer needed)" % ", ".join(t["missing_apis"]))
        ver = launch.parse_version(t.get("nccl_version"))
        env["nccl"] = {"version": t.get("nccl_version"), "lib": t.get("nccl_lib"), "include": t.get("nccl_include")}
        if ver is None:
            r.miss("NCCL version", "unknown (%r)" % t.get("nccl_version"))
        elif ver < (2, 20, 0):
            r.miss("NCCL version", "%s: only 2.20+ looks up ncclNetPlugin_v8" % t.get("nccl_version"))
        else:
            r.ok("NCCL version", "%s (library %s)" % (t.get("nccl_version"), t.get("nccl_lib") or "linked into torch"))
        (r.ok if t.get("nccl_include") else r.opt)("nccl.h", t.get("nccl_include") or "not found (needed for nccl-tests)")

    if os.path.exists("/sys/class/net/lo"):
        r.ok("loopback", "lo present (NCCL_SOCKET_IFNAME=lo)")
    else:
        r.miss("loopback", "/sys/class/net/lo absent")

    plugin = os.path.abspath(args.plugin)
    env["plugin"] = {"path": plugin, "exists": os.path.exists(plugin)}
    if os.path.exists(plugin):
        pr = _run_json([sys.executable, "-c", _PLUGIN_PROBE, plugin], 60)
        env["plugin"]["probe"] = pr
        name = (pr.get("symbols") or {}).get("ncclNetPlugin_v8")
        if pr.get("error"):
            r.miss("plugin", "%s: %s" % (plugin, pr["error"]))
        elif name is None:
            r.miss("plugin", "%s exports no ncclNetPlugin_v8 with a name" % plugin)
        elif name.lower() != args.plugin_name.lower():
            r.miss("plugin", "%s calls itself %r, expected %r" % (plugin, name, args.plugin_name))
        else:
            judge_v8_vtable(r, plugin, name, pr.get("v8_null"))
    elif args.can_build:
        r.note("plugin", "%s absent; scripts/build.sh will build it" % plugin)
    else:
        r.miss("plugin", "%s absent and no scripts/build.sh + cargo to build it" % plugin)

    ib = "/sys/class/infiniband"
    devs = sorted(os.listdir(ib)) if os.path.isdir(ib) else []
    r.note("RDMA devices", ", ".join(devs) if devs else "none in %s" % ib)

    env["cuda_home"] = find_cuda_home()
    (r.ok if env["cuda_home"] else r.opt)("CUDA toolkit", env["cuda_home"] or "no nvcc (nccl-tests cannot be built)")
    env["mpi"] = find_mpi()
    if env["mpi"].get("home"):
        r.ok("MPI", "%s (%s), MPI_HOME %s" % (env["mpi"]["mpirun"], env["mpi"]["flavor"], env["mpi"]["home"]))
    else:
        r.opt("MPI", "no mpirun with mpi.h: the nccl-tests two-rank run will be skipped")
    env["nccl_tests_src"] = find_nccl_tests(args.nccl_tests_dir, repo_root)
    (r.ok if env["nccl_tests_src"] else r.opt)("nccl-tests source", env["nccl_tests_src"] or "not found (use --nccl-tests-dir)")
    env["missing"] = r.missing
    return r, env


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--plugin", required=True)
    ap.add_argument("--plugin-name", default="DQPLB")
    ap.add_argument("--python", default=sys.executable, help="interpreter whose torch is used")
    ap.add_argument("--nccl-tests-dir", default=None)
    ap.add_argument("--can-build", action="store_true", help="a missing plugin will be built")
    ap.add_argument("--json", default=None, help="write the findings here")
    args = ap.parse_args(argv)
    rep, env = check(args)
    print("\n".join(rep.lines))
    if rep.missing:
        print("check-env: MISSING %s -> exit %d" % (", ".join(rep.missing), EXIT_MISSING))
    else:
        print("check-env: all required items present")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(env, fh, indent=2)
    return EXIT_MISSING if rep.missing else EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
