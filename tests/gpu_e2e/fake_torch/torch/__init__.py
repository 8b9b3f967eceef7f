"""Stand-in for the few torch calls the gpu-e2e workload makes, so the whole script can run offline.

Tensors are Python lists; float32 and bfloat16 conversions round like the real formats (so the
exactness of the workload's values is exercised); torch.distributed exchanges data through files.
Test-only: nothing here runs on the GPU machine.
"""

import struct

__version__ = "0.0+fake"


class _DType:
    def __init__(self, name):
        self.name = name

    def __repr__(self):
        return "torch." + self.name


float32 = _DType("float32")
bfloat16 = _DType("bfloat16")
int64 = _DType("int64")
bool_ = _DType("bool")


def _f32(x):
    return struct.unpack("<f", struct.pack("<f", float(x)))[0]


def _bf16(x):
    bits = struct.unpack("<I", struct.pack("<f", float(x)))[0]
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000  # round to nearest even, keep 8 bits
    return struct.unpack("<f", struct.pack("<I", bits))[0]


_CONVERT = {"float32": _f32, "bfloat16": _bf16, "int64": int, "bool": bool}


def convert(values, dtype):
    fn = _CONVERT[dtype.name]
    return [fn(v) for v in values]


class device:
    def __init__(self, kind, index=0):
        self.type, self.index = kind, index

    def __repr__(self):
        return "device(type=%r, index=%d)" % (self.type, self.index)


class Tensor:
    def __init__(self, data, dtype):
        self.data, self.dtype = list(data), dtype
        self.device = device("cuda", 0)

    def numel(self):
        return len(self.data)

    def _bin(self, other, fn, dtype=None):
        if isinstance(other, Tensor):
            vals = [fn(a, b) for a, b in zip(self.data, other.data)]
        else:
            vals = [fn(a, other) for a in self.data]
        return Tensor(vals, dtype or self.dtype)

    def __add__(self, o):
        return self._bin(o, lambda a, b: a + b)

    __radd__ = __add__

    def __mul__(self, o):
        return self._bin(o, lambda a, b: a * b)

    def __mod__(self, o):
        return self._bin(o, lambda a, b: a % b)

    def __floordiv__(self, o):
        return self._bin(o, lambda a, b: a // b)

    def __ne__(self, o):
        return self._bin(o, lambda a, b: a != b, bool_)

    def __eq__(self, o):
        return self._bin(o, lambda a, b: a == b, bool_)

    __hash__ = None

    def sum(self):
        return Tensor([sum(self.data)], int64)

    def item(self):
        return self.data[0]

    def to(self, dtype):
        return Tensor(convert(self.data, dtype), dtype)


def arange(n, dtype=int64, device=None):
    return Tensor(range(n), dtype)


def empty(n, dtype=float32, device=None):
    return Tensor([-12345.0] * n, dtype)


class _Nccl:
    @staticmethod
    def version():
        return (2, 21, 5)


class _Cuda:
    nccl = _Nccl()

    @staticmethod
    def is_available():
        return True

    @staticmethod
    def device_count():
        return 1

    @staticmethod
    def get_device_capability(i=0):
        return (9, 0)

    @staticmethod
    def get_device_name(i=0):
        return "Fake H200"

    @staticmethod
    def is_bf16_supported():
        return True

    @staticmethod
    def set_device(i):
        return None

    @staticmethod
    def synchronize():
        return None


cuda = _Cuda()


class _Version:
    cuda = "12.4"


version = _Version()

from torch import distributed  # noqa: E402,F401
