"""Merges the plugin and Socket runs into summary.md / summary.csv / verdict.json and decides the
exit status: wrong results, a plugin not shown in use, or a failed stage fail the run; a busbw
ratio below 1.0 at >= 64 MiB fails it only with --enforce-ratio (otherwise it is a warning).
"""

import argparse
import csv
import json
import os
import sys
from typing import Dict, List, Optional, Tuple

if __package__ in (None, ""):
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from gpu_e2e import metrics, nccl_log  # noqa: E402

RATIO_MIN_BYTES = 64 << 20
Key = Tuple[str, str, int]  # (op, dtype, bytes)


def read_jsonl(path) -> List[dict]:
    recs = []
    with open(path, "r", encoding="utf-8", errors="replace") as fh:
        for n, line in enumerate(fh, 1):
            line = line.strip()
            if not line:
                continue
            try:
                recs.append(json.loads(line))
            except ValueError:
                recs.append({"kind": "error", "error": "%s:%d: unreadable line" % (path, n)})
    return recs


def _case_ok(r: dict) -> bool:
    """A case passes only when the rank said ok AND reported no mismatching element in any iteration
    (a record whose flag and counts disagree is not trusted)."""
    counts = list(r.get("mismatches") or []) + [r.get("mismatches_first", 0), r.get("mismatches_last", 0)]
    return bool(r.get("ok")) and not r.get("bad_iterations") and all(int(n or 0) == 0 for n in counts)


def merge_ranks(per_rank: List[List[dict]]) -> Dict[Key, dict]:
    """One entry per case present on every rank: time = slowest rank, ok = all ranks ok."""
    by_key: Dict[Key, List[dict]] = {}
    for recs in per_rank:
        for r in recs:
            if r.get("kind") == "case":
                by_key.setdefault((r["op"], r["dtype"], int(r["bytes"])), []).append(r)
    out = {}
    for key, recs in by_key.items():
        out[key] = {"time_s": max(float(r["time_s"]) for r in recs), "ok": all(_case_ok(r) for r in recs),
                    "ranks": len(recs), "iters": max(int(r.get("iters", 0)) for r in recs)}
    return out


def expected_keys(run: dict) -> List[Key]:
    return [(op, dt, b) for dt in run["dtypes"] for op in run["ops"]
            for b in metrics.sizes(metrics.MIN_BYTES, int(run["max_bytes"]))]


def check_run(run_dir, label, plugin_name, lib_basename) -> Tuple[Dict[Key, dict], List[str], dict]:
    """(merged cases, failures, facts) for one launch folder (plugin/ or socket/)."""
    fails: List[str] = []
    facts: dict = {"log_verdicts": {}}
    run_path = os.path.join(run_dir, "run.json")
    if not os.path.exists(run_path):
        return {}, ["%s: no run.json (the run did not start)" % label], facts
    with open(run_path, "r", encoding="utf-8") as fh:
        run = json.load(fh)
    world = int(run["world"])
    if run.get("timed_out"):
        fails.append("%s: timed out after %s s" % (label, run.get("timeout_s")))
    per_rank = []
    for rank in range(world):
        path = os.path.join(run_dir, "rank%d.jsonl" % rank)
        recs = read_jsonl(path) if os.path.exists(path) else []
        per_rank.append(recs)
        for r in recs:
            if r.get("kind") == "error":
                fails.append("%s rank %d: %s" % (label, rank, r.get("error")))
            if r.get("kind") == "header":
                facts.setdefault("nccl", r.get("nccl"))
                facts.setdefault("torch", r.get("torch"))
        rc = (run.get("rank_exit_codes") or [None] * world)[rank]
        if rc not in (0, None) or (rc is None and not run.get("timed_out")):
            fails.append("%s rank %d: exit code %s" % (label, rank, rc))
        log_path = os.path.join(run_dir, "rank%d.log" % rank)
        text = ""
        if os.path.exists(log_path):
            with open(log_path, "r", encoding="utf-8", errors="replace") as fh:
                text = fh.read()
        if label == "socket":
            rep = nccl_log.parse_socket_log(text)
        else:
            rep = nccl_log.parse_log(text, plugin_name, lib_basename)
        facts["log_verdicts"]["rank%d" % rank] = {"verdict": rep.verdict, "reason": rep.reason,
                                                  "nccl_version": rep.nccl_version, "net_channels": rep.net_channels,
                                                  "gdr_channels": rep.gdr_channels}
        if rep.verdict != nccl_log.USED:
            fails.append("%s rank %d log: %s (%s)" % (label, rank, rep.verdict, rep.reason))
    merged = merge_ranks(per_rank)
    for key, m in sorted(merged.items()):
        if not m["ok"]:
            fails.append("%s: WRONG RESULT %s %s %s" % (label, key[0], key[1], metrics.human_bytes(key[2])))
    missing = [k for k in expected_keys(run) if k not in merged or merged[k]["ranks"] < world]
    if missing:
        fails.append("%s: %d of %d cases missing (first: %s %s %s)" % (
            label, len(missing), len(expected_keys(run)), missing[0][0], missing[0][1], metrics.human_bytes(missing[0][2])))
    facts["world"] = world
    facts["elapsed_s"] = run.get("elapsed_s")
    return merged, fails, facts


