"""Starts the two workload ranks on one GPU with the NCCL environment of one mode and waits for them.

mode "plugin": NCCL_NET_PLUGIN = our library, NCCL_NET = its name (NCCL fails instead of falling
back); mode "socket": NCCL's built-in Socket transport, no plugin. Each rank has its own NCCL_HOSTID.
"""

import argparse
import json
import os
import socket
import subprocess
import sys
import time

if __package__ in (None, ""):
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from gpu_e2e import metrics  # noqa: E402

WORLD = 2
# Variables this script decides; inherited values are dropped so a stray shell setting cannot
# change which transport is measured.
_OWNED = ("NCCL_NET", "NCCL_NET_PLUGIN", "NCCL_HOSTID", "NCCL_DEBUG", "NCCL_DEBUG_SUBSYS", "NCCL_DEBUG_FILE",
          "NCCL_SOCKET_IFNAME", "NCCL_P2P_DISABLE", "NCCL_SHM_DISABLE", "NCCL_COLLNET_ENABLE", "NCCL_NVLS_ENABLE")


def parse_version(text):
    """'2.21.5' or '2.21.5+cuda12.4' or '22105' (old torch int form) -> (2, 21, 5); None if unknown."""
    if not text:
        return None
    text = str(text).split("+")[0].strip()
    parts = text.split(".")
    try:
        if len(parts) >= 3:
            return tuple(int(p) for p in parts[:3])
        code = int(text)
    except ValueError:
        return None
    # NCCL_VERSION_CODE: major*10000 + minor*100 + patch since 2.9; major*1000 + minor*100 + patch before.
    if code >= 20900:
        return code // 10000, (code // 100) % 100, code % 100
    return code // 1000, (code // 100) % 10, code % 100


def plugin_lib_suffix(path):
    """'libnccl-net-dqplb.so' -> 'dqplb' (what NCCL_NET_PLUGIN=<suffix> makes NCCL dlopen)."""
    base = os.path.basename(path)
    if base.startswith("libnccl-net-") and base.endswith(".so") and len(base) > len("libnccl-net-.so"):
        return base[len("libnccl-net-"):-len(".so")]
    return None


def rank_env(base, mode, rank, plugin_path=None, plugin_name="DQPLB", nccl_version=None, link_dir=None):
    """Environment of one rank. For NCCL < 2.21 (which only dlopens libnccl-net-<NCCL_NET_PLUGIN>.so)
    the plugin is reached through link_dir, a folder holding libnccl-net-<suffix>.so, on
    LD_LIBRARY_PATH; 2.21+ takes the full path. Raises ValueError when the combination cannot work."""
    env = {k: v for k, v in base.items() if k not in _OWNED}
    env.update({
        "NCCL_HOSTID": "dqplb-e2e-host%d" % rank,
        "NCCL_DEBUG": "INFO",
        "NCCL_DEBUG_SUBSYS": "INIT,NET,ENV",
        "NCCL_SOCKET_IFNAME": "lo",
        "NCCL_P2P_DISABLE": "1",
        "NCCL_SHM_DISABLE": "1",
        "NCCL_COLLNET_ENABLE": "0",
        "NCCL_NVLS_ENABLE": "0",
    })
    if mode == "socket":
        env["NCCL_NET"] = "Socket"
        return env
    if mode != "plugin":
        raise ValueError("unknown mode %r (plugin or socket)" % mode)
    if not plugin_path or not os.path.isabs(plugin_path):
        raise ValueError("plugin mode needs an absolute plugin path, got %r" % plugin_path)
    env["NCCL_NET"] = plugin_name
    if nccl_version is not None and nccl_version < (2, 20, 0):
        raise ValueError("NCCL %s does not look up ncclNetPlugin_v8 (2.20 or newer needed)"
                         % ".".join(map(str, nccl_version)))
    if nccl_version is None or nccl_version >= (2, 21, 0):
        env["NCCL_NET_PLUGIN"] = plugin_path
        return env
    suffix = plugin_lib_suffix(plugin_path)
    libdir = os.path.dirname(plugin_path)
    if suffix is None:
        if not link_dir:
            raise ValueError("NCCL < 2.21 needs the plugin named libnccl-net-<name>.so or a link_dir")
        suffix, libdir = "dqplb", link_dir
    env["NCCL_NET_PLUGIN"] = suffix
    old = env.get("LD_LIBRARY_PATH", "")
    env["LD_LIBRARY_PATH"] = libdir + (":" + old if old else "")
    return env


