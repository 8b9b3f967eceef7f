"""Verdicts of the NCCL log parser on sample logs, one per NCCL version variant and failure kind."""

import unittest

from helpers import PLUGIN_PATH, read_log

from gpu_e2e import nccl_log

LIB = "libnccl-net-dqplb.so"


def verdict(name, lib=LIB):
    return nccl_log.parse_log(read_log(name), "DQPLB", lib)


class PluginUsedPerVersion(unittest.TestCase):
    def test_2_20_name_only_line_and_using_network(self):
        rep = verdict("nccl-2.20-plugin-used.log")
        self.assertEqual(rep.verdict, nccl_log.USED)
        self.assertEqual(rep.nccl_version, "2.20.5")
        self.assertEqual(rep.load_evidence, ["Plugin name set by env to libnccl-net-dqplb.so"])
        self.assertEqual(rep.using_network, ["DQPLB"])
        self.assertEqual(len(rep.channels), 4)
        self.assertEqual(sorted({c.direction for c in rep.channels}), ["receive", "send"])

    def test_2_21_full_path_without_loaded_line(self):
        rep = verdict("nccl-2.21-plugin-used.log")
        self.assertEqual(rep.verdict, nccl_log.USED)
        self.assertEqual(rep.load_evidence, ["NET/Plugin: Plugin name set by env to " + PLUGIN_PATH])
        self.assertEqual(len(rep.channels), 6)
        self.assertEqual(rep.channels[0].transport, "NET/DQPLB/0")
        self.assertEqual(rep.channels[-1].transport, "NET/DQPLB/0/Shared")
        self.assertEqual(rep.failures, [])
        self.assertEqual((rep.net_channels, rep.gdr_channels, rep.gdr_used), (6, 0, False))

    def test_2_24_loaded_v8_after_v9_lookup(self):
        rep = verdict("nccl-2.24-plugin-used.log")
        self.assertEqual(rep.verdict, nccl_log.USED)
        self.assertIn("NET/Plugin: Loaded net plugin DQPLB (v8)", rep.load_evidence)
        self.assertEqual(len(rep.load_evidence), 2)
        self.assertEqual(rep.nccl_version, "2.24.3")

    def test_2_27_initialized_and_assigned(self):
        rep = verdict("nccl-2.27-plugin-used.log")
        self.assertEqual(rep.verdict, nccl_log.USED)
        self.assertEqual(rep.load_evidence, [
            "NET/Plugin: Plugin name set by env to " + PLUGIN_PATH,
            "NET/Plugin: Loaded net plugin DQPLB (v8)",
            "Successfully loaded external plugin " + PLUGIN_PATH,
            "Initialized NET plugin DQPLB",
            "Assigned NET plugin DQPLB to comm",
        ])

    def test_2_28_external_network_plugin(self):
        rep = verdict("nccl-2.28-plugin-used.log")
        self.assertEqual(rep.verdict, nccl_log.USED)
        self.assertEqual(rep.nccl_version, "2.28.9")
        self.assertIn("Successfully loaded external network plugin " + PLUGIN_PATH, rep.load_evidence)
        # "NCCL_NET_PLUGIN set by environment" comes before loading: it is no evidence.
        self.assertFalse(any("set by environment" in x for x in rep.load_evidence))

    def test_plugin_name_matches_case_insensitively(self):
        rep = nccl_log.parse_log(read_log("nccl-2.28-plugin-used.log"), "dqplb", LIB)
        self.assertEqual(rep.verdict, nccl_log.USED)


FUTURE_GDR = "nccl-2.28-future-gpudirect.log"


class GpuDirect(unittest.TestCase):
    def test_fixtures_show_what_dqplb_produces(self):
        # DQPLB advertises NCCL_PTR_HOST only: no sample but the labelled future one may show GDR.
        import os
        from helpers import LOGS

        names = sorted(n for n in os.listdir(LOGS) if n.endswith(".log"))
        self.assertIn(FUTURE_GDR, names)
        for name in names:
            if name == FUTURE_GDR:
                continue
            body = [ln for ln in read_log(name).splitlines() if not ln.startswith("#")]
            self.assertEqual([ln for ln in body if "GDRDMA" in ln], [], name)
            rep = verdict(name)
            self.assertEqual(rep.gdr_channels, 0, name)
            self.assertFalse(rep.gdr_used, name)

    def test_future_gpudirect_reported(self):
        self.assertIn("FUTURE GPUDirect case", read_log(FUTURE_GDR))
        rep = verdict(FUTURE_GDR)
        self.assertEqual(rep.verdict, nccl_log.USED)
        self.assertEqual((rep.net_channels, rep.gdr_channels, rep.gdr_used), (6, 5, True))

    def test_channel_gdr_flag(self):
        def gdr(t):
            return nccl_log.Channel(0, "send", t).gdr
        self.assertTrue(gdr("NET/DQPLB/0/GDRDMA"))
        self.assertTrue(gdr("NET/DQPLB/1(3)/GDRDMA/Shared"))
        self.assertTrue(gdr("NET/DQPLB/0/GDRDMA(PCI)/Shared"))
        self.assertFalse(gdr("NET/DQPLB/0"))
        self.assertFalse(gdr("NET/DQPLB/0/Shared"))
        self.assertFalse(gdr("NET/GDRDMA/0"))  # a network named so is not the flag
        self.assertFalse(gdr("P2P/CUMEM/read"))

    def test_socket_channels_counted_for_socket_only(self):
        rep = nccl_log.parse_socket_log(read_log("nccl-2.21-socket-baseline.log"))
        self.assertEqual((rep.net_channels, rep.gdr_channels), (2, 0))
        rep = verdict("nccl-2.21-fell-back-socket.log")
        self.assertEqual((rep.net_channels, rep.gdr_channels), (0, 0))


