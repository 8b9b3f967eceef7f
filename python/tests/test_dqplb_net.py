"""Tests of the installed dqplb_net package (run by scripts/test-python.sh against a venv with the
wheel installed): plugin_path, enable and force, `python -m dqplb_net path | --version | selftest`,
the `dqplb` console script, the .deb's stamped paths, the self test's byte check."""

import ctypes
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import time
import unittest

import dqplb_net
from dqplb_net import _selftest

PY = sys.executable


def run(*args, env=None, **kw):
    return subprocess.run(
        list(args), stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True,
        env=env, timeout=120, **kw
    )


class Installed(unittest.TestCase):
    def test_imported_from_an_install_not_the_source_tree(self):
        here = os.path.dirname(os.path.abspath(__file__))
        src = os.path.join(os.path.dirname(here), "dqplb_net")
        self.assertNotEqual(os.path.dirname(os.path.abspath(dqplb_net.__file__)), src)
        self.assertIsNotNone(dqplb_net.__version__)

    def test_plugin_path_is_the_bundled_library_and_dlopens(self):
        p = dqplb_net.plugin_path()
        self.assertTrue(os.path.isabs(p), p)
        self.assertEqual(os.path.basename(p), "libnccl-net-dqplb.so")
        self.assertEqual(
            os.path.dirname(p), os.path.join(os.path.dirname(os.path.abspath(dqplb_net.__file__)), "lib")
        )
        lib = ctypes.CDLL(p)
        self.assertTrue(hasattr(lib, "ncclNetPlugin_v8"))

    def test_command_path_is_executable(self):
        self.assertTrue(os.access(dqplb_net.command_path(), os.X_OK))

    def test_m_path_prints_plugin_path(self):
        r = run(PY, "-m", "dqplb_net", "path")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout, dqplb_net.plugin_path() + "\n")

    def test_m_version_is_dqplb_version_without_the_name(self):
        r = run(PY, "-m", "dqplb_net", "--version")
        self.assertEqual(r.returncode, 0, r.stderr)
        b = run(dqplb_net.command_path(), "--version")
        self.assertEqual(b.returncode, 0, b.stderr)
        self.assertEqual("dqplb " + r.stdout, b.stdout)
        self.assertEqual(r.stdout, "{} ({})\n".format(dqplb_net.__version__, dqplb_net.GIT_HASH))

    def test_library_embeds_the_same_version(self):
        with open(dqplb_net.plugin_path(), "rb") as f:
            self.assertIn(dqplb_net.version_string().encode(), f.read())

    def test_console_script_runs_the_bundled_command(self):
        exe = os.path.join(os.path.dirname(PY), "dqplb")
        r = run(exe, "--version")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout, "dqplb {}\n".format(dqplb_net.version_string()))
        # arguments and the exit status pass through: a bad subcommand is clap's exit 2
        r = run(exe, "no-such-command")
        self.assertEqual(r.returncode, 2)
        self.assertIn("no-such-command", r.stderr)

    def test_m_without_command_is_usage_error(self):
        r = run(PY, "-m", "dqplb_net")
        self.assertEqual(r.returncode, 2)
        self.assertIn("a command is required", r.stderr)


