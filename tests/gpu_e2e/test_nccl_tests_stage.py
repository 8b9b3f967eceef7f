"""The nccl-tests stage with stand-in make, mpirun and all_reduce_perf: build command, per-rank
NCCL_HOSTID through the wrapper, NCCL_DEBUG_FILE per rank, output parsing and the stage verdict."""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

from helpers import LOGS, PLUGIN_PATH, SCRIPTS

FAKE_MAKE = r"""#!/bin/bash
printf '%s\n' "$@" > "$FAKE_DIR/make-args.txt"
for a in "$@"; do case "$a" in BUILDDIR=*) b=${a#BUILDDIR=} ;; esac; done
[ -n "$FAKE_MAKE_FAIL" ] && { echo "nvcc fatal: stand-in failure"; exit 2; }
mkdir -p "$b" && cp "$FAKE_DIR/all_reduce_perf" "$b/all_reduce_perf" && chmod +x "$b/all_reduce_perf"
"""

FAKE_MPIRUN = r"""#!/bin/bash
printf '%s\n' "$@" > "$FAKE_DIR/mpirun-args.txt"
while [ $# -gt 0 ] && [[ $1 != *rank-wrapper.sh ]]; do shift; done
for r in 0 1; do OMPI_COMM_WORLD_RANK=$r "$@" & done
wait
"""

FAKE_PERF = r"""#!/bin/bash
f=${NCCL_DEBUG_FILE//%h/fakehost}; f=${f//%p/$$}
net=${FAKE_NET:-$NCCL_NET}
{
  echo "fakehost:$$:$$ [0] NCCL INFO NET/Plugin: Plugin name set by env to $NCCL_NET_PLUGIN"
  echo "fakehost:$$:$$ [0] NCCL INFO Using network $net"
  echo "fakehost:$$:$$ [0] NCCL INFO Channel 00/0 : 1[0] -> 0[0] [receive] via NET/$net/0"
  echo "fakehost:$$:$$ [0] NCCL INFO Channel 00/0 : 0[0] -> 1[0] [send] via NET/$net/0"
  echo "env NCCL_HOSTID=$NCCL_HOSTID NCCL_TESTS_DEVICE=$NCCL_TESTS_DEVICE NCCL_SHM_DISABLE=$NCCL_SHM_DISABLE"
} > "$f"
[ "$OMPI_COMM_WORLD_RANK" = 0 ] && cat "$FAKE_SAMPLE"
exit 0
"""