def build_rows(plugin: Dict[Key, dict], socket: Dict[Key, dict], world: int) -> List[dict]:
    rows = []
    order = {op: i for i, op in enumerate(metrics.OPS)}
    dorder = {dt: i for i, dt in enumerate(metrics.DTYPES)}
    keys = sorted(set(plugin) | set(socket), key=lambda k: (dorder.get(k[1], 99), k[1], order.get(k[0], 99), k[2]))
    for key in keys:
        op, dtype, nbytes = key
        row = {"op": op, "dtype": dtype, "bytes": nbytes}
        for label, src in (("plugin", plugin), ("socket", socket)):
            m = src.get(key)
            if m and m["time_s"] > 0:
                alg, bus = metrics.bandwidths(op, nbytes, m["time_s"], world)
                row.update({label + "_time_us": m["time_s"] * 1e6, label + "_algbw": alg, label + "_busbw": bus,
                            label + "_ok": m["ok"]})
            else:
                row.update({label + "_time_us": None, label + "_algbw": None, label + "_busbw": None,
                            label + "_ok": None})
        pb, sb = row["plugin_busbw"], row["socket_busbw"]
        row["ratio"] = pb / sb if (pb is not None and sb) else None
        rows.append(row)
    return rows


def low_ratios(rows: List[dict], min_bytes: int = RATIO_MIN_BYTES, threshold: float = 1.0) -> List[dict]:
    return [r for r in rows if r["bytes"] >= min_bytes and r["ratio"] is not None and r["ratio"] < threshold]


def _f(v, fmt):
    return "-" if v is None else fmt % v


def _bw(v):
    if v is None:
        return "-"
    return "%.3f" % v if v >= 0.01 else "%.2e" % v


def _ok(v):
    return "-" if v is None else ("ok" if v else "WRONG")


def markdown_table(rows: List[dict]) -> str:
    out = ["| op | dtype | size | plugin time (us) | plugin algbw (GB/s) | plugin busbw (GB/s) | "
           "socket time (us) | socket algbw (GB/s) | socket busbw (GB/s) | busbw ratio | check |",
           "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for r in rows:
        checks = "/".join(_ok(r[k]) for k in ("plugin_ok", "socket_ok"))
        out.append("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
            r["op"], r["dtype"], metrics.human_bytes(r["bytes"]), _f(r["plugin_time_us"], "%.1f"),
            _bw(r["plugin_algbw"]), _bw(r["plugin_busbw"]), _f(r["socket_time_us"], "%.1f"),
            _bw(r["socket_algbw"]), _bw(r["socket_busbw"]), _f(r["ratio"], "%.3f"), checks))
    return "\n".join(out) + "\n"


CSV_FIELDS = ["op", "dtype", "bytes", "plugin_time_us", "plugin_algbw", "plugin_busbw", "plugin_ok",
              "socket_time_us", "socket_algbw", "socket_busbw", "socket_ok", "ratio"]


def write_csv(rows: List[dict], path: str):
    with open(path, "w", encoding="utf-8", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=CSV_FIELDS)
        w.writeheader()
        for r in rows:
            w.writerow({k: ("" if r[k] is None else (("%.6g" % r[k]) if isinstance(r[k], float) else r[k]))
                        for k in CSV_FIELDS})


def read_stages(path) -> List[List[str]]:
    if not os.path.exists(path):
        return []
    with open(path, "r", encoding="utf-8") as fh:
        return [ln.rstrip("\n").split("\t") for ln in fh if ln.strip()]


