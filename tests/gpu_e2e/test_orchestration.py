"""launch.py end to end without a GPU: ranks that fail are reported with their exit codes, ranks
that hang are killed at the timeout; a stand-in `torch` package on PYTHONPATH makes both happen."""

import json
import os
import subprocess
import sys
import tempfile
import time
import unittest

from helpers import SCRIPTS

from gpu_e2e import summary


def launch(out, fake_torch_body, timeout_s, mode="socket"):
    with tempfile.TemporaryDirectory() as fake:
        os.makedirs(os.path.join(fake, "torch"))
        with open(os.path.join(fake, "torch", "__init__.py"), "w") as fh:
            fh.write(fake_torch_body)
        env = dict(os.environ, PYTHONPATH=SCRIPTS + ":" + fake)
        t0 = time.monotonic()
        p = subprocess.run([sys.executable, "-m", "gpu_e2e.launch", "--mode", mode, "--out", out, "--max-bytes", "16",
                            "--timeout-s", str(timeout_s), "--plugin", "/opt/x/libnccl-net-dqplb.so",
                            "--nccl-version", "2.21.5"],
                           capture_output=True, text=True, env=env, timeout=120)
        return p, time.monotonic() - t0


def read_run(out):
    with open(os.path.join(out, "run.json")) as fh:
        return json.load(fh)


class Launch(unittest.TestCase):
    def test_failing_ranks(self):
        with tempfile.TemporaryDirectory() as d:
            out = os.path.join(d, "socket")
            p, _ = launch(out, "raise ImportError('stand-in torch: no CUDA here')\n", 60)
            self.assertEqual(p.returncode, 1, p.stdout + p.stderr)
            self.assertIn("launch socket: FAILED", p.stdout)
            run = read_run(out)
            self.assertEqual(run["rank_exit_codes"], [1, 1])
            self.assertFalse(run["timed_out"])
            self.assertEqual((run["world"], run["max_bytes"], run["dtypes"]), (2, 16, ["float32", "bfloat16"]))
            with open(os.path.join(out, "rank1.jsonl")) as fh:
                recs = [json.loads(x) for x in fh]
            self.assertEqual(recs, [{"kind": "error", "rank": 1, "error": "ImportError: stand-in torch: no CUDA here"}])
            with open(os.path.join(out, "rank0.log")) as fh:
                self.assertIn("ImportError: stand-in torch: no CUDA here", fh.read())
            v = summary.summarize(d, "DQPLB", None, skip_socket=False)
            self.assertIn("socket rank 0: ImportError: stand-in torch: no CUDA here", v["failures"])
            self.assertIn("socket rank 1: exit code 1", v["failures"])
            self.assertIn("socket: 16 of 16 cases missing (first: all_reduce float32 8 B)", v["failures"])

    def test_hanging_ranks_are_killed(self):
        with tempfile.TemporaryDirectory() as d:
            out = os.path.join(d, "plugin")
            p, elapsed = launch(out, "import time\ntime.sleep(60)\n", 3, mode="plugin")
            self.assertEqual(p.returncode, 1)
            self.assertIn("launch plugin: TIMEOUT", p.stdout)
            self.assertLess(elapsed, 30)
            run = read_run(out)
            self.assertTrue(run["timed_out"])
            self.assertEqual(run["rank_exit_codes"], [None, None])
            self.assertEqual(run["plugin"], "/opt/x/libnccl-net-dqplb.so")

    def test_old_nccl_refused_before_start(self):
        with tempfile.TemporaryDirectory() as d:
            p = subprocess.run([sys.executable, "-m", "gpu_e2e.launch", "--mode", "plugin", "--out", d,
                                "--plugin", "/opt/x/libnccl-net-dqplb.so", "--nccl-version", "2.19.3"],
                               capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=SCRIPTS), timeout=60)
            self.assertEqual(p.returncode, 3)
            self.assertIn("launch: NCCL 2.19.3 does not look up ncclNetPlugin_v8", p.stderr)
            self.assertFalse(os.path.exists(os.path.join(d, "rank0.log")))


if __name__ == "__main__":
    unittest.main()