class Enable(unittest.TestCase):
    def test_sets_both_variables_in_os_environ(self):
        code = (
            "import os, dqplb_net; r = dqplb_net.enable(); "
            "print(os.environ['NCCL_NET_PLUGIN']); print(os.environ['NCCL_NET']); print(r == "
            "{'NCCL_NET_PLUGIN': dqplb_net.plugin_path(), 'NCCL_NET': 'DQPLB'})"
        )
        env = {k: v for k, v in os.environ.items() if k not in ("NCCL_NET_PLUGIN", "NCCL_NET")}
        r = run(PY, "-c", code, env=env)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout, "{}\nDQPLB\nTrue\n".format(dqplb_net.plugin_path()))

    def test_same_values_and_case_insensitive_net_are_not_conflicts(self):
        env = {"NCCL_NET_PLUGIN": dqplb_net.plugin_path(), "NCCL_NET": "dqplb"}
        dqplb_net.enable(environ=env)
        self.assertEqual(env, {"NCCL_NET_PLUGIN": dqplb_net.plugin_path(), "NCCL_NET": "DQPLB"})

    def test_a_link_to_the_same_library_is_not_a_conflict(self):
        with tempfile.TemporaryDirectory() as d:
            link = os.path.join(d, "libnccl-net-dqplb.so")
            os.symlink(dqplb_net.plugin_path(), link)
            env = {"NCCL_NET_PLUGIN": link}
            dqplb_net.enable(environ=env)
            self.assertEqual(env["NCCL_NET_PLUGIN"], dqplb_net.plugin_path())

    def test_empty_values_count_as_unset(self):
        env = {"NCCL_NET_PLUGIN": "", "NCCL_NET": ""}
        dqplb_net.enable(environ=env)
        self.assertEqual(env["NCCL_NET"], "DQPLB")

    def test_other_plugin_is_refused_and_left_alone(self):
        env = {"NCCL_NET_PLUGIN": "/opt/other/libnccl-net-other.so", "NCCL_NET": "DQPLB"}
        with self.assertRaises(dqplb_net.PluginConflict) as cm:
            dqplb_net.enable(environ=env)
        msg = str(cm.exception)
        self.assertIn("NCCL_NET_PLUGIN='/opt/other/libnccl-net-other.so'", msg)
        self.assertIn(dqplb_net.plugin_path(), msg)
        self.assertIn("force=True", msg)
        self.assertNotIn("NCCL_NET=", msg)
        self.assertEqual(env, {"NCCL_NET_PLUGIN": "/opt/other/libnccl-net-other.so", "NCCL_NET": "DQPLB"})

    def test_other_net_is_refused(self):
        env = {"NCCL_NET": "IB"}
        with self.assertRaises(dqplb_net.PluginConflict) as cm:
            dqplb_net.enable(environ=env)
        self.assertIn("NCCL_NET='IB'", str(cm.exception))
        self.assertEqual(env, {"NCCL_NET": "IB"})
        self.assertTrue(issubclass(dqplb_net.PluginConflict, RuntimeError))

    def test_force_replaces_both(self):
        env = {"NCCL_NET_PLUGIN": "other", "NCCL_NET": "Socket", "KEEP": "1"}
        dqplb_net.enable(force=True, environ=env)
        self.assertEqual(
            env, {"NCCL_NET_PLUGIN": dqplb_net.plugin_path(), "NCCL_NET": "DQPLB", "KEEP": "1"}
        )

    def test_conflict_in_os_environ_raises_in_a_process(self):
        env = dict(os.environ, NCCL_NET_PLUGIN="/x/libnccl-net.so")
        r = run(PY, "-c", "import dqplb_net; dqplb_net.enable()", env=env)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("PluginConflict", r.stderr)
        r = run(PY, "-c", "import os, dqplb_net; dqplb_net.enable(force=True); print(os.environ['NCCL_NET_PLUGIN'])", env=env)
        self.assertEqual(r.stdout, dqplb_net.plugin_path() + "\n", r.stderr)


class DebLayout(unittest.TestCase):
    """The .deb stamps the library's and the command's absolute paths into _build_info.py."""

    def package_copy(self, d, library, command):
        pkg = os.path.join(d, "dqplb_net")
        shutil.copytree(os.path.dirname(os.path.abspath(dqplb_net.__file__)), pkg,
                        ignore=shutil.ignore_patterns("lib", "bin", "__pycache__"))
        with open(os.path.join(pkg, "_build_info.py"), "w") as f:
            f.write('VERSION = "{}"\nGIT_HASH = "{}"\nLIBRARY = {!r}\nCOMMAND = {!r}\n'.format(
                dqplb_net.__version__, dqplb_net.GIT_HASH, library, command))
        return dict(os.environ, PYTHONPATH=d)

    def test_stamped_library_path_is_used(self):
        with tempfile.TemporaryDirectory() as d:
            lib = os.path.join(d, "usr-lib", "libnccl-net-dqplb.so")
            os.makedirs(os.path.dirname(lib))
            shutil.copy(dqplb_net.plugin_path(), lib)
            env = self.package_copy(d, lib, dqplb_net.command_path())
            r = run(PY, "-m", "dqplb_net", "path", env=env, cwd="/")
            self.assertEqual((r.returncode, r.stdout), (0, lib + "\n"), r.stderr)

    def test_missing_stamped_library_is_a_clear_error(self):
        with tempfile.TemporaryDirectory() as d:
            lib = os.path.join(d, "nowhere", "libnccl-net-dqplb.so")
            env = self.package_copy(d, lib, None)
            r = run(PY, "-m", "dqplb_net", "path", env=env, cwd="/")
            self.assertEqual(r.returncode, 1)
            self.assertIn("the plugin library {} (stamped into".format(lib), r.stderr)
            r = run(PY, "-c", "import dqplb_net; dqplb_net.enable()", env=env, cwd="/")
            self.assertIn("FileNotFoundError", r.stderr)


