"""Per-rank NCCL environment, version parsing, and the nccl-tests command lines and output parser."""

import importlib.util
import os
import tempfile
import unittest

from helpers import LOGS, PLUGIN_PATH

from gpu_e2e import launch, nccl_tests


class Versions(unittest.TestCase):
    def test_forms(self):
        self.assertEqual(launch.parse_version("2.21.5"), (2, 21, 5))
        self.assertEqual(launch.parse_version("2.28.9+cuda12.9"), (2, 28, 9))
        self.assertEqual(launch.parse_version("22105"), (2, 21, 5))
        self.assertEqual(launch.parse_version("2708"), (2, 7, 8))
        self.assertIsNone(launch.parse_version(""))
        self.assertIsNone(launch.parse_version("two.x"))


class RankEnv(unittest.TestCase):
    BASE = {"PATH": "/usr/bin", "NCCL_NET": "IB", "NCCL_NET_PLUGIN": "stale", "NCCL_IB_HCA": "mlx5_0:1:0",
            "LD_LIBRARY_PATH": "/x"}

    def test_plugin_2_21_full_path(self):
        env = launch.rank_env(self.BASE, "plugin", 1, PLUGIN_PATH, "DQPLB", (2, 21, 5))
        self.assertEqual(env["NCCL_NET_PLUGIN"], PLUGIN_PATH)
        self.assertEqual(env["NCCL_NET"], "DQPLB")
        self.assertEqual(env["NCCL_HOSTID"], "dqplb-e2e-host1")
        self.assertEqual(env["NCCL_SOCKET_IFNAME"], "lo")
        self.assertEqual((env["NCCL_P2P_DISABLE"], env["NCCL_SHM_DISABLE"]), ("1", "1"))
        self.assertEqual(env["NCCL_DEBUG"], "INFO")
        self.assertEqual(env["NCCL_IB_HCA"], "mlx5_0:1:0")  # not ours: passed through
        self.assertEqual(env["LD_LIBRARY_PATH"], "/x")
        self.assertEqual(env["PATH"], "/usr/bin")

    def test_ranks_differ_only_in_host_id(self):
        e0 = launch.rank_env(self.BASE, "plugin", 0, PLUGIN_PATH, "DQPLB", (2, 24, 3))
        e1 = launch.rank_env(self.BASE, "plugin", 1, PLUGIN_PATH, "DQPLB", (2, 24, 3))
        diff = {k for k in set(e0) | set(e1) if e0.get(k) != e1.get(k)}
        self.assertEqual(diff, {"NCCL_HOSTID"})

    def test_plugin_2_20_name_and_library_path(self):
        env = launch.rank_env(self.BASE, "plugin", 0, PLUGIN_PATH, "DQPLB", (2, 20, 5))
        self.assertEqual(env["NCCL_NET_PLUGIN"], "dqplb")
        self.assertEqual(env["LD_LIBRARY_PATH"], "/opt/dqplb/target/release:/x")

    def test_plugin_2_20_odd_file_name_needs_link_dir(self):
        with self.assertRaisesRegex(ValueError, "libnccl-net-<name>.so or a link_dir"):
            launch.rank_env({}, "plugin", 0, "/p/libnccl_net_dqplb.so", "DQPLB", (2, 20, 5))
        env = launch.rank_env({}, "plugin", 0, "/p/libnccl_net_dqplb.so", "DQPLB", (2, 20, 5), "/o/plugin-link")
        self.assertEqual((env["NCCL_NET_PLUGIN"], env["LD_LIBRARY_PATH"]), ("dqplb", "/o/plugin-link"))

    def test_plugin_too_old_nccl(self):
        with self.assertRaisesRegex(ValueError, r"NCCL 2\.19\.3 does not look up ncclNetPlugin_v8"):
            launch.rank_env({}, "plugin", 0, PLUGIN_PATH, "DQPLB", (2, 19, 3))

    def test_plugin_needs_absolute_path(self):
        with self.assertRaisesRegex(ValueError, "absolute plugin path"):
            launch.rank_env({}, "plugin", 0, "target/release/libnccl-net-dqplb.so", "DQPLB", (2, 21, 5))

    def test_socket_drops_plugin(self):
        env = launch.rank_env(self.BASE, "socket", 0)
        self.assertEqual(env["NCCL_NET"], "Socket")
        self.assertNotIn("NCCL_NET_PLUGIN", env)
        self.assertEqual(env["NCCL_HOSTID"], "dqplb-e2e-host0")

    def test_bad_mode(self):
        with self.assertRaisesRegex(ValueError, "unknown mode 'ib'"):
            launch.rank_env({}, "ib", 0)

    def test_suffix_and_link(self):
        self.assertEqual(launch.plugin_lib_suffix(PLUGIN_PATH), "dqplb")
        self.assertIsNone(launch.plugin_lib_suffix("/x/libnccl_net_dqplb.so"))
        self.assertIsNone(launch.plugin_lib_suffix("/x/libnccl-net-.so"))
        with tempfile.TemporaryDirectory() as d:
            self.assertIsNone(launch.ensure_plugin_link(d, PLUGIN_PATH))
            link_dir = launch.ensure_plugin_link(d, "/x/libnccl_net_dqplb.so")
            self.assertEqual(os.readlink(os.path.join(link_dir, "libnccl-net-dqplb.so")), "/x/libnccl_net_dqplb.so")


