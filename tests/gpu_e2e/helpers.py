"""Shared paths for the gpu-e2e offline tests: repository root, the script, the sample logs; the
stand-in plugin libraries built with `cc`."""

import os
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
SCRIPTS = os.path.join(REPO, "scripts")
SCRIPT = os.path.join(SCRIPTS, "gpu-e2e.sh")
LOGS = os.path.join(HERE, "logs")
PLUGIN_PATH = "/opt/dqplb/target/release/libnccl-net-dqplb.so"

if SCRIPTS not in sys.path:
    sys.path.insert(0, SCRIPTS)


def read_log(name):
    with open(os.path.join(LOGS, name), "r", encoding="utf-8") as fh:
        return fh.read()


# Stand-in plugin libraries, built with the system C compiler at test time.
CC = shutil.which("cc")
NO_CC = "NO C COMPILER (cc): the stand-in plugin libraries cannot be built, plugin-probe tests SKIPPED"
if CC is None:
    sys.stderr.write("\n%s\n%s\n%s\n" % ("!" * 78, NO_CC, "!" * 78))

# The 18 entry points of ncclNet_v8_t in NCCL's order (nccl plugins/net/example/nccl/net_v8.h).
V8_ENTRY_POINTS = ("init", "devices", "getProperties", "listen", "connect", "accept", "regMr", "regMrDmaBuf",
                   "deregMr", "isend", "irecv", "iflush", "test", "closeSend", "closeRecv", "closeListen",
                   "getDeviceMr", "irecvConsumed")
# What NCCL's own Socket transport sets (src/transport/net_socket.cc): all but these three.
SOCKET_LIKE = tuple(f for f in V8_ENTRY_POINTS if f not in ("regMrDmaBuf", "getDeviceMr", "irecvConsumed"))

_STUB_C = r"""
typedef int (*stub_fn)(void);
static int stub_ok(void) { return 0; }
struct stub_net_v8 {
  const char* name;
  %(decl)s
};
const struct stub_net_v8 ncclNetPlugin_v8 = { %(init)s };
"""


def build_stub_plugin(folder, name="DQPLB", set_fields=SOCKET_LIKE, symbol=True, file_name="libnccl-net-dqplb.so"):
    """Builds folder/file_name exporting ncclNetPlugin_v8 named `name` whose entry points in
    set_fields point at a function and all others are NULL (symbol=False: no such symbol)."""
    unknown = set(set_fields) - set(V8_ENTRY_POINTS)
    if unknown:
        raise ValueError("not ncclNet_v8_t entry points: %s" % sorted(unknown))
    if symbol:
        decl = " ".join("stub_fn %s;" % f for f in V8_ENTRY_POINTS)
        init = ", ".join([".name = \"%s\"" % name] + [".%s = stub_ok" % f for f in V8_ENTRY_POINTS if f in set_fields])
        text = _STUB_C % {"decl": decl, "init": init}
    else:
        text = "int unrelated = 1;\n"
    os.makedirs(folder, exist_ok=True)
    src = os.path.join(folder, file_name + ".c")
    with open(src, "w") as fh:
        fh.write(text)
    lib = os.path.join(folder, file_name)
    subprocess.run([CC, "-shared", "-fPIC", "-o", lib, src], check=True)
    return lib