def summarize(out_dir, plugin_name="DQPLB", lib_basename=None, enforce_ratio=False, skip_socket=False,
              ratio_min_bytes=RATIO_MIN_BYTES) -> dict:
    failures: List[str] = []
    warnings: List[str] = []
    plugin, f, pfacts = check_run(os.path.join(out_dir, "plugin"), "plugin", plugin_name, lib_basename)
    failures += f
    socket, sfacts = {}, {}
    if skip_socket:
        warnings.append("socket baseline skipped (--skip-socket): no ratio")
    else:
        socket, f, sfacts = check_run(os.path.join(out_dir, "socket"), "socket", plugin_name, lib_basename)
        failures += f
    world = pfacts.get("world") or sfacts.get("world") or 2
    rows = build_rows(plugin, socket, world)
    low = low_ratios(rows, ratio_min_bytes)
    for r in low:
        msg = "busbw ratio %.3f < 1.0 for %s %s %s" % (r["ratio"], r["op"], r["dtype"], metrics.human_bytes(r["bytes"]))
        (failures if enforce_ratio else warnings).append(msg)
    nt_path = os.path.join(out_dir, "nccl-tests", "status.json")
    nt = None
    if os.path.exists(nt_path):
        with open(nt_path, "r", encoding="utf-8") as fh:
            nt = json.load(fh)
        if nt.get("status") == "FAILED":
            failures.append("nccl-tests: %s" % nt.get("reason"))
        elif nt.get("status") == "SKIPPED":
            warnings.append("nccl-tests skipped: %s" % nt.get("reason"))
    for st in read_stages(os.path.join(out_dir, "stages.tsv")):
        if len(st) >= 2 and st[1] in ("FAILED", "TIMEOUT") and not any(x.startswith(st[0]) for x in failures):
            failures.append("stage %s: %s %s" % (st[0], st[1], st[3] if len(st) > 3 else ""))
    gdr = gdr_facts(pfacts)
    big = [r for r in rows if r["bytes"] >= ratio_min_bytes and r["ratio"] is not None]
    worst = min(big, key=lambda r: r["ratio"]) if big else None
    verdict = {"passed": not failures, "failures": failures, "warnings": warnings,
               "enforce_ratio": enforce_ratio, "ratio_min_bytes": ratio_min_bytes,
               "min_ratio_at_or_above": None if worst is None else {
                   "ratio": worst["ratio"], "op": worst["op"], "dtype": worst["dtype"], "bytes": worst["bytes"]},
               "gdr_exercised": gdr["used"], "gdr": gdr,
               "plugin": pfacts, "socket": sfacts, "nccl_tests": nt}
    with open(os.path.join(out_dir, "verdict.json"), "w", encoding="utf-8") as fh:
        json.dump(verdict, fh, indent=2)
    write_csv(rows, os.path.join(out_dir, "summary.csv"))
    with open(os.path.join(out_dir, "summary.md"), "w", encoding="utf-8") as fh:
        fh.write(render_markdown(verdict, rows, read_stages(os.path.join(out_dir, "stages.tsv"))))
    return verdict


def gdr_facts(pfacts: dict) -> dict:
    """Whether the plugin run used GPUDirect RDMA: any of its channels through the plugin, on any
    rank, printed with /GDRDMA."""
    lv = pfacts.get("log_verdicts", {}).values()
    net = sum(int(v.get("net_channels", 0)) for v in lv)
    gdr = sum(int(v.get("gdr_channels", 0)) for v in lv)
    return {"used": gdr > 0, "gdr_channels": gdr, "net_channels": net}


def gdr_line(verdict: dict) -> str:
    g = verdict["gdr"]
    return "GDR exercised: %s (%d of %d plugin channels via GDRDMA)" % (
        "yes" if g["used"] else "no", g["gdr_channels"], g["net_channels"])


def render_markdown(verdict: dict, rows: List[dict], stages: List[List[str]]) -> str:
    p = verdict["plugin"]
    lines = ["# DQPLB plugin end-to-end run", "",
             "Result: **%s**" % ("PASS" if verdict["passed"] else "FAIL"), "",
             "NCCL %s, torch %s, %s ranks on one GPU; busbw in the nccl-tests convention (GB/s = 1e9 B/s)." % (
                 p.get("nccl", "?"), p.get("torch", "?"), p.get("world", "?")), "",
             gdr_line(verdict) + ".", ""]
    w = verdict["min_ratio_at_or_above"]
    if w:
        lines += ["Lowest plugin/Socket busbw ratio at >= %s: %.3f (%s %s %s)%s." % (
            metrics.human_bytes(verdict["ratio_min_bytes"]), w["ratio"], w["op"], w["dtype"],
            metrics.human_bytes(w["bytes"]), "" if verdict["enforce_ratio"] else " (recorded, not enforced)"), ""]
    if stages:
        lines += ["| stage | status | seconds | note |", "|---|---|---:|---|"]
        lines += ["| %s |" % " | ".join((s + ["", "", "", ""])[:4]) for s in stages] + [""]
    for title, key in (("Failures", "failures"), ("Warnings", "warnings")):
        if verdict[key]:
            lines += ["## " + title, ""] + ["- " + x for x in verdict[key]] + [""]
    lines += ["## NCCL logs", ""]
    for label in ("plugin", "socket"):
        for rank, v in sorted(verdict[label].get("log_verdicts", {}).items()):
            lines.append("- %s %s log: %s (%s); %d of %d channels via GDRDMA" % (
                label, rank, v["verdict"], v["reason"], v.get("gdr_channels", 0), v.get("net_channels", 0)))
    nt = verdict.get("nccl_tests")
    if nt:
        lines += ["", "nccl-tests all_reduce_perf: %s (%s)" % (nt.get("status"), nt.get("reason"))]
    lines += ["", "## Results", "", markdown_table(rows)]
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--out", required=True)
    ap.add_argument("--plugin-name", default="DQPLB")
    ap.add_argument("--plugin", default=None, help="plugin library path (its file name is matched in logs)")
    ap.add_argument("--enforce-ratio", action="store_true")
    ap.add_argument("--skip-socket", action="store_true")
    a = ap.parse_args(argv)
    v = summarize(a.out, a.plugin_name, os.path.basename(a.plugin) if a.plugin else None, a.enforce_ratio,
                  a.skip_socket)
    for x in v["failures"]:
        print("FAIL: " + x)
    for x in v["warnings"]:
        print("warn: " + x)
    print(gdr_line(v))
    print("summary: %s -> %s" % ("PASS" if v["passed"] else "FAIL", os.path.join(a.out, "summary.md")))
    return 0 if v["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
