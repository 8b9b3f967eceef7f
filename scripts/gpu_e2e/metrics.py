"""Sizes, iteration counts and bandwidth arithmetic in the nccl-tests convention.

algbw = bytes / 1e9 / seconds (GB/s); busbw = algbw * factor(op, nranks), as in nccl-tests src/*.cu.
"""

import math
import re
from typing import List, Optional, Tuple

OPS = ("all_reduce", "all_gather", "reduce_scatter", "sendrecv")
DTYPES = {"float32": 4, "bfloat16": 2}
MIN_BYTES = 8
MAX_BYTES_DEFAULT = 256 << 20
QUICK_MAX_BYTES = 1 << 20

_SIZE = re.compile(r"^\s*(\d+)\s*([KMG]?)(?:i?B)?\s*$", re.IGNORECASE)


def parse_bytes(text: str) -> int:
    """'8', '64K', '256M', '1G' (binary units, as nccl-tests -b/-e) -> bytes. ValueError on junk."""
    m = _SIZE.match(text or "")
    if not m:
        raise ValueError("not a byte size: %r (use e.g. 8, 64K, 256M, 1G)" % text)
    shift = {"": 0, "K": 10, "M": 20, "G": 30}[m.group(2).upper()]
    return int(m.group(1)) << shift


def sizes(min_bytes: int, max_bytes: int) -> List[int]:
    """min, 2*min, 4*min ... <= max (the -f 2 sweep of nccl-tests)."""
    if min_bytes < MIN_BYTES:
        raise ValueError("min bytes %d below %d" % (min_bytes, MIN_BYTES))
    if max_bytes < min_bytes:
        raise ValueError("max bytes %d below min bytes %d" % (max_bytes, min_bytes))
    out, s = [], min_bytes
    while s <= max_bytes:
        out.append(s)
        s *= 2
    return out


def bus_factor(op: str, nranks: int) -> float:
    if nranks < 1:
        raise ValueError("nranks must be >= 1, got %d" % nranks)
    if op == "all_reduce":
        return 2.0 * (nranks - 1) / nranks
    if op in ("all_gather", "reduce_scatter"):
        return float(nranks - 1) / nranks
    if op == "sendrecv":
        return 1.0
    raise ValueError("unknown op %r" % op)


def bandwidths(op: str, nbytes: int, seconds: float, nranks: int) -> Tuple[float, float]:
    """(algbw, busbw) in GB/s. nbytes is the nccl-tests "size": the whole buffer for all_reduce,
    the gathered output for all_gather, the input for reduce_scatter, the message for sendrecv."""
    if seconds <= 0:
        raise ValueError("time must be > 0, got %r" % seconds)
    alg = nbytes / 1e9 / seconds
    return alg, alg * bus_factor(op, nranks)


def element_counts(op: str, nbytes: int, elsize: int, nranks: int) -> Optional[Tuple[int, int]]:
    """(input elements, output elements) per rank for one op at one size, None when the size does
    not split into whole elements per rank."""
    if nbytes % elsize:
        return None
    total = nbytes // elsize
    if op in ("all_reduce", "sendrecv"):
        return total, total
    if total % nranks:
        return None
    if op == "all_gather":
        return total // nranks, total
    if op == "reduce_scatter":
        return total, total // nranks
    raise ValueError("unknown op %r" % op)


def iterations(nbytes: int, quick: bool = False) -> int:
    """Timed iterations for one size: enough to move ~64 MiB (8 MiB quick), between 3 and 20
    (2 and 5 quick), so the whole sweep stays within the script's time budget."""
    target, lo, hi = (8 << 20, 2, 5) if quick else (64 << 20, 3, 20)
    return max(lo, min(hi, math.ceil(target / nbytes)))


def human_bytes(n: int) -> str:
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return "%d %s" % (n >> shift, unit)
    return "%d B" % n
