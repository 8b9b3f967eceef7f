#!/usr/bin/env python3
"""Summarises a PERFTEST=bench share folder (KEEP_SHARE=1 scripts/verbs-tests.sh) as the markdown
tables of docs/records/benchmarks.md: bandwidth, message rate, latency and verbs operations per message."""
import os
import re
import sys

SIZES = {"8B": 8, "4KiB": 4096, "128KiB": 131072, "1MiB": 1 << 20, "4MiB": 4 << 20,
         "16MiB": 16 << 20, "64MiB": 64 << 20}


def read(logs, name):
    path = os.path.join(logs, name + ".log")
    return open(path).read() if os.path.exists(path) else None


def perftest_row(text):
    """The numbers after perftest's '#bytes' header line."""
    if text is None:
        return None
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if line.strip().startswith("#bytes") and i + 1 < len(lines):
            return [float(x) for x in lines[i + 1].split()]
    return None


def dq_time_us(text):
    """Microseconds per message of a dqplb perf bandwidth row (size count type iters time ...)."""
    if text is None:
        return None
    for line in text.splitlines():
        f = line.split()
        if len(f) >= 8 and f[0].isdigit() and f[2] == "float":
            return float(f[4])
    return None


def dq_latency(text):
    if text is None:
        return None
    m = re.search(r"^\s+plugin\s+\d+\s+([\d.]+)\s+([\d.]+)", text, re.M)
    return (float(m.group(1)), float(m.group(2))) if m else None


def dq_ops(text):
    """'side: key=value ...' per comm from the perf ops lines (last occurrence per side)."""
    out = {}
    if text is None:
        return out
    for m in re.finditer(r"verbs (send|recv) comm ops per message \((\d+) messages[^)]*\): (.*)",
                         text):
        kv = dict(x.split("=") for x in m.group(3).split())
        out[m.group(1)] = kv
    return out


def retries(logs, name):
    """rxe's ACK-timeout retransmissions during a step (guest-suite.sh's NAME.retries)."""
    path = os.path.join(logs, name + ".retries")
    if not os.path.exists(path):
        return "-"
    a, b = open(path).read().split()[:2]
    return str(int(b) - int(a)) if int(a) >= 0 and int(b) >= 0 else "-"


def fmt(x, nd=3):
    return "-" if x is None else f"{x:.{nd}f}"


def ratio(a, b):
    return None if a is None or b is None or b == 0 else a / b


def main(share):
    logs = os.path.join(share, "logs")
    print("| size | ib_write_bw -q 4 avg Gb/s | beside a busy loop | dqplb perf Gb/s |"
          " / ib_write_bw | baseline Gb/s | / ib_write_bw | rxe retries (perftest, busy, plugin) |")
    print("|---|---|---|---|---|---|---|---|")
    for s in ["1MiB", "4MiB", "16MiB", "64MiB"]:
        pt = perftest_row(read(logs, f"perftest_write_bw_q4_{s}"))
        pbw = pt[3] if pt else None
        hog = perftest_row(read(logs, f"perftest_write_bw_hog_q4_{s}"))
        gbps = lambda t: None if t is None else SIZES[s] * 8 / (t * 1e3)  # noqa: E731
        dq = gbps(dq_time_us(read(logs, f"dqplb_perf_verbs_q4_{s}")))
        base = gbps(dq_time_us(read(logs, f"dqplb_base_verbs_q4_{s}")))
        rt = ", ".join(retries(logs, n) for n in [f"perftest_write_bw_q4_{s}",
                                                   f"perftest_write_bw_hog_q4_{s}",
                                                   f"dqplb_perf_verbs_q4_{s}"])
        print(f"| {s} | {fmt(pbw, 2)} | {fmt(hog[3] if hog else None, 2)} | {fmt(dq)} |"
              f" {fmt(ratio(dq, pbw), 2)} | {fmt(base)} | {fmt(ratio(base, pbw), 2)} | {rt} |")
    print()
    print("| size | ib_write_bw -q 1 msg/s (tx depth 128) | dqplb perf msg/s (4 in flight) |"
          " / ib_write_bw | baseline msg/s |")
    print("|---|---|---|---|---|")
    for s in ["8B", "4KiB", "128KiB"]:
        pt = perftest_row(read(logs, f"perftest_write_bw_q1_{s}"))
        rate = pt[4] * 1e6 if pt else None
        t4 = perftest_row(read(logs, f"perftest_write_bw_q1_t4_{s}"))
        extra = f" ({t4[4] * 1e6:.0f} at -t 4)" if t4 else ""
        mr = lambda t: None if t is None else 1e6 / t  # noqa: E731
        dq = mr(dq_time_us(read(logs, f"dqplb_perf_verbs_rate_{s}")))
        base = mr(dq_time_us(read(logs, f"dqplb_base_verbs_rate_{s}")))
        print(f"| {s} | {fmt(rate, 0)}{extra} | {fmt(dq, 0)} | {fmt(ratio(dq, rate), 2)} |"
              f" {fmt(base, 0)} |")
    print()
    # ib_write_lat reports half a round trip: perftest's print_report_lat divides each
    # post-to-post interval (one round trip) by rtt_factor = 2 for WRITE (src/perftest_parameters.c,
    # perftest v4.5-0.17 .. 2026 master); dqplb perf reports whole round trips, so the ratio is
    # taken against 2 x typical.
    print("| size | ib_write_lat typical / avg us (half a round trip) | its round trip (2 x typical) us |"
          " dqplb perf round trip median / p99 us | median / (2 x typical) | baseline median us |"
          " rxe retries (perftest, plugin) |")
    print("|---|---|---|---|---|---|---|")
    for s in ["8B", "4KiB", "128KiB"]:
        pt = perftest_row(read(logs, f"perftest_write_lat_{s}"))
        typ, avg = (pt[4], pt[5]) if pt else (None, None)
        dq = dq_latency(read(logs, f"dqplb_perf_verbs_latency_{s}"))
        base = dq_latency(read(logs, f"dqplb_base_verbs_latency_{s}"))
        rtt = None if typ is None else 2 * typ
        print(f"| {s} | {fmt(typ, 2)} / {fmt(avg, 2)} | {fmt(rtt, 2)} | "
              f"{fmt(dq[0] if dq else None, 2)} / {fmt(dq[1] if dq else None, 2)} | "
              f"{fmt(ratio(dq[0] if dq else None, rtt), 2)} | {fmt(base[0] if base else None, 2)} | "
              f"{retries(logs, f'perftest_write_lat_{s}')}, "
              f"{retries(logs, f'dqplb_perf_verbs_latency_{s}')} |")
    print()
    print("| step | send comm posts / completions / polls (empty + full) | recv comm posts /"
          " completions / polls |")
    print("|---|---|---|")
    for f in sorted(os.listdir(logs)):
        if not f.startswith("dqplb_") or not f.endswith(".log"):
            continue
        ops = dq_ops(read(logs, f[:-4]))
        cells = []
        for side in ["send", "recv"]:
            kv = ops.get(side)
            if not kv:
                cells.append("-")
                continue
            posts = float(kv["send_posts"]) + float(kv["recv_posts"])
            polls = float(kv["polls_empty"]) + float(kv["polls_full"])
            cells.append(f"{kv['send_posts']}+{kv['recv_posts']} = {posts:.2f} / "
                         f"{kv['completions']} / {polls:.2f} ({kv['polls_full']} full)")
        print(f"| {f[:-4]} | {cells[0]} | {cells[1]} |")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: bench-summary.py SHARE_DIR (from KEEP_SHARE=1 PERFTEST=bench verbs-tests.sh)")
    main(sys.argv[1])
