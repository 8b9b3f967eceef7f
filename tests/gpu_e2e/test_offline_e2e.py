"""The whole scripts/gpu-e2e.sh run offline: a stand-in torch (tests/gpu_e2e/fake_torch), a stand-in
nvidia-smi, and a small shared library exporting ncclNetPlugin_v8 named DQPLB with the entry points
NCCL calls set. Checks the exit status, the summary files, and that a wrong element, a fallback to
Socket, or a plugin whose vtable is NULL fails the run."""

import csv
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

from helpers import CC, HERE, NO_CC, REPO, SCRIPT, SCRIPTS, build_stub_plugin

from gpu_e2e import summary


@unittest.skipUnless(CC, NO_CC)
class OfflineEndToEnd(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="gpu-e2e-offline-")
        cls.plugin = build_stub_plugin(cls.tmp)
        cls.null_plugin = build_stub_plugin(os.path.join(cls.tmp, "null"), set_fields=())
        cls.bin = os.path.join(cls.tmp, "bin")
        os.makedirs(cls.bin)
        smi = os.path.join(cls.bin, "nvidia-smi")
        with open(smi, "w") as fh:
            fh.write("#!/bin/sh\necho 'GPU 0: Fake H200 (UUID: GPU-00000000-fake)'\n")
        os.chmod(smi, 0o755)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp)

    def run_script(self, name, *extra, plugin=None, **env_extra):
        out = os.path.join(self.tmp, name)
        xchg = os.path.join(self.tmp, name + "-xchg")
        os.makedirs(xchg)
        env = dict(os.environ, PATH=self.bin + ":" + os.environ["PATH"],
                   PYTHONPATH=os.path.join(HERE, "fake_torch"), FAKE_TORCH_DIR=xchg, PYTHONDONTWRITEBYTECODE="1")
        env.update(env_extra)
        p = subprocess.run(["bash", SCRIPT, "--plugin", plugin or self.plugin, "--out", out, "--max-bytes", "4K", "--quick",
                            "--skip-nccl-tests", *extra], capture_output=True, text=True, env=env, cwd=REPO,
                           timeout=600)
        verdict = None
        if os.path.exists(os.path.join(out, "verdict.json")):
            with open(os.path.join(out, "verdict.json")) as fh:
                verdict = json.load(fh)
        return p, out, verdict

    def test_pass(self):
        p, out, v = self.run_script("pass")
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        self.assertTrue(v["passed"])
        self.assertEqual(v["warnings"], [])  # sizes < 64 MiB: no ratio is judged
        self.assertEqual(v["failures"], [])
        with open(os.path.join(out, "summary.csv")) as fh:
            rows = list(csv.DictReader(fh))
        self.assertEqual(len(rows), 2 * 4 * 10)  # dtypes x ops x sizes 8 B .. 4 KiB
        self.assertEqual({r["plugin_ok"] for r in rows} | {r["socket_ok"] for r in rows}, {"True"})
        self.assertTrue(all(float(r["ratio"]) > 0 for r in rows))
        with open(os.path.join(out, "stages.tsv")) as fh:
            stages = [ln.split("\t")[:2] for ln in fh.read().splitlines()]
        self.assertEqual(stages, [["plugin", "OK"], ["socket", "OK"], ["nccl-tests", "SKIPPED"]])
        for label in ("plugin", "socket"):
            for rank in ("rank0", "rank1"):
                self.assertEqual(v[label]["log_verdicts"][rank]["verdict"], "USED", (label, rank))
        self.assertIs(v["gdr_exercised"], False)
        self.assertIn("GDR exercised: no (0 of 4 plugin channels via GDRDMA)\n", p.stdout)
        with open(os.path.join(out, "plugin", "rank0.log")) as fh:
            self.assertIn("Plugin name set by env to " + self.plugin, fh.read())
        for f in ("summary.md", "env.json", "check-env.txt", "plugin/rank1.jsonl", "socket/run.json"):
            self.assertTrue(os.path.exists(os.path.join(out, f)), f)

    def test_wrong_element_fails(self):
        p, out, v = self.run_script("wrong", "--skip-socket", FAKE_TORCH_CORRUPT="all_gather:1024")
        self.assertEqual(p.returncode, 1, p.stdout + p.stderr)
        self.assertEqual(v["failures"], ["plugin: WRONG RESULT all_gather bfloat16 1 KiB",
                                         "plugin: WRONG RESULT all_gather float32 1 KiB"])
        self.assertIn("FAIL: plugin: WRONG RESULT all_gather float32 1 KiB", p.stdout)
        with open(os.path.join(out, "plugin", "rank1.jsonl")) as fh:
            bad = [json.loads(x) for x in fh if '"ok": false' in x]
        self.assertEqual([(r["op"], r["bytes"], r["mismatches"], r["bad_iterations"]) for r in bad],
                         [("all_gather", 1024, [1] * 6, list(range(6)))] * 2)  # --quick: warm-up + 5

    def test_stale_buffers_fail(self):
        # Each call after a case's first hands back the previous call's result: only per-iteration
        # inputs and per-iteration checks see it.
        stale = ("all_gather", "reduce_scatter", "sendrecv")
        p, out, v = self.run_script("stale", "--skip-socket", FAKE_TORCH_STALE=",".join(stale))
        self.assertEqual(p.returncode, 1, p.stdout + p.stderr)
        sizes = ["8 B", "16 B", "32 B", "64 B", "128 B", "256 B", "512 B", "1 KiB", "2 KiB", "4 KiB"]
        self.assertEqual(sorted(v["failures"]), sorted("plugin: WRONG RESULT %s %s %s" % (op, dt, sz)
                                                       for op in stale for dt in ("float32", "bfloat16")
                                                       for sz in sizes))
        for rank in (0, 1):
            with open(os.path.join(out, "plugin", "rank%d.jsonl" % rank)) as fh:
                cases = [json.loads(x) for x in fh if '"kind": "case"' in x]
            self.assertEqual(len(cases), 80)
            for c in cases:
                if c["op"] == "all_reduce":
                    self.assertTrue(c["ok"], c)
                    continue
                n_out = c["bytes"] // {"float32": 4, "bfloat16": 2}[c["dtype"]] // (2 if c["op"] == "reduce_scatter" else 1)
                self.assertFalse(c["ok"], c)
                # The warm-up is right; every later iteration holds the one before: all elements wrong.
                self.assertEqual(c["mismatches"], [0] + [n_out] * c["iters"], c)
                self.assertEqual(c["bad_iterations"], list(range(1, c["iters"] + 1)), c)

    def test_stale_in_place_all_reduce_fails(self):
        p, _, v = self.run_script("stale-ar", "--skip-socket", FAKE_TORCH_STALE="all_reduce")
        self.assertEqual(p.returncode, 1, p.stdout + p.stderr)
        self.assertEqual(len(v["failures"]), 20)
        self.assertTrue(all(f.startswith("plugin: WRONG RESULT all_reduce ") for f in v["failures"]), v["failures"])

    def test_fallback_fails(self):
        p, _, v = self.run_script("fallback", "--skip-socket", FAKE_TORCH_NET="Socket")
        self.assertEqual(p.returncode, 1)
        self.assertEqual(v["failures"], [
            "plugin rank 0 log: FELL_BACK (NCCL used network Socket instead of DQPLB)",
            "plugin rank 1 log: FELL_BACK (NCCL used network Socket instead of DQPLB)",
        ])

    def test_gdr_channels_reported(self):
        p, out, v = self.run_script("gdr", "--skip-socket", FAKE_TORCH_GDR="1")
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        self.assertIs(v["gdr_exercised"], True)
        self.assertIn("GDR exercised: yes (4 of 4 plugin channels via GDRDMA)\n", p.stdout)
        with open(os.path.join(out, "summary.md")) as fh:
            self.assertIn("GDR exercised: yes (4 of 4 plugin channels via GDRDMA).", fh.read())

    def test_ranks_check_the_library_they_load(self):
        # Past the preflight, the stand-in NCCL in each rank loads NCCL_NET_PLUGIN itself: a library
        # whose vtable names another network cannot pass as DQPLB.
        other = build_stub_plugin(os.path.join(self.tmp, "other"), name="OTHER")
        out = os.path.join(self.tmp, "launch-other")
        xchg = os.path.join(self.tmp, "launch-other-xchg")
        os.makedirs(xchg)
        env = dict(os.environ, PYTHONPATH=SCRIPTS + ":" + os.path.join(HERE, "fake_torch"), FAKE_TORCH_DIR=xchg,
                   PYTHONDONTWRITEBYTECODE="1")
        p = subprocess.run([sys.executable, "-m", "gpu_e2e.launch", "--mode", "plugin", "--out", os.path.join(out, "plugin"),
                            "--plugin", other, "--max-bytes", "16", "--nccl-version", "2.21.5", "--timeout-s", "60"],
                           capture_output=True, text=True, env=env, timeout=120)
        self.assertEqual(p.returncode, 1, p.stdout + p.stderr)
        v = summary.summarize(out, "DQPLB", os.path.basename(other), skip_socket=True)
        self.assertIn("plugin rank 0 log: LOAD_FAILED (Error: network DQPLB not found.)", v["failures"])
        self.assertIn("plugin rank 1: RuntimeError: DistBackendError: NCCL error: invalid usage (fake: network DQPLB "
                      "not found)", v["failures"])

    def test_null_vtable_stops_at_preflight(self):
        p, out, v = self.run_script("null-vtable", plugin=self.null_plugin)
        self.assertEqual(p.returncode, 3, p.stdout + p.stderr)
        self.assertIsNone(v)
        self.assertIn("[MISS] plugin: %s: ncclNetPlugin_v8 'DQPLB' has NULL entry points NCCL calls unchecked: init, "
                      "devices, getProperties," % self.null_plugin, p.stdout)
        self.assertIn("required items missing", p.stderr)
        self.assertFalse(os.path.exists(os.path.join(out, "plugin")))


if __name__ == "__main__":
    unittest.main()
