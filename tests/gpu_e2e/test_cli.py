"""scripts/gpu-e2e.sh argument handling, --check-env, the plugin/preflight exits, and the plugin
probe of check_env against a small shared library built here (skipped without a C compiler)."""

import importlib.util
import json
import os
import shutil
import subprocess
import tempfile
import unittest

from helpers import CC, NO_CC, REPO, SCRIPT, SOCKET_LIKE, V8_ENTRY_POINTS, build_stub_plugin

from gpu_e2e import check_env


def run(*args, env=None):
    return subprocess.run(["bash", SCRIPT, *args], capture_output=True, text=True, timeout=300, cwd=REPO, env=env)


HAVE_SMI = shutil.which("nvidia-smi") is not None
HAVE_TORCH = importlib.util.find_spec("torch") is not None


class Arguments(unittest.TestCase):
    def test_help(self):
        p = run("--help")
        self.assertEqual(p.returncode, 0)
        for opt in ("--out DIR", "--plugin PATH", "--max-bytes N", "--quick", "--skip-socket", "--skip-nccl-tests",
                    "--nccl-tests-dir DIR", "--enforce-ratio", "--check-env", "-h, --help"):
            self.assertIn(opt, p.stdout)
        self.assertIn("Exit codes: 0 pass; 1", p.stdout)
        self.assertEqual(run("-h").stdout, p.stdout)

    def test_unknown_option(self):
        p = run("--bogus")
        self.assertEqual(p.returncode, 2)
        self.assertIn("unknown option '--bogus'", p.stderr)
        self.assertEqual(p.stdout, "")

    def test_positional_argument_rejected(self):
        p = run("extra")
        self.assertEqual(p.returncode, 2)
        self.assertIn("unknown option 'extra'", p.stderr)

    def test_missing_values(self):
        for opt in ("--out", "--plugin", "--max-bytes", "--nccl-tests-dir"):
            p = run(opt)
            self.assertEqual(p.returncode, 2, opt)
            self.assertIn("option %s needs a value" % opt, p.stderr)
        p = run("--out", "--quick")
        self.assertEqual(p.returncode, 2)
        self.assertIn("option --out needs a value", p.stderr)
        p = run("--out=")
        self.assertEqual(p.returncode, 2)
        self.assertIn("option --out needs a value", p.stderr)

    def test_bad_max_bytes(self):
        for bad, msg in (("abc", "not a byte size: 'abc'"), ("1.5M", "not a byte size: '1.5M'"),
                         ("4", "4 is below the smallest size, 8 bytes"), ("8G", "8G is above 4G"),
                         ("99999999999999", "not a byte size")):
            p = run("--max-bytes", bad)
            self.assertEqual(p.returncode, 2, bad)
            self.assertIn(msg, p.stderr)
        p = run("--max-bytes=0")
        self.assertEqual(p.returncode, 2)

    def test_bad_nccl_tests_dir(self):
        p = run("--nccl-tests-dir", "/nonexistent/nccl-tests")
        self.assertEqual(p.returncode, 2)
        self.assertIn("no such folder: /nonexistent/nccl-tests", p.stderr)


class Environment(unittest.TestCase):
    def test_check_env_reports_and_exits(self):
        p = run("--check-env", "--plugin", "/nonexistent/libnccl-net-dqplb.so")
        self.assertEqual(p.returncode, 3, p.stdout + p.stderr)  # the plugin alone is missing everywhere
        self.assertIn("[MISS] plugin: /nonexistent/libnccl-net-dqplb.so absent", p.stdout)
        self.assertIn("[ OK ] loopback", p.stdout)
        if not HAVE_SMI:
            self.assertIn("[MISS] nvidia-smi: not on PATH", p.stdout)
        if not HAVE_TORCH:
            self.assertIn("[MISS] torch: import torch failed: ModuleNotFoundError", p.stdout)
        last = p.stdout.strip().splitlines()[-1]
        self.assertTrue(last.startswith("check-env: MISSING "), last)
        self.assertTrue(last.endswith("-> exit 3"), last)

    @unittest.skipIf(HAVE_SMI and HAVE_TORCH, "this machine has nvidia-smi and torch")
    def test_check_env_default_plugin_here(self):
        p = run("--check-env")
        self.assertEqual(p.returncode, 3)
        self.assertIn("check-env: MISSING", p.stdout)

    def test_missing_plugin_exits_4(self):
        with tempfile.TemporaryDirectory() as d:
            p = run("--plugin", os.path.join(d, "libnccl-net-dqplb.so"), "--out", os.path.join(d, "out"))
            self.assertEqual(p.returncode, 4, p.stderr)
            self.assertIn("plugin library %s not found" % os.path.join(d, "libnccl-net-dqplb.so"), p.stderr)

    def test_preflight_failure_exits_3_and_keeps_report(self):
        with tempfile.TemporaryDirectory() as d:
            plugin = os.path.join(d, "libnccl-net-dqplb.so")
            open(plugin, "w").close()  # not a shared library: dlopen fails on every machine
            out = os.path.join(d, "out")
            p = run("--plugin", plugin, "--out", out)
            self.assertEqual(p.returncode, 3, p.stdout + p.stderr)
            self.assertIn("required items missing", p.stderr)
            with open(os.path.join(out, "env.json")) as fh:
                env = json.load(fh)
            self.assertIn("plugin", env["missing"])
            with open(os.path.join(out, "check-env.txt")) as fh:
                self.assertIn("[MISS] plugin: %s: dlopen failed" % plugin, fh.read())
            self.assertFalse(os.path.exists(os.path.join(out, "plugin")))


