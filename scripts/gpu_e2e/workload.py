"""One rank of the end-to-end workload: torch.distributed (NCCL backend) collectives and send/recv.

Each case runs one untimed warm-up call and `iters` timed calls, each on its own input and output
buffers, with inputs that differ per rank, iteration and element (patterns.py); after the timed loop
every iteration's output is checked element by element against its own expected values, so a stale
result (an output equal to an earlier iteration's) fails. One JSON line per case goes to --results;
launch.py starts two of these with their own NCCL environment.
"""

import argparse
import json
import os
import sys
import time
import traceback
from datetime import timedelta

if __package__ in (None, ""):
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from gpu_e2e import metrics, patterns  # noqa: E402


def _fill(torch, fn, count, dtype, device):
    """fn(index tensor) evaluated on the device, converted to dtype (exact: values are <= 256)."""
    return fn(torch.arange(count, dtype=torch.int64, device=device)).to(dtype)


class Case:
    """Buffers and calls of one op at one size."""

    def __init__(self, torch, dist, op, nbytes, dtype, elsize, rank, world, device):
        counts = metrics.element_counts(op, nbytes, elsize, world)
        if counts is None:
            raise ValueError("%s: %d bytes do not split into %d-byte elements per rank" % (op, nbytes, elsize))
        self.torch, self.dist, self.op = torch, dist, op
        self.rank, self.world, self.dtype, self.device = rank, world, dtype, device
        self.n_in, self.n_out = counts
        self.chunk = self.n_in if op == "all_gather" else self.n_out

    def buffers(self, it):
        """(input, output) of iteration `it`: the input filled for that iteration, the output empty
        (for the in-place all_reduce both are the same tensor)."""
        inp = _fill(self.torch, lambda i: patterns.send_value(self.op, self.rank, self.world, self.chunk, it, i),
                    self.n_in, self.dtype, self.device)
        if self.op == "all_reduce":
            return inp, inp  # in place, as torch.distributed.all_reduce works
        return inp, self.torch.empty(self.n_out, dtype=self.dtype, device=self.device)

    def call(self, inp, out):
        d, op = self.dist, self.op
        if op == "all_reduce":
            d.all_reduce(out)
        elif op == "all_gather":
            d.all_gather_into_tensor(out, inp)
        elif op == "reduce_scatter":
            d.reduce_scatter_tensor(out, inp)
        else:
            to, frm = patterns.peers(self.rank, self.world)
            reqs = d.batch_isend_irecv([d.P2POp(d.isend, inp, to), d.P2POp(d.irecv, out, frm)])
            for r in reqs:
                r.wait()

    def mismatches(self, out, it):
        """Elements of iteration `it`'s output that differ from what that iteration must give."""
        want = _fill(self.torch, lambda j: patterns.expected_value(self.op, self.rank, self.world, self.chunk, it, j),
                     self.n_out, self.dtype, self.device)
        return int((out != want).sum().item())


def run_case(torch, dist, args, op, dtype_name, nbytes, device):
    dtype = getattr(torch, dtype_name)
    case = Case(torch, dist, op, nbytes, dtype, metrics.DTYPES[dtype_name], args.rank, args.world, device)
    iters = metrics.iterations(nbytes, args.quick)
    bufs = [case.buffers(it) for it in range(iters + 1)]  # 0: warm-up, 1 .. iters: timed
    case.call(*bufs[0])
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for it in range(1, iters + 1):
        case.call(*bufs[it])
    torch.cuda.synchronize()
    dt = (time.perf_counter() - t0) / iters
    bad = [case.mismatches(out, it) for it, (_, out) in enumerate(bufs)]
    return {
        "op": op,
        "dtype": dtype_name,
        "bytes": nbytes,
        "iters": iters,
        "time_s": dt,
        "mismatches": bad,
        "mismatches_first": bad[0],
        "mismatches_last": bad[-1],
        "bad_iterations": [it for it, n in enumerate(bad) if n],
        "ok": not any(bad),
    }


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--rank", type=int, required=True)
    ap.add_argument("--world", type=int, default=2)
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--device", type=int, default=0)
    ap.add_argument("--results", required=True, help="JSON-lines output file")
    ap.add_argument("--min-bytes", type=metrics.parse_bytes, default=metrics.MIN_BYTES)
    ap.add_argument("--max-bytes", type=metrics.parse_bytes, default=metrics.MAX_BYTES_DEFAULT)
    ap.add_argument("--ops", default=",".join(metrics.OPS))
    ap.add_argument("--dtypes", default=",".join(metrics.DTYPES))
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--init-timeout-s", type=int, default=120)
    return ap.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    out = open(args.results, "w", encoding="utf-8")

    def emit(rec):
        out.write(json.dumps(rec) + "\n")
        out.flush()

    try:
        import torch
        import torch.distributed as dist

        nccl_ver = torch.cuda.nccl.version()
        emit({"kind": "header", "rank": args.rank, "world": args.world, "torch": torch.__version__,
              "nccl": ".".join(str(x) for x in nccl_ver) if isinstance(nccl_ver, tuple) else str(nccl_ver),
              "hostid": os.environ.get("NCCL_HOSTID"), "net": os.environ.get("NCCL_NET")})
        torch.cuda.set_device(args.device)
        device = torch.device("cuda", args.device)
        dist.init_process_group("nccl", init_method="tcp://127.0.0.1:%d" % args.port, rank=args.rank,
                                world_size=args.world, timeout=timedelta(seconds=args.init_timeout_s))
        ops = [o for o in args.ops.split(",") if o]
        dtypes = [d for d in args.dtypes.split(",") if d]
        for dtype_name in dtypes:
            for op in ops:
                for nbytes in metrics.sizes(args.min_bytes, args.max_bytes):
                    rec = run_case(torch, dist, args, op, dtype_name, nbytes, device)
                    rec["kind"] = "case"
                    emit(rec)
                    if not rec["ok"]:
                        print("rank %d: WRONG RESULT %s %s %d B: mismatches per iteration %s" % (
                            args.rank, op, dtype_name, nbytes, rec["mismatches"]), file=sys.stderr, flush=True)
        dist.barrier(device_ids=[args.device])
        dist.destroy_process_group()
        emit({"kind": "done", "rank": args.rank})
        return 0
    except Exception as exc:  # any failure is recorded and makes the rank exit non-zero
        emit({"kind": "error", "rank": args.rank, "error": "%s: %s" % (type(exc).__name__, exc)})
        traceback.print_exc()
        return 1
    finally:
        out.close()


if __name__ == "__main__":
    sys.exit(main())