class SelfTest(unittest.TestCase):
    def test_selftest_passes_and_reports(self):
        r = run(PY, "-m", "dqplb_net", "selftest", "--bytes", "1M", "--iters", "3", "--timeout", "60")
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("selftest: plugin {} (config:".format(dqplb_net.version_string()), r.stdout)
        self.assertIn("selftest: 3 x 1048576 bytes sent, received and byte-checked in", r.stdout)
        self.assertTrue(r.stdout.splitlines()[-1].startswith("selftest: ok ("), r.stdout)

    def test_plugin_init_failure_fails_the_selftest(self):
        env = dict(os.environ, NCCL_DQPLB_ENGINE_SEGMENT_BYTES="5")
        r = run(PY, "-m", "dqplb_net", "selftest", "--timeout", "30", env=env)
        self.assertEqual(r.returncode, 1, r.stdout)
        self.assertIn("init returned ncclInvalidArgument (4)", r.stderr)
        self.assertIn("selftest: FAILED:", r.stdout)
        self.assertNotIn("selftest: ok", r.stdout)

    def test_a_failing_process_ends_the_selftest_at_once(self):
        # the plugin's debug hook makes connect() panic in the sender (caught at its C boundary)
        env = dict(os.environ, NCCL_DQPLB_DEBUG_PANIC="connect", RUST_BACKTRACE="0")
        t0 = time.monotonic()
        r = run(PY, "-m", "dqplb_net", "selftest", "--timeout", "60", env=env)
        self.assertEqual(r.returncode, 1, r.stdout)
        self.assertIn("selftest[send]: connect returned ncclInternalError (3)", r.stderr)
        self.assertIn("selftest: FAILED: the send process failed (exit 1)", r.stdout)
        # the receiver, waiting in accept(), is ended, not left to the 60 s limit
        self.assertLess(time.monotonic() - t0, 30)

    def test_missing_library_fails_the_selftest(self):
        r = run(PY, "-m", "dqplb_net", "selftest", "--library", "/nonexistent/libnccl-net-dqplb.so")
        self.assertEqual(r.returncode, 1)
        self.assertIn("selftest: FAILED: /nonexistent/libnccl-net-dqplb.so does not exist", r.stdout)

    def test_time_limit_fails_the_selftest(self):
        r = run(PY, "-m", "dqplb_net", "selftest", "--timeout", "0.01")
        self.assertEqual(r.returncode, 1)
        self.assertIn("selftest: FAILED: no result within --timeout 0.01 s", r.stdout)

    def test_pattern_words_are_distinct_counters_salted_per_message(self):
        p = _selftest.pattern(16, 1)
        self.assertEqual(struct.unpack("<4I", p), (0x01000193, 0x01000194, 0x01000195, 0x01000196))
        self.assertEqual(len(_selftest.pattern(7, 2)), 7)
        self.assertEqual(_selftest.pattern(7, 2), _selftest.pattern(8, 2)[:7])
        self.assertNotEqual(_selftest.pattern(64, 1), _selftest.pattern(64, 2))

    def test_counter_wraps_to_zero(self):
        got = struct.unpack("<4I", _selftest.counter_bytes(16, (1 << 32) - 2))
        self.assertEqual(got, ((1 << 32) - 2, (1 << 32) - 1, 0, 1))

    def test_first_mismatch_finds_the_first_wrong_byte(self):
        good = _selftest.pattern(1 << 20, 1)
        self.assertIsNone(_selftest.first_mismatch(good, good))
        bad = bytearray(good)
        bad[777777] ^= 0xFF
        bad[900000] ^= 0x01
        self.assertEqual(_selftest.first_mismatch(good, bytes(bad)), (777777, good[777777], bad[777777]))
        self.assertEqual(_selftest.first_mismatch(good, good[:1000]), (1000, None, None))
        # a segment in the wrong place: same bytes, other offset
        moved = good[:4096] + good[8192:12288] + good[4096:8192] + good[12288:]
        # the first word of the moved segment differs (its low byte may not: counters 1024 apart)
        self.assertIn(_selftest.first_mismatch(good, moved)[0], range(4096, 4100))


if __name__ == "__main__":
    unittest.main()