class Failures(unittest.TestCase):
    def test_fell_back_to_socket(self):
        rep = verdict("nccl-2.21-fell-back-socket.log")
        self.assertEqual(rep.verdict, nccl_log.FELL_BACK)
        self.assertEqual(rep.reason, "NCCL used network Socket instead of DQPLB")
        self.assertEqual(rep.using_network, ["Socket"])

    def test_load_failed_2_24_network_not_found(self):
        rep = verdict("nccl-2.24-load-failed.log")
        self.assertEqual(rep.verdict, nccl_log.LOAD_FAILED)
        self.assertEqual(rep.reason, "Error: network DQPLB not found.")
        self.assertEqual(len(rep.failures), 2)
        self.assertEqual(rep.warnings, ["Error: network DQPLB not found."])

    def test_load_failed_2_28_unsupported(self):
        rep = verdict("nccl-2.28-load-failed.log")
        self.assertEqual(rep.verdict, nccl_log.LOAD_FAILED)
        self.assertEqual(rep.failures, [
            "External network plugin %s is unsupported" % PLUGIN_PATH,
            "Failed to initialize any NET plugin",
        ])

    def test_p2p_is_not_net(self):
        self.assertEqual(verdict("nccl-2.21-p2p-not-net.log").verdict, nccl_log.NOT_NET)

    def test_mixed_transports(self):
        rep = verdict("nccl-2.24-mixed.log")
        self.assertEqual(rep.verdict, nccl_log.MIXED)
        self.assertEqual(rep.reason, "2 channel(s) via NET/DQPLB/0 but 1 via SHM/direct/direct")

    def test_no_nccl_lines(self):
        rep = verdict("no-nccl-lines.log")
        self.assertEqual(rep.verdict, nccl_log.NO_EVIDENCE)
        self.assertIsNone(rep.nccl_version)

    def test_used_without_load_line_is_not_enough(self):
        text = "\n".join(l for l in read_log("nccl-2.24-plugin-used.log").splitlines()
                         if "Loaded net plugin" not in l and "Plugin name set" not in l)
        rep = nccl_log.parse_log(text, "DQPLB", LIB)
        self.assertEqual(rep.verdict, nccl_log.NO_EVIDENCE)
        self.assertEqual(rep.reason, "plugin used but no line shows NCCL loading it by name")

    def test_send_only_is_not_enough(self):
        text = "\n".join(l for l in read_log("nccl-2.28-plugin-used.log").splitlines() if "[receive]" not in l)
        rep = nccl_log.parse_log(text, "DQPLB", LIB)
        self.assertEqual(rep.verdict, nccl_log.NO_EVIDENCE)
        self.assertEqual(rep.reason, "only send channels via the plugin")

    def test_other_plugin_init_failure_is_not_ours(self):
        text = read_log("nccl-2.28-plugin-used.log") + \
            "h:1:1 [0] NCCL INFO Failed to initialize NET plugin IB\n"
        rep = nccl_log.parse_log(text, "DQPLB", LIB)
        self.assertEqual(rep.verdict, nccl_log.USED)
        self.assertEqual(rep.failures, [])

    def test_gin_plugin_line_is_no_net_evidence(self):
        text = "\n".join(l for l in read_log("nccl-2.28-plugin-used.log").splitlines()
                         if "Loaded net plugin" not in l and "NET plugin" not in l and "network plugin" not in l)
        text += "\nh:1:1 [0] NCCL INFO GIN/Plugin: Successfully loaded external plugin %s\n" % PLUGIN_PATH
        rep = nccl_log.parse_log(text, "DQPLB", LIB)
        self.assertEqual(rep.load_evidence, [])
        self.assertEqual(rep.verdict, nccl_log.NO_EVIDENCE)

    def test_wrong_plugin_name_is_not_used(self):
        rep = nccl_log.parse_log(read_log("nccl-2.28-plugin-used.log"), "OTHER", "libnccl-net-other.so")
        self.assertEqual(rep.verdict, nccl_log.FELL_BACK)


class SocketBaseline(unittest.TestCase):
    def test_socket_log_used(self):
        rep = nccl_log.parse_socket_log(read_log("nccl-2.21-socket-baseline.log"))
        self.assertEqual(rep.verdict, nccl_log.USED)
        self.assertEqual(rep.reason, "2 channel(s) via NET/Socket/0; Using network Socket")

    def test_plugin_log_is_not_a_socket_baseline(self):
        rep = nccl_log.parse_socket_log(read_log("nccl-2.24-plugin-used.log"))
        self.assertEqual(rep.verdict, nccl_log.FELL_BACK)
        self.assertEqual(rep.reason, "NCCL used network DQPLB instead of Socket")


class Cli(unittest.TestCase):
    def test_exit_codes(self):
        import contextlib
        import io
        import os
        from helpers import LOGS

        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            good = nccl_log.main(["--lib", PLUGIN_PATH, os.path.join(LOGS, "nccl-2.28-plugin-used.log")])
            bad = nccl_log.main([os.path.join(LOGS, "nccl-2.28-plugin-used.log"),
                                 os.path.join(LOGS, "nccl-2.24-load-failed.log")])
        self.assertEqual((good, bad), (0, 1))
        self.assertEqual(buf.getvalue().count('"verdict": "USED"'), 2)
        self.assertEqual(buf.getvalue().count('"verdict": "LOAD_FAILED"'), 1)
        self.assertEqual(buf.getvalue().count('"gdr": false, "gdr_channels": 0, "net_channels": 4'), 2)


if __name__ == "__main__":
    unittest.main()