REQUIRED = ("init", "devices", "getProperties", "listen", "connect", "accept", "regMr", "deregMr", "isend", "irecv",
            "iflush", "test", "closeSend", "closeRecv", "closeListen")


@unittest.skipUnless(CC, NO_CC)
class PluginProbe(unittest.TestCase):
    """check_env's probe reads ncclNetPlugin_v8 from real shared libraries built here with cc."""

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="gpu-e2e-probe-")

    def tearDown(self):
        shutil.rmtree(self.dir)

    def probe(self, **build):
        lib = build_stub_plugin(self.dir, **build)

        class A:
            plugin = lib
            plugin_name = "DQPLB"
            python = "/nonexistent/python3"  # torch probe fails fast and is reported, not raised
            nccl_tests_dir = None
            can_build = False
        rep, env = check_env.check(A())
        lines = [ln for ln in rep.lines if ln[7:].startswith("plugin")]
        return lib, lines, env

    def test_struct_matches_ncclNet_v8(self):
        self.assertEqual(check_env.V8_FIELDS, V8_ENTRY_POINTS)
        self.assertEqual(check_env.REQUIRED_V8, REQUIRED)

    def test_complete_host_plugin_ok(self):
        lib, lines, env = self.probe()
        self.assertEqual(lines, ["[ OK ] plugin: %s exports ncclNetPlugin_v8 named 'DQPLB', every entry point NCCL "
                                 "calls is set" % lib])
        self.assertEqual(env["plugin"]["probe"], {"symbols": {"ncclNetPlugin_v8": "DQPLB"},
                                                  "v8_null": ["regMrDmaBuf", "getDeviceMr", "irecvConsumed"]})
        self.assertNotIn("plugin", env["missing"])
        self.assertIn("torch", env["missing"])

    def test_null_vtable_refused(self):
        lib, lines, env = self.probe(set_fields=())
        self.assertEqual(lines, ["[MISS] plugin: %s: ncclNetPlugin_v8 'DQPLB' has NULL entry points NCCL calls "
                                 "unchecked: %s" % (lib, ", ".join(REQUIRED))])
        self.assertEqual(env["plugin"]["probe"]["v8_null"], list(V8_ENTRY_POINTS))
        self.assertIn("plugin", env["missing"])

    def test_each_required_entry_point_null_refused(self):
        # Also pins the field order: the one NULL field is reported under its own name.
        optional_null = ["regMrDmaBuf", "getDeviceMr", "irecvConsumed"]
        for f in REQUIRED:
            lib, lines, env = self.probe(set_fields=[x for x in SOCKET_LIKE if x != f])
            self.assertEqual(lines, ["[MISS] plugin: %s: ncclNetPlugin_v8 'DQPLB' has NULL entry points NCCL calls "
                                     "unchecked: %s" % (lib, f)], f)
            self.assertEqual(env["plugin"]["probe"]["v8_null"],
                             [x for x in V8_ENTRY_POINTS if x == f or x in optional_null], f)
            self.assertIn("plugin", env["missing"], f)

    def test_dmabuf_entry_point_optional(self):
        lib, lines, env = self.probe(set_fields=SOCKET_LIKE + ("regMrDmaBuf",))
        self.assertEqual(env["plugin"]["probe"]["v8_null"], ["getDeviceMr", "irecvConsumed"])
        self.assertTrue(lines[0].startswith("[ OK ] plugin:"), lines)
        self.assertEqual(len(lines), 1)

    def test_get_device_mr_set_only_warns(self):
        lib, lines, env = self.probe(set_fields=SOCKET_LIKE + ("getDeviceMr",))
        self.assertEqual(env["plugin"]["probe"]["v8_null"], ["regMrDmaBuf", "irecvConsumed"])
        self.assertEqual(lines[1:], ["[warn] plugin getDeviceMr: set, but NCCL never calls it for a host-offload "
                                     "(netDeviceType HOST) plugin (optional)"])
        self.assertTrue(lines[0].startswith("[ OK ] plugin:"), lines)
        self.assertNotIn("plugin", env["missing"])

    def test_irecv_consumed_set_refused(self):
        # Every entry point set, as DQPLB's vtable had it: NCCL would call irecvConsumed per receive.
        lib, lines, env = self.probe(set_fields=V8_ENTRY_POINTS)
        self.assertEqual(env["plugin"]["probe"]["v8_null"], [])
        self.assertEqual(lines, ["[MISS] plugin: %s: ncclNetPlugin_v8 'DQPLB' sets irecvConsumed: NCCL calls it "
                                 "after every consumed receive whatever the device type, a host-offload plugin must "
                                 "leave it NULL" % lib])
        self.assertIn("plugin", env["missing"])

    def test_wrong_name(self):
        _, lines, _ = self.probe(name="OTHER")
        self.assertEqual(len(lines), 1)
        self.assertTrue(lines[0].startswith("[MISS] plugin:"), lines)
        self.assertIn("calls itself 'OTHER', expected 'DQPLB'", lines[0])

    def test_no_symbol(self):
        lib, lines, env = self.probe(symbol=False)
        self.assertEqual(lines, ["[MISS] plugin: %s exports no ncclNetPlugin_v8 with a name" % lib])
        self.assertEqual(env["plugin"]["probe"], {"symbols": {}})


if __name__ == "__main__":
    unittest.main()
