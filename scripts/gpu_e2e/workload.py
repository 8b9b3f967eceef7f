"""One rank of the end-to-end workload: torch.distributed (NCCL backend) collectives and send/recv.

Each case checks exact results after the first call and after the timed loop, times the loop, and
appends one JSON line to --results; launch.py starts two of these with their own NCCL environment.
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


def _build(torch, pat, count, dtype, device):
    idx = torch.arange(count, dtype=torch.int64, device=device) + pat.offset
    vals = (idx % pat.m) * pat.a + (idx // pat.chunk) * pat.cc + pat.b
    return (vals * pat.scale).to(dtype)


def _mismatches(torch, got, pat, dtype):
    want = _build(torch, pat, got.numel(), dtype, got.device)
    return int((got != want).sum().item())


class Case:
    """Buffers and one call of one op at one size."""

    def __init__(self, torch, dist, op, nbytes, dtype, elsize, rank, world, device):
        counts = metrics.element_counts(op, nbytes, elsize, world)
        if counts is None:
            raise ValueError("%s: %d bytes do not split into %d-byte elements per rank" % (op, nbytes, elsize))
        self.torch, self.dist, self.op = torch, dist, op
        self.rank, self.world, self.dtype = rank, world, dtype
        n_in, n_out = counts
        self.chunk = n_in if op == "all_gather" else n_out
        self.inp = _build(torch, patterns.send_pattern(op, rank, world, self.chunk), n_in, dtype, device)
        if op == "all_reduce":
            self.out = self.inp  # in place, as torch.distributed.all_reduce works
        else:
            self.out = torch.empty(n_out, dtype=dtype, device=device)
        self.calls = 0

    def call(self):
        d, op = self.dist, self.op
        if op == "all_reduce":
            d.all_reduce(self.out)
        elif op == "all_gather":
            d.all_gather_into_tensor(self.out, self.inp)
        elif op == "reduce_scatter":
            d.reduce_scatter_tensor(self.out, self.inp)
        else:
            to, frm = patterns.peers(self.rank, self.world)
            reqs = d.batch_isend_irecv([d.P2POp(d.isend, self.inp, to), d.P2POp(d.irecv, self.out, frm)])
            for r in reqs:
                r.wait()
        self.calls += 1

    def check(self):
        pat = patterns.expected_pattern(self.op, self.rank, self.world, self.chunk, self.calls)
        return _mismatches(self.torch, self.out, pat, self.dtype)


def run_case(torch, dist, args, op, dtype_name, nbytes, device):
    dtype = getattr(torch, dtype_name)
    case = Case(torch, dist, op, nbytes, dtype, metrics.DTYPES[dtype_name], args.rank, args.world, device)
    case.call()  # first call doubles as warm-up
    torch.cuda.synchronize()
    first_bad = case.check()
    iters = metrics.iterations(nbytes, args.quick)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(iters):
        case.call()
    torch.cuda.synchronize()
    dt = (time.perf_counter() - t0) / iters
    last_bad = case.check()
    return {
        "op": op,
        "dtype": dtype_name,
        "bytes": nbytes,
        "iters": iters,
        "time_s": dt,
        "mismatches_first": first_bad,
        "mismatches_last": last_bad,
        "ok": first_bad == 0 and last_bad == 0,
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
                        print("rank %d: WRONG RESULT %s %s %d B: %d/%d mismatches (first/last)" % (
                            args.rank, op, dtype_name, nbytes, rec["mismatches_first"], rec["mismatches_last"]),
                            file=sys.stderr, flush=True)
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