class PerfOutput(unittest.TestCase):
    def parse(self, name):
        with open(os.path.join(LOGS, name), encoding="utf-8") as fh:
            return nccl_tests.parse_perf_output(fh.read())

    def test_ok(self):
        out = self.parse("all_reduce_perf-ok.txt")
        self.assertEqual([r.size for r in out.rows], [8, 1024, 67108864, 268435456])
        self.assertEqual(out.rows[2].oop_busbw, 3.2)
        self.assertEqual(out.rows[3].ip_time_us, 83800.0)
        self.assertEqual((out.out_of_bounds, out.avg_busbw, out.validation), (0, 1.6105, 1))
        self.assertEqual(out.verdict(), (True, "4 sizes, avg busbw 1.6105 GB/s"))

    def test_wrong(self):
        out = self.parse("all_reduce_perf-wrong.txt")
        self.assertEqual([(r.oop_wrong, r.ip_wrong) for r in out.rows], [(0, 0), (3, 0), (0, 5)])
        self.assertEqual(out.wrong_lines, ["rank=1 #wrong=3"])
        self.assertEqual(out.verdict(), (False, "wrong results: 8 out of bounds, sizes [1048576, 2097152]"))

    def test_unchecked_run_is_not_ok(self):
        # -c 0: the footer says "0 OK" although nothing was compared.
        out = self.parse("all_reduce_perf-unchecked.txt")
        self.assertEqual((out.out_of_bounds, out.validation), (0, 0))
        self.assertEqual([(r.oop_wrong, r.ip_wrong) for r in out.rows], [(-1, -1), (-1, -1)])
        self.assertEqual(out.verdict(), (False, "results not checked (validation 0, #wrong N/A or -1 at sizes [8, 1024])"))
        # Older nccl-tests print N/A instead of -1; a header without "validation" is judged by the rows.
        with open(os.path.join(LOGS, "all_reduce_perf-unchecked.txt"), encoding="utf-8") as fh:
            text = fh.read().replace("     -1", "    N/A").replace(" validation: 0", "")
        out = nccl_tests.parse_perf_output(text)
        self.assertIsNone(out.validation)
        self.assertEqual(out.verdict(), (False, "results not checked (validation None, #wrong N/A or -1 at sizes [8, 1024])"))

    def test_truncated(self):
        out = self.parse("all_reduce_perf-truncated.txt")
        self.assertEqual(len(out.rows), 2)
        self.assertIsNone(out.rows[0].oop_wrong)
        self.assertEqual(out.verdict(), (False, "no 'Out of bounds values' footer (the run did not finish)"))

    def test_empty(self):
        self.assertEqual(nccl_tests.parse_perf_output("").verdict(),
                         (False, "no result rows in the all_reduce_perf output"))


