"""ncclNet_v8_t as NCCL declares it (nccl_net_v8.h; the plugin exports it as ncclNetPlugin_v8),
in ctypes, and thin calls through it that turn a non-zero ncclResult_t into NetError."""

import ctypes
from ctypes import CFUNCTYPE, POINTER, Structure, c_char_p, c_float, c_int, c_size_t
from ctypes import c_uint64, c_ulong, c_void_p

#: NCCL_NET_HANDLE_MAXSIZE: bytes listen() writes and connect() reads.
HANDLE_BYTES = 128
#: NCCL_PTR_HOST: regMr type of host memory, and its ptrSupport bit.
PTR_HOST = 1
_RESULTS = {
    0: "ncclSuccess",
    1: "ncclUnhandledCudaError",
    2: "ncclSystemError",
    3: "ncclInternalError",
    4: "ncclInvalidArgument",
    5: "ncclInvalidUsage",
    6: "ncclRemoteError",
    7: "ncclInProgress",
}

#: ncclDebugLogger_t is printf-style (level, flags, file, line, fmt, ...), which ctypes cannot
#: define. The plugin only calls it as (level, flags, file, line, "%s", msg): on x86_64 SysV a
#: variadic call passes those six integer/pointer arguments in the registers a six-argument
#: function reads, so this prototype receives them (the `dqplb perf` logger relies on the same).
Logger = CFUNCTYPE(None, c_int, c_ulong, c_char_p, c_int, c_char_p, c_char_p)

_P = c_void_p
_PP = POINTER(c_void_p)


class PropertiesV8(Structure):
    """ncclNetProperties_v8_t (64 bytes)."""

    _fields_ = [
        ("name", c_char_p),
        ("pciPath", c_char_p),
        ("guid", c_uint64),
        ("ptrSupport", c_int),
        ("regIsGlobal", c_int),
        ("speed", c_int),
        ("port", c_int),
        ("latency", c_float),
        ("maxComms", c_int),
        ("maxRecvs", c_int),
        ("netDeviceType", c_int),
        ("netDeviceVersion", c_int),
    ]


class NetV8(Structure):
    """ncclNet_v8_t: the name and 18 entry points, in header order."""

    _fields_ = [
        ("name", c_char_p),
        ("init", CFUNCTYPE(c_int, Logger)),
        ("devices", CFUNCTYPE(c_int, POINTER(c_int))),
        ("getProperties", CFUNCTYPE(c_int, c_int, POINTER(PropertiesV8))),
        ("listen", CFUNCTYPE(c_int, c_int, _P, _PP)),
        ("connect", CFUNCTYPE(c_int, c_int, _P, _PP, _PP)),
        ("accept", CFUNCTYPE(c_int, _P, _PP, _PP)),
        ("regMr", CFUNCTYPE(c_int, _P, _P, c_size_t, c_int, _PP)),
        ("regMrDmaBuf", _P),
        ("deregMr", CFUNCTYPE(c_int, _P, _P)),
        ("isend", CFUNCTYPE(c_int, _P, _P, c_int, c_int, _P, _PP)),
        ("irecv", CFUNCTYPE(c_int, _P, c_int, _PP, POINTER(c_int), POINTER(c_int), _PP, _PP)),
        ("iflush", _P),
        ("test", CFUNCTYPE(c_int, _P, POINTER(c_int), POINTER(c_int))),
        ("closeSend", CFUNCTYPE(c_int, _P)),
        ("closeRecv", CFUNCTYPE(c_int, _P)),
        ("closeListen", CFUNCTYPE(c_int, _P)),
        ("getDeviceMr", _P),
        ("irecvConsumed", _P),
    ]


assert ctypes.sizeof(PropertiesV8) == 64
assert ctypes.sizeof(NetV8) == 19 * ctypes.sizeof(c_void_p)


class NetError(Exception):
    """A plugin call failed (its ncclResult_t), or the plugin did not behave as NCCL expects."""


class Net:
    """The library's ncclNetPlugin_v8, called as NCCL's proxy thread calls it."""

    def __init__(self, library):
        try:
            self.lib = ctypes.CDLL(library)
        except OSError as e:
            raise NetError("dlopen {}: {}".format(library, e)) from None
        try:
            self.vt = NetV8.in_dll(self.lib, "ncclNetPlugin_v8")
        except ValueError:
            raise NetError("{} does not export ncclNetPlugin_v8".format(library)) from None

    def _fn(self, name):
        f = getattr(self.vt, name)
        if not f:
            raise NetError("ncclNetPlugin_v8.{} is NULL".format(name))
        return f

    def call(self, name, *args):
        rc = self._fn(name)(*args)
        if rc != 0:
            raise NetError("{} returned {} ({})".format(name, _RESULTS.get(rc, "?"), rc))

    def name(self):
        return (self.vt.name or b"").decode("utf-8", "replace")

    def init(self, logger):
        self.call("init", logger)

    def devices(self):
        n = c_int(-1)
        self.call("devices", ctypes.byref(n))
        return n.value

    def properties(self, dev):
        p = PropertiesV8()
        self.call("getProperties", dev, ctypes.byref(p))
        return p

    def listen(self, dev):
        handle = ctypes.create_string_buffer(HANDLE_BYTES)
        comm = c_void_p()
        self.call("listen", dev, handle, ctypes.byref(comm))
        if not comm.value:
            raise NetError("listen returned ncclSuccess and a NULL listenComm")
        return handle.raw, comm

    def connect(self, dev, handle):
        """One connect() call: the sendComm, or None (not connected yet: call again)."""
        h = ctypes.create_string_buffer(handle, HANDLE_BYTES)
        comm, dev_handle = c_void_p(), c_void_p()
        self.call("connect", dev, h, ctypes.byref(comm), ctypes.byref(dev_handle))
        return comm if comm.value else None

    def accept(self, listen_comm):
        """One accept() call: the recvComm, or None (no peer yet: call again)."""
        comm, dev_handle = c_void_p(), c_void_p()
        self.call("accept", listen_comm, ctypes.byref(comm), ctypes.byref(dev_handle))
        return comm if comm.value else None

    def reg_mr(self, comm, buf):
        mh = c_void_p()
        self.call("regMr", comm, ctypes.addressof(buf), ctypes.sizeof(buf), PTR_HOST, ctypes.byref(mh))
        return mh

    def dereg_mr(self, comm, mh):
        self.call("deregMr", comm, mh)

    def isend(self, comm, buf, size, mh):
        """The request, or None (not posted now: post again)."""
        req = c_void_p()
        self.call("isend", comm, ctypes.addressof(buf), size, 0, mh, ctypes.byref(req))
        return req if req.value else None

    def irecv(self, comm, buf, size, mh):
        """One receive of up to `size` bytes: the request, or None (post again)."""
        data = (c_void_p * 1)(ctypes.addressof(buf))
        sizes = (c_int * 1)(size)
        tags = (c_int * 1)(0)
        mhs = (c_void_p * 1)(mh.value)
        req = c_void_p()
        self.call("irecv", comm, 1, data, sizes, tags, mhs, ctypes.byref(req))
        return req if req.value else None

    def test(self, req):
        """The bytes moved once the request is done, else None."""
        done, size = c_int(0), c_int(-1)
        self.call("test", req, ctypes.byref(done), ctypes.byref(size))
        return size.value if done.value else None

    def close(self, which, comm):
        self.call(which, comm)
