"""Stand-in torch.distributed for the offline end-to-end test: ranks exchange buffers through JSON
files in $FAKE_TORCH_DIR and print NCCL_DEBUG-style lines naming the network NCCL would use.

Like NCCL 2.21, init_process_group dlopens $NCCL_NET_PLUGIN (the value, then libnccl-net-<value>.so)
and takes the network's name from the library's ncclNetPlugin_v8; $NCCL_NET must name an available
network (the plugin's or "Socket"), otherwise it warns "Error: network <name> not found." and fails.

$FAKE_TORCH_NET overrides that network (to fake a fallback); $FAKE_TORCH_GDR=1 prints the channels
with /GDRDMA (what NCCL prints for GPUDirect RDMA); $FAKE_TORCH_CORRUPT="op:bytes" makes rank 1
receive one wrong element for that op and size; $FAKE_TORCH_STALE="op,op" (or "all") makes every
call of those ops after the first of a case hand back the previous call's result (a stale buffer).
"""

import ctypes
import json
import os
import time

import torch

_state = {"rank": None, "world": None, "seq": 0, "dir": None, "prev": {}}
_ELSIZE = {"float32": 4, "bfloat16": 2}


def is_available():
    return True


def is_nccl_available():
    return True


def _info(msg):
    pid = os.getpid()
    print("fakehost:%d:%d [0] NCCL INFO %s" % (pid, pid, msg), flush=True)


def init_process_group(backend, init_method=None, rank=0, world_size=1, timeout=None):
    # One exchange folder per rendezvous port: the plugin and Socket runs do not mix.
    folder = os.path.join(os.environ["FAKE_TORCH_DIR"], (init_method or "local").rsplit(":", 1)[-1])
    os.makedirs(folder, exist_ok=True)
    _state.update(rank=rank, world=world_size, seq=0, dir=folder)
    _info("NCCL version 2.21.5+cuda12.4")
    nets = ["Socket"]
    plugin = os.environ.get("NCCL_NET_PLUGIN")
    if plugin:
        name = _load_plugin(plugin)
        if name is not None:
            nets.insert(0, name)
    want = os.environ.get("NCCL_NET")
    net = os.environ.get("FAKE_TORCH_NET")
    if net is None:
        if want:
            found = [n for n in nets if n.lower() == want.lower()]
            if not found:
                print("fakehost:%d:%d [0] net.cc:0 NCCL WARN Error: network %s not found." % (
                    os.getpid(), os.getpid(), want), flush=True)
                raise RuntimeError("DistBackendError: NCCL error: invalid usage (fake: network %s not found)" % want)
            net = found[0]
        else:
            net = nets[0]
    _info("Using network %s" % net)
    peer = (rank + 1) % world_size
    gdr = "/GDRDMA" if os.environ.get("FAKE_TORCH_GDR") == "1" else ""
    _info("Channel 00/0 : %d[0] -> %d[0] [receive] via NET/%s/0%s" % (peer, rank, net, gdr))
    _info("Channel 00/0 : %d[0] -> %d[0] [send] via NET/%s/0%s" % (rank, peer, net, gdr))


def _load_plugin(value):
    """The name in ncclNetPlugin_v8 of the library NCCL 2.21 would load for NCCL_NET_PLUGIN=value,
    or None (printing NCCL's lines for a missing library or symbol)."""
    lib = None
    for cand in (value, "libnccl-net-%s.so" % value):
        try:
            lib = ctypes.CDLL(cand, mode=os.RTLD_NOW | os.RTLD_LOCAL)
            break
        except OSError:
            continue
    if lib is None:
        _info("NET/Plugin: Could not find: %s libnccl-net-%s.so. Using internal network plugin." % (value, value))
        return None
    _info("NET/Plugin: Plugin name set by env to %s" % value)
    try:
        name = ctypes.c_char_p.in_dll(lib, "ncclNetPlugin_v8").value
    except ValueError:
        _info("NET/Plugin: Failed to find ncclNetPlugin symbol (>= v5). ncclNetPlugin symbols v4 and lower are not "
              "supported.")
        return None
    return name.decode("utf-8", "replace") if name else None


def _path(tag, src):
    return os.path.join(_state["dir"], "%07d.%s.%d.json" % (_state["seq"], tag, src))


def _put(tag, values):
    tmp = _path(tag, _state["rank"]) + ".tmp"
    with open(tmp, "w") as fh:
        json.dump(values, fh)
    os.replace(tmp, _path(tag, _state["rank"]))


def _get(tag, src):
    path, deadline = _path(tag, src), time.monotonic() + 60
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            raise RuntimeError("fake dist: rank %d waited 60 s for %s" % (_state["rank"], path))
        time.sleep(0.0005)
    with open(path) as fh:
        return json.load(fh)


def _exchange(values):
    _put("coll", values)
    got = [_get("coll", r) for r in range(_state["world"])]
    _state["seq"] += 1
    return got


def _maybe_corrupt(op, out):
    spec = os.environ.get("FAKE_TORCH_CORRUPT", "")
    if spec and _state["rank"] == 1:
        name, _, nbytes = spec.partition(":")
        total = len(out.data) * _ELSIZE[out.dtype.name] * (2 if op == "reduce_scatter" else 1)
        if name == op and int(nbytes) == total:
            out.data[0] += 1


def _stale(op, dtype, values):
    """values, or under $FAKE_TORCH_STALE the result of the previous call of op at this size."""
    spec = os.environ.get("FAKE_TORCH_STALE", "")
    if not spec or (spec != "all" and op not in spec.split(",")):
        return values
    key = (op, dtype.name, len(values))
    prev = _state["prev"].get(key)
    _state["prev"][key] = list(values)
    return list(values) if prev is None else prev


def _sum(cols, dtype):
    return torch.convert([sum(c) for c in zip(*cols)], dtype)


def all_reduce(t):
    t.data = _stale("all_reduce", t.dtype, _sum(_exchange(t.data), t.dtype))
    _maybe_corrupt("all_reduce", t)


def all_gather_into_tensor(out, inp):
    got = _exchange(inp.data)
    out.data = _stale("all_gather", out.dtype, [v for part in got for v in part])
    _maybe_corrupt("all_gather", out)


def reduce_scatter_tensor(out, inp):
    s = _sum(_exchange(inp.data), inp.dtype)
    n = len(out.data)
    out.data = _stale("reduce_scatter", out.dtype, s[_state["rank"] * n:(_state["rank"] + 1) * n])
    _maybe_corrupt("reduce_scatter", out)


def isend(t, dst):
    raise NotImplementedError("only through batch_isend_irecv")


def irecv(t, src):
    raise NotImplementedError("only through batch_isend_irecv")


class P2POp:
    def __init__(self, op, tensor, peer):
        self.op, self.tensor, self.peer = op, tensor, peer


class _Done:
    def wait(self):
        return True


def batch_isend_irecv(ops):
    me = _state["rank"]
    for o in ops:
        if o.op is isend:
            _put("p2p-to%d" % o.peer, o.tensor.data)
    for o in ops:
        if o.op is irecv:
            o.tensor.data = _stale("sendrecv", o.tensor.dtype, list(_get("p2p-to%d" % me, o.peer)))
            _maybe_corrupt("sendrecv", o.tensor)
    _state["seq"] += 1
    return [_Done() for _ in ops]


def barrier(device_ids=None):
    _exchange([])


def destroy_process_group():
    _state["rank"] = None