def ensure_plugin_link(out_dir, plugin):
    """For NCCL < 2.21 a plugin file not named libnccl-net-<x>.so is reached through
    <out_dir>/plugin-link/libnccl-net-dqplb.so; returns that folder, or None when not needed."""
    if not plugin or plugin_lib_suffix(plugin) is not None:
        return None
    link_dir = os.path.join(out_dir, "plugin-link")
    os.makedirs(link_dir, exist_ok=True)
    link = os.path.join(link_dir, "libnccl-net-dqplb.so")
    if os.path.lexists(link):
        os.remove(link)
    os.symlink(plugin, link)
    return link_dir


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def workload_cmd(python, rank, port, results, args):
    cmd = [python, "-m", "gpu_e2e.workload", "--rank", str(rank), "--world", str(WORLD), "--port", str(port),
           "--device", str(args.device), "--results", results, "--max-bytes", str(args.max_bytes),
           "--ops", args.ops, "--dtypes", args.dtypes]
    if args.quick:
        cmd.append("--quick")
    return cmd


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--mode", choices=("plugin", "socket"), required=True)
    ap.add_argument("--out", required=True, help="folder for this run's logs and results")
    ap.add_argument("--plugin", help="absolute path of the plugin library (plugin mode)")
    ap.add_argument("--plugin-name", default="DQPLB")
    ap.add_argument("--nccl-version", default=None, help="NCCL version torch uses, e.g. 2.21.5")
    ap.add_argument("--max-bytes", type=metrics.parse_bytes, default=metrics.MAX_BYTES_DEFAULT)
    ap.add_argument("--ops", default=",".join(metrics.OPS))
    ap.add_argument("--dtypes", default=",".join(metrics.DTYPES))
    ap.add_argument("--device", type=int, default=0)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--timeout-s", type=float, default=180.0)
    args = ap.parse_args(argv)

    os.makedirs(args.out, exist_ok=True)
    scripts_dir = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    base = dict(os.environ)
    base["PYTHONPATH"] = scripts_dir + (":" + base["PYTHONPATH"] if base.get("PYTHONPATH") else "")
    plugin = os.path.abspath(args.plugin) if args.plugin else None
    version = parse_version(args.nccl_version)
    link_dir = ensure_plugin_link(args.out, plugin) if args.mode == "plugin" else None
    port = free_port()
    procs, logs = [], []
    started = time.monotonic()
    try:
        for rank in range(WORLD):
            env = rank_env(base, args.mode, rank, plugin, args.plugin_name, version, link_dir)
            log = open(os.path.join(args.out, "rank%d.log" % rank), "w", encoding="utf-8")
            logs.append(log)
            results = os.path.join(args.out, "rank%d.jsonl" % rank)
            procs.append(subprocess.Popen(workload_cmd(sys.executable, rank, port, results, args), env=env,
                                          stdout=log, stderr=subprocess.STDOUT))
    except ValueError as exc:
        print("launch: %s" % exc, file=sys.stderr)
        for p in procs:
            p.kill()
        return 3
    rcs, timed_out = [], False
    for p in procs:
        left = args.timeout_s - (time.monotonic() - started)
        try:
            rcs.append(p.wait(timeout=max(left, 0.1)))
        except subprocess.TimeoutExpired:
            timed_out = True
            rcs.append(None)
    if timed_out:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    for log in logs:
        log.close()
    elapsed = time.monotonic() - started
    run = {"mode": args.mode, "world": WORLD, "plugin": plugin, "plugin_name": args.plugin_name,
           "nccl_version": args.nccl_version, "max_bytes": args.max_bytes, "ops": args.ops.split(","),
           "dtypes": args.dtypes.split(","), "quick": args.quick, "port": port, "rank_exit_codes": rcs,
           "timed_out": timed_out, "timeout_s": args.timeout_s, "elapsed_s": round(elapsed, 3)}
    with open(os.path.join(args.out, "run.json"), "w", encoding="utf-8") as fh:
        json.dump(run, fh, indent=2)
    status = "TIMEOUT" if timed_out else ("OK" if all(rc == 0 for rc in rcs) else "FAILED")
    print("launch %s: %s in %.1f s (rank exit codes %s)" % (args.mode, status, elapsed, rcs))
    return 0 if status == "OK" else 1


if __name__ == "__main__":
    sys.exit(main())
