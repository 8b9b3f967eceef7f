"""Summary and verdict from synthetic run folders: rows, exact bandwidths and ratios, CSV/markdown,
and every failure kind (wrong result, plugin not used, missing cases, timeout, ratio, nccl-tests)."""

import csv
import json
import os
import shutil
import tempfile
import unittest

from helpers import LOGS, PLUGIN_PATH

from gpu_e2e import metrics, summary

MAX = 128 << 20
SIZES = metrics.sizes(8, MAX)  # 25 sizes
OPS = ["all_reduce", "sendrecv"]


def read(path):
    with open(path, encoding="utf-8") as fh:
        return fh.read()


def write_run(folder, mode, speed_gbps, log_name, overrides=None, drop=None, timed_out=False):
    """A run where every case takes bytes / speed: algbw == speed exactly (busbw too: factor 1)."""
    os.makedirs(folder)
    with open(os.path.join(folder, "run.json"), "w") as fh:
        json.dump({"mode": mode, "world": 2, "ops": OPS, "dtypes": ["float32"], "max_bytes": MAX,
                   "rank_exit_codes": [None, None] if timed_out else [0, 0], "timed_out": timed_out,
                   "timeout_s": 200, "elapsed_s": 12.5}, fh)
    for rank in range(2):
        with open(os.path.join(folder, "rank%d.jsonl" % rank), "w") as fh:
            fh.write(json.dumps({"kind": "header", "rank": rank, "nccl": "2.28.9", "torch": "2.9.0"}) + "\n")
            for op in OPS:
                for b in SIZES:
                    if drop and (op, b) == drop:
                        continue
                    rec = {"kind": "case", "op": op, "dtype": "float32", "bytes": b, "iters": 3,
                           "time_s": b / (speed_gbps * 1e9), "mismatches": [0, 0, 0, 0], "mismatches_first": 0,
                           "mismatches_last": 0, "bad_iterations": [], "ok": True}
                    rec.update((overrides or {}).get((rank, op, b), {}))
                    fh.write(json.dumps(rec) + "\n")
            fh.write(json.dumps({"kind": "done", "rank": rank}) + "\n")
        shutil.copy(os.path.join(LOGS, log_name), os.path.join(folder, "rank%d.log" % rank))