class Stage(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="gpu-e2e-nt-")
        self.bin = os.path.join(self.tmp, "bin")
        os.makedirs(self.bin)
        for name, body in (("make", FAKE_MAKE), ("mpirun", FAKE_MPIRUN)):
            self.write(os.path.join(self.bin, name), body)
        self.write(os.path.join(self.tmp, "all_reduce_perf"), FAKE_PERF)
        self.src = os.path.join(self.tmp, "nccl-tests")
        os.makedirs(os.path.join(self.src, "src"))
        open(os.path.join(self.src, "src", "all_reduce.cu"), "w").close()
        self.env_json = os.path.join(self.tmp, "env.json")
        with open(self.env_json, "w") as fh:
            json.dump({"nccl_tests_src": self.src, "cuda_home": "/fake/cuda", "gpu_cc": "9.0",
                       "mpi": {"mpirun": os.path.join(self.bin, "mpirun"), "flavor": "openmpi", "home": "/fake/mpi"},
                       "nccl": {"version": "2.21.5", "lib": "/fake/nccl/lib/libnccl.so.2",
                                "include": "/fake/nccl/include"}}, fh)
        self.out = os.path.join(self.tmp, "out")

    def tearDown(self):
        shutil.rmtree(self.tmp)

    @staticmethod
    def write(path, body):
        with open(path, "w") as fh:
            fh.write(body)
        os.chmod(path, 0o755)

    def stage(self, sample="all_reduce_perf-ok.txt", *extra, **env_extra):
        env = dict(os.environ, PATH=self.bin + ":" + os.environ["PATH"], PYTHONPATH=SCRIPTS, FAKE_DIR=self.tmp,
                   FAKE_SAMPLE=os.path.join(LOGS, sample), PYTHONDONTWRITEBYTECODE="1")
        env.update(env_extra)
        p = subprocess.run([sys.executable, "-m", "gpu_e2e.nccl_tests", "--env", self.env_json, "--out", self.out,
                            "--plugin", PLUGIN_PATH, "--max-bytes", "268435456", *extra],
                           capture_output=True, text=True, env=env, timeout=120)
        with open(os.path.join(self.out, "status.json")) as fh:
            return p, json.load(fh)

    def read(self, name):
        with open(os.path.join(self.tmp, name)) as fh:
            return fh.read().splitlines()

    def test_ok(self):
        p, st = self.stage()
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        self.assertEqual((st["status"], st["reason"]), ("OK", "4 sizes, avg busbw 1.6105 GB/s"))
        self.assertEqual(len(st["rows"]), 4)
        self.assertEqual(sorted(st["log_verdicts"].values()), ["USED", "USED"])
        make = self.read("make-args.txt")
        self.assertEqual(make[:4], ["-C", self.src, "-j%d" % (os.cpu_count() or 4), "MPI=1"])
        self.assertIn("NCCL_HOME=" + os.path.join(self.out, "nccl_home"), make)
        self.assertIn("NVCC_GENCODE=-gencode=arch=compute_90,code=sm_90", make)
        mpi = self.read("mpirun-args.txt")
        self.assertEqual(mpi[:5], ["-np", "2", "--oversubscribe", "--bind-to", "none"])
        self.assertEqual(mpi[-10:], ["-b", "8", "-e", "268435456", "-f", "2", "-g", "1", "-c", "1"])
        self.assertIn("NCCL_NET_PLUGIN", mpi)
        envs = []
        for f in sorted(os.listdir(self.out)):
            if f.startswith("nccl-debug."):
                with open(os.path.join(self.out, f)) as fh:
                    envs.append(fh.read().splitlines()[-1])
        self.assertEqual(sorted(envs), [
            "env NCCL_HOSTID=dqplb-e2e-host0 NCCL_TESTS_DEVICE=0 NCCL_SHM_DISABLE=1",
            "env NCCL_HOSTID=dqplb-e2e-host1 NCCL_TESTS_DEVICE=0 NCCL_SHM_DISABLE=1",
        ])

    def test_wrong_results_fail(self):
        p, st = self.stage("all_reduce_perf-wrong.txt")
        self.assertEqual(p.returncode, 1)
        self.assertEqual((st["status"], st["reason"]),
                         ("FAILED", "wrong results: 8 out of bounds, sizes [1048576, 2097152]"))

    def test_unchecked_results_fail(self):
        p, st = self.stage("all_reduce_perf-unchecked.txt")
        self.assertEqual(p.returncode, 1)
        self.assertEqual((st["status"], st["reason"]),
                         ("FAILED", "results not checked (validation 0, #wrong N/A or -1 at sizes [8, 1024])"))

    def test_fallback_fails(self):
        p, st = self.stage(FAKE_NET="Socket")
        self.assertEqual(p.returncode, 1)
        self.assertEqual(st["status"], "FAILED")
        self.assertTrue(st["reason"].startswith("plugin not shown in use in both rank logs"), st["reason"])

    def test_build_failure_skips_unless_named(self):
        p, st = self.stage(FAKE_MAKE_FAIL="1")
        self.assertEqual((p.returncode, st["status"]), (0, "SKIPPED"))
        self.assertEqual(st["reason"], "build failed (2), see build.log")
        self.assertIn("nccl-tests SKIPPED: build failed (2)", p.stdout)
        shutil.rmtree(self.out)
        p, st = self.stage("all_reduce_perf-ok.txt", "--src", self.src, "--src-given", FAKE_MAKE_FAIL="1")
        self.assertEqual((p.returncode, st["status"]), (1, "FAILED"))
        with open(os.path.join(self.out, "build.log")) as fh:
            self.assertIn("nvcc fatal: stand-in failure", fh.read())


if __name__ == "__main__":
    unittest.main()