class Commands(unittest.TestCase):
    def test_gencode(self):
        self.assertEqual(nccl_tests.gencode_for("9.0"), "-gencode=arch=compute_90,code=sm_90")
        self.assertEqual(nccl_tests.gencode_for("10.0"), "-gencode=arch=compute_100,code=sm_100")
        self.assertIsNone(nccl_tests.gencode_for(None))
        self.assertIsNone(nccl_tests.gencode_for("x.y"))

    def test_build_cmd(self):
        cmd = nccl_tests.build_cmd("/src/nccl-tests", "/o/build", "/usr/local/cuda", "/o/nccl_home", "/usr/local/mpi",
                                   "-gencode=arch=compute_90,code=sm_90", 16)
        self.assertEqual(cmd, ["make", "-C", "/src/nccl-tests", "-j16", "MPI=1", "MPI_HOME=/usr/local/mpi",
                               "CUDA_HOME=/usr/local/cuda", "NCCL_HOME=/o/nccl_home", "BUILDDIR=/o/build",
                               "NVCC_GENCODE=-gencode=arch=compute_90,code=sm_90"])

    def test_mpirun_openmpi_as_root(self):
        cmd = nccl_tests.mpirun_cmd("/usr/bin/mpirun", "openmpi", True, "/o/w.sh", "/o/build/all_reduce_perf",
                                    268435456, ["NCCL_NET", "LD_LIBRARY_PATH"])
        self.assertEqual(cmd, ["/usr/bin/mpirun", "-np", "2", "--oversubscribe", "--bind-to", "none",
                               "--allow-run-as-root", "-x", "NCCL_NET", "-x", "LD_LIBRARY_PATH", "/o/w.sh",
                               "/o/build/all_reduce_perf", "-b", "8", "-e", "268435456", "-f", "2", "-g", "1",
                               "-c", "1"])

    def test_mpirun_mpich(self):
        cmd = nccl_tests.mpirun_cmd("mpiexec", "mpich", False, "w.sh", "arp", "1M", ["A", "B"])
        self.assertEqual(cmd, ["mpiexec", "-np", "2", "-envlist", "A,B", "w.sh", "arp", "-b", "8", "-e", "1M",
                               "-f", "2", "-g", "1", "-c", "1"])

    def test_nccl_home_links(self):
        with tempfile.TemporaryDirectory() as d:
            home = nccl_tests.make_nccl_home(os.path.join(d, "h"), "/site/nvidia/nccl/include",
                                             "/site/nvidia/nccl/lib/libnccl.so.2")
            self.assertEqual(os.readlink(os.path.join(home, "include")), "/site/nvidia/nccl/include")
            self.assertEqual(os.readlink(os.path.join(home, "lib", "libnccl.so")), "/site/nvidia/nccl/lib/libnccl.so.2")
            self.assertEqual(os.readlink(os.path.join(home, "lib", "libnccl.so.2")),
                             "/site/nvidia/nccl/lib/libnccl.so.2")

    def test_stage_skips_without_mpi_or_source(self):
        class A:
            src = None
            src_given = False
        st = nccl_tests.run_stage(A(), {"nccl_tests_src": None})
        self.assertEqual(st["status"], "SKIPPED")
        self.assertIn("no nccl-tests source tree", st["reason"])
        st = nccl_tests.run_stage(A(), {"nccl_tests_src": "/src/nccl-tests", "mpi": {}})
        self.assertEqual(st["status"], "SKIPPED")
        self.assertTrue(st["reason"].startswith("no MPI (mpirun + mpi.h)"))


if __name__ == "__main__":
    unittest.main()


class WorkloadWithoutGpu(unittest.TestCase):
    def test_args(self):
        from gpu_e2e import workload

        a = workload.parse_args(["--rank", "1", "--port", "29500", "--results", "/tmp/r.jsonl", "--max-bytes", "64M"])
        self.assertEqual((a.rank, a.world, a.port, a.max_bytes, a.min_bytes), (1, 2, 29500, 64 << 20, 8))
        self.assertEqual(a.ops, "all_reduce,all_gather,reduce_scatter,sendrecv")
        self.assertEqual(a.dtypes, "float32,bfloat16")

    @unittest.skipIf(importlib.util.find_spec("torch") is not None, "torch is installed here")
    def test_failure_is_recorded(self):
        import contextlib
        import io
        import json

        from gpu_e2e import workload

        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "rank0.jsonl")
            with contextlib.redirect_stderr(io.StringIO()):
                rc = workload.main(["--rank", "0", "--port", "1", "--results", path])
            self.assertEqual(rc, 1)
            with open(path) as fh:
                recs = [json.loads(x) for x in fh]
            self.assertEqual(recs, [{"kind": "error", "rank": 0,
                                     "error": "ModuleNotFoundError: No module named 'torch'"}])