class Summary(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="gpu-e2e-test-")

    def tearDown(self):
        shutil.rmtree(self.dir)

    def run_summary(self, plugin_kw=None, socket_kw=None, enforce=False, nccl_tests=None):
        pk = dict({"log_name": "nccl-2.28-plugin-used.log"}, **(plugin_kw or {}))
        sk = dict({"log_name": "nccl-2.21-socket-baseline.log"}, **(socket_kw or {}))
        write_run(os.path.join(self.dir, "plugin"), "plugin", 2.0, **pk)
        write_run(os.path.join(self.dir, "socket"), "socket", 1.0, **sk)
        if nccl_tests:
            os.makedirs(os.path.join(self.dir, "nccl-tests"))
            with open(os.path.join(self.dir, "nccl-tests", "status.json"), "w") as fh:
                json.dump(nccl_tests, fh)
        return summary.summarize(self.dir, "DQPLB", os.path.basename(PLUGIN_PATH), enforce_ratio=enforce)

    def test_all_good(self):
        v = self.run_summary(nccl_tests={"status": "OK", "reason": "4 sizes"})
        self.assertTrue(v["passed"], v["failures"])
        self.assertEqual(v["failures"], [])
        self.assertEqual(v["warnings"], [])
        self.assertEqual(v["min_ratio_at_or_above"]["bytes"], 64 << 20)
        self.assertAlmostEqual(v["min_ratio_at_or_above"]["ratio"], 2.0, places=12)
        self.assertEqual(v["plugin"]["log_verdicts"]["rank0"]["verdict"], "USED")
        self.assertEqual(v["socket"]["log_verdicts"]["rank1"]["verdict"], "USED")
        with open(os.path.join(self.dir, "summary.csv")) as fh:
            rows = list(csv.DictReader(fh))
        self.assertEqual(len(rows), 50)
        self.assertEqual(list(rows[0].keys()), summary.CSV_FIELDS)
        last = rows[-1]
        self.assertEqual((last["op"], last["bytes"]), ("sendrecv", str(MAX)))
        self.assertEqual((last["plugin_algbw"], last["plugin_busbw"], last["socket_busbw"], last["ratio"]),
                         ("2", "2", "1", "2"))
        self.assertEqual(last["plugin_time_us"], "67108.9")
        md = read(os.path.join(self.dir, "summary.md"))
        self.assertIn("Result: **PASS**", md)
        self.assertIn("| sendrecv | float32 | 128 MiB | 67108.9 | 2.000 | 2.000 | 134217.7 | 1.000 | 1.000 | 2.000 | ok/ok |", md)
        self.assertIn("Lowest plugin/Socket busbw ratio at >= 64 MiB: 2.000 (all_reduce float32 64 MiB) (recorded, not enforced).", md)
        # DQPLB advertises host memory only: the summary says GPUDirect was not exercised.
        self.assertIs(v["gdr_exercised"], False)
        self.assertEqual(v["gdr"], {"used": False, "gdr_channels": 0, "net_channels": 8})
        self.assertIn("\nGDR exercised: no (0 of 8 plugin channels via GDRDMA).\n", md)
        self.assertIn("- plugin rank0 log: USED (", md)
        self.assertIn("; 0 of 4 channels via GDRDMA", md)

    def test_gdr_exercised_reported(self):
        v = self.run_summary(plugin_kw={"log_name": "nccl-2.28-future-gpudirect.log"})
        self.assertTrue(v["passed"], v["failures"])
        self.assertIs(v["gdr_exercised"], True)
        self.assertEqual(v["gdr"], {"used": True, "gdr_channels": 10, "net_channels": 12})
        md = read(os.path.join(self.dir, "summary.md"))
        self.assertIn("\nGDR exercised: yes (10 of 12 plugin channels via GDRDMA).\n", md)

    def test_gdr_cli_line(self):
        import contextlib
        import io

        write_run(os.path.join(self.dir, "plugin"), "plugin", 2.0, "nccl-2.28-plugin-used.log")
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            rc = summary.main(["--out", self.dir, "--skip-socket"])
        self.assertEqual(rc, 0)
        self.assertIn("\nGDR exercised: no (0 of 8 plugin channels via GDRDMA)\nsummary: PASS -> ", buf.getvalue())

    def test_low_ratio_warns_unless_enforced(self):
        slow = {(r, "sendrecv", MAX): {"time_s": MAX / 0.5e9} for r in (0, 1)}
        slow_small = {(r, "sendrecv", 32 << 20): {"time_s": (32 << 20) / 0.5e9} for r in (0, 1)}
        slow.update(slow_small)
        v = self.run_summary(plugin_kw={"overrides": slow})
        self.assertTrue(v["passed"])
        self.assertEqual(v["warnings"], ["busbw ratio 0.500 < 1.0 for sendrecv float32 128 MiB"])
        shutil.rmtree(self.dir)
        os.makedirs(self.dir)
        v = self.run_summary(plugin_kw={"overrides": slow}, enforce=True)
        self.assertFalse(v["passed"])
        self.assertEqual(v["failures"], ["busbw ratio 0.500 < 1.0 for sendrecv float32 128 MiB"])

    def test_slowest_rank_counts(self):
        v = self.run_summary(plugin_kw={"overrides": {(1, "all_reduce", 64 << 20): {"time_s": (64 << 20) / 0.8e9}}})
        self.assertAlmostEqual(v["min_ratio_at_or_above"]["ratio"], 0.8, places=12)
        self.assertEqual(v["warnings"], ["busbw ratio 0.800 < 1.0 for all_reduce float32 64 MiB"])

    def test_wrong_result_fails(self):
        v = self.run_summary(plugin_kw={"overrides": {(1, "all_reduce", 1024): {"ok": False, "mismatches_last": 3}}})
        self.assertFalse(v["passed"])
        self.assertEqual(v["failures"], ["plugin: WRONG RESULT all_reduce float32 1 KiB"])
        md = read(os.path.join(self.dir, "summary.md"))
        self.assertIn("Result: **FAIL**", md)
        self.assertIn("| all_reduce | float32 | 1 KiB |", md)
        self.assertIn("| WRONG/ok |", md)

    def test_mismatch_counts_fail_even_if_flagged_ok(self):
        v = self.run_summary(plugin_kw={"overrides": {
            (0, "sendrecv", 64): {"mismatches": [0, 0, 2, 0], "bad_iterations": [2]},
            (1, "all_reduce", 8): {"mismatches_last": 1}}})
        self.assertFalse(v["passed"])
        self.assertEqual(v["failures"], ["plugin: WRONG RESULT all_reduce float32 8 B",
                                         "plugin: WRONG RESULT sendrecv float32 64 B"])

    def test_plugin_not_used_fails(self):
        v = self.run_summary(plugin_kw={"log_name": "nccl-2.21-fell-back-socket.log"})
        self.assertFalse(v["passed"])
        self.assertEqual(v["failures"], [
            "plugin rank 0 log: FELL_BACK (NCCL used network Socket instead of DQPLB)",
            "plugin rank 1 log: FELL_BACK (NCCL used network Socket instead of DQPLB)",
        ])

    def test_missing_case_fails(self):
        v = self.run_summary(socket_kw={"drop": ("sendrecv", 8)})
        self.assertFalse(v["passed"])
        self.assertEqual(v["failures"], ["socket: 1 of 50 cases missing (first: sendrecv float32 8 B)"])

    def test_timeout_fails(self):
        v = self.run_summary(plugin_kw={"timed_out": True})
        self.assertEqual(v["failures"], ["plugin: timed out after 200 s"])

    def test_rank_error_fails(self):
        write_run(os.path.join(self.dir, "plugin"), "plugin", 2.0, "nccl-2.28-plugin-used.log")
        write_run(os.path.join(self.dir, "socket"), "socket", 1.0, "nccl-2.21-socket-baseline.log")
        with open(os.path.join(self.dir, "plugin", "rank0.jsonl"), "a") as fh:
            fh.write(json.dumps({"kind": "error", "rank": 0, "error": "DistBackendError: NCCL error"}) + "\n")
            fh.write("{not json\n")
        v = summary.summarize(self.dir, "DQPLB", None)
        path = os.path.join(self.dir, "plugin", "rank0.jsonl")
        self.assertEqual(v["failures"], ["plugin rank 0: DistBackendError: NCCL error",
                                         "plugin rank 0: %s:%d: unreadable line" % (path, 2 + 2 * len(SIZES) + 2)])

    def test_no_run_at_all(self):
        v = summary.summarize(self.dir, "DQPLB", None)
        self.assertEqual(v["failures"], ["plugin: no run.json (the run did not start)",
                                         "socket: no run.json (the run did not start)"])

    def test_skip_socket(self):
        write_run(os.path.join(self.dir, "plugin"), "plugin", 2.0, "nccl-2.28-plugin-used.log")
        v = summary.summarize(self.dir, "DQPLB", None, skip_socket=True)
        self.assertTrue(v["passed"])
        self.assertEqual(v["warnings"], ["socket baseline skipped (--skip-socket): no ratio"])
        self.assertIsNone(v["min_ratio_at_or_above"])

    def test_nccl_tests_status(self):
        v = self.run_summary(nccl_tests={"status": "SKIPPED", "reason": "no MPI"})
        self.assertTrue(v["passed"])
        self.assertEqual(v["warnings"], ["nccl-tests skipped: no MPI"])
        shutil.rmtree(self.dir)
        os.makedirs(self.dir)
        v = self.run_summary(nccl_tests={"status": "FAILED", "reason": "wrong results: 8 out of bounds"})
        self.assertEqual(v["failures"], ["nccl-tests: wrong results: 8 out of bounds"])

    def test_failed_stage_in_stages_file(self):
        write_run(os.path.join(self.dir, "plugin"), "plugin", 2.0, "nccl-2.28-plugin-used.log")
        with open(os.path.join(self.dir, "stages.tsv"), "w") as fh:
            fh.write("plugin\tOK\t30\t\nsocket\tFAILED\t3\tlaunch exit 1\nnccl-tests\tTIMEOUT\t90\texit 1\n")
        v = summary.summarize(self.dir, "DQPLB", None)
        # The socket folder's own failure already names the stage: reported once.
        self.assertEqual(v["failures"], ["socket: no run.json (the run did not start)",
                                         "stage nccl-tests: TIMEOUT exit 1"])
        md = read(os.path.join(self.dir, "summary.md"))
        self.assertIn("| socket | FAILED | 3 | launch exit 1 |", md)


