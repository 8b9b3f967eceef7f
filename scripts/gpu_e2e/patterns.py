"""Input and expected-output values for the workload's exact result checks.

Every element of every input depends on the sending rank, the iteration and the element index:

    value(i, rank, it) = (A*i + i // m + B*rank + C*it) % m + 1        (1 .. m)

with m = modulus(world), the largest prime with world * m <= 256, so every sum over the ranks is an
integer <= 256 and exact in float32 and bfloat16. A, B, C are coprime to m, so

- two iterations t != t' (|t - t'| < m) differ at EVERY element, for every op: an output left over
  from an earlier iteration (a stale buffer) mismatches everywhere;
- the ranks' inputs differ at every element: swapped or misplaced chunks mismatch;
- neighbouring elements differ, and the i // m term breaks the period m: a shifted buffer mismatches.

The functions take Python ints or torch tensors for i / j (and rank), using only + * // %, so the
workload builds them on the GPU and the tests evaluate the same formulas in plain Python.
"""

A, B, C = 5, 7, 3


def _is_prime(n: int) -> bool:
    return n >= 2 and all(n % d for d in range(2, int(n ** 0.5) + 1))


def modulus(world: int) -> int:
    """The largest prime m with world * m <= 256 (127 for two ranks)."""
    if world < 1:
        raise ValueError("world must be >= 1, got %d" % world)
    m = 256 // world
    while m >= 2 and not _is_prime(m):
        m -= 1
    if m <= max(A, B, C):
        raise ValueError("world %d too large for exact bfloat16 sums" % world)
    return m


def value(i, rank, it, m):
    """What `rank` sends at element i in iteration `it` (ints or tensors for i and rank)."""
    return (i * A + i // m + rank * B + it * C) % m + 1


def send_value(op, rank, world, chunk, it, i):
    """Element i of `rank`'s input buffer for op in iteration `it` (the same formula for every op;
    chunk is unused, kept so send and expected take the same arguments)."""
    if op not in ("all_reduce", "all_gather", "reduce_scatter", "sendrecv"):
        raise ValueError("unknown op %r" % op)
    return value(i, rank, it, modulus(world))


def expected_value(op, rank, world, chunk, it, j):
    """Element j of `rank`'s output buffer after one call of op in iteration `it`. chunk = elements
    per rank: the all_gather input length, the reduce_scatter output length."""
    m = modulus(world)
    if op == "all_reduce":
        total = value(j, 0, it, m)
        for s in range(1, world):
            total = total + value(j, s, it, m)
        return total
    if op == "all_gather":
        return value(j % chunk, j // chunk, it, m)
    if op == "reduce_scatter":
        k = j + rank * chunk
        total = value(k, 0, it, m)
        for s in range(1, world):
            total = total + value(k, s, it, m)
        return total
    if op == "sendrecv":
        return value(j, peers(rank, world)[1], it, m)
    raise ValueError("unknown op %r" % op)


def peers(rank: int, nranks: int):
    """(send-to, receive-from) for sendrecv, the ring of nccl-tests' sendrecv_perf."""
    return (rank + 1) % nranks, (rank - 1) % nranks
