"""Input and expected-output value patterns for the workload's exact result checks.

Every value is a small integer (<= 256 before a power-of-n scale), so float32 and bfloat16 sums are
exact; the workload builds the same formula with torch, the tests check it by simulating each op.
"""

from dataclasses import dataclass


@dataclass(frozen=True)
class Pattern:
    """value(i) = scale * (a * ((i + offset) % m) + cc * ((i + offset) // chunk) + b)."""

    m: int
    a: int
    b: int
    offset: int = 0
    chunk: int = 1
    cc: int = 0
    scale: int = 1

    def value(self, i: int) -> int:
        j = i + self.offset
        return self.scale * (self.a * (j % self.m) + self.cc * (j // self.chunk) + self.b)

    def unscaled_max(self, count: int) -> int:
        """Largest value before scaling over elements 0..count-1 (all terms are non-negative)."""
        last = count - 1 + self.offset
        return self.a * (self.m - 1) + self.cc * (last // self.chunk) + self.b


def send_pattern(op: str, rank: int, nranks: int, chunk: int) -> Pattern:
    """What `rank` puts in its input buffer. chunk = elements per rank (all_gather input length,
    reduce_scatter output length); unused for all_reduce and sendrecv."""
    if op == "all_reduce":
        return Pattern(m=7, a=1, b=rank + 1)
    if op == "all_gather":
        return Pattern(m=11, a=1, b=1, offset=rank * chunk, chunk=chunk, cc=16)
    if op == "reduce_scatter":
        return Pattern(m=5, a=1, b=2 * rank + 1, chunk=chunk, cc=8)
    if op == "sendrecv":
        return Pattern(m=13, a=1, b=32 * rank + 1)
    raise ValueError("unknown op %r" % op)


def expected_pattern(op: str, rank: int, nranks: int, chunk: int, calls: int = 1) -> Pattern:
    """What `rank` must hold in its output buffer after `calls` identical calls of op. Only the
    in-place all_reduce changes with calls: each call multiplies the (rank-equal) buffer by nranks."""
    if calls < 1:
        raise ValueError("calls must be >= 1, got %d" % calls)
    n = nranks
    if op == "all_reduce":
        return Pattern(m=7, a=n, b=n * (n + 1) // 2, scale=n ** (calls - 1))
    if op == "all_gather":
        return Pattern(m=11, a=1, b=1, chunk=chunk, cc=16)
    if op == "reduce_scatter":
        return Pattern(m=5, a=n, b=n * n, offset=rank * chunk, chunk=chunk, cc=8 * n)
    if op == "sendrecv":
        return Pattern(m=13, a=1, b=32 * ((rank - 1) % n) + 1)
    raise ValueError("unknown op %r" % op)


def peers(rank: int, nranks: int):
    """(send-to, receive-from) for sendrecv, the ring of nccl-tests' sendrecv_perf."""
    return (rank + 1) % nranks, (rank - 1) % nranks