class Pure(unittest.TestCase):
    def test_row_order_float32_first(self):
        keys = {("sendrecv", "bfloat16", 8), ("all_reduce", "bfloat16", 8), ("sendrecv", "float32", 16),
                ("sendrecv", "float32", 8), ("all_gather", "float32", 8)}
        merged = {k: {"time_s": 1.0, "ok": True, "ranks": 2, "iters": 1} for k in keys}
        rows = summary.build_rows(merged, {}, 2)
        self.assertEqual([(r["op"], r["dtype"], r["bytes"]) for r in rows], [
            ("all_gather", "float32", 8), ("sendrecv", "float32", 8), ("sendrecv", "float32", 16),
            ("all_reduce", "bfloat16", 8), ("sendrecv", "bfloat16", 8)])

    def test_merge_and_rows(self):
        a = [{"kind": "case", "op": "all_gather", "dtype": "bfloat16", "bytes": 1 << 20, "time_s": 0.001, "ok": True,
              "iters": 20}]
        b = [{"kind": "case", "op": "all_gather", "dtype": "bfloat16", "bytes": 1 << 20, "time_s": 0.002, "ok": True,
              "iters": 20}]
        merged = summary.merge_ranks([a, b])
        self.assertEqual(merged, {("all_gather", "bfloat16", 1 << 20): {"time_s": 0.002, "ok": True, "ranks": 2,
                                                                           "iters": 20}})
        sock = {("all_gather", "bfloat16", 1 << 20): {"time_s": 0.004, "ok": True, "ranks": 2, "iters": 20}}
        rows = summary.build_rows(merged, sock, 2)
        self.assertEqual(len(rows), 1)
        r = rows[0]
        self.assertAlmostEqual(r["plugin_algbw"], 0.524288, places=12)
        self.assertAlmostEqual(r["plugin_busbw"], 0.262144, places=12)
        self.assertAlmostEqual(r["socket_busbw"], 0.131072, places=12)
        self.assertAlmostEqual(r["ratio"], 2.0, places=12)

    def test_low_ratios_threshold_and_size(self):
        rows = [{"bytes": 32 << 20, "ratio": 0.5}, {"bytes": 64 << 20, "ratio": 0.99},
                {"bytes": 64 << 20, "ratio": 1.0}, {"bytes": 256 << 20, "ratio": None}]
        self.assertEqual(summary.low_ratios(rows), [{"bytes": 64 << 20, "ratio": 0.99}])

    def test_row_without_socket(self):
        plug = {("sendrecv", "float32", 8): {"time_s": 1e-5, "ok": True, "ranks": 2, "iters": 20}}
        r = summary.build_rows(plug, {}, 2)[0]
        self.assertIsNone(r["socket_busbw"])
        self.assertIsNone(r["ratio"])
        self.assertIn("| sendrecv | float32 | 8 B | 10.0 | 8.00e-04 | 8.00e-04 | - | - | - | - | ok/- |",
                      summary.markdown_table([r]))


if __name__ == "__main__":
    unittest.main()
