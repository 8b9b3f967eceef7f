"""Bandwidth arithmetic (nccl-tests convention) and the exactness of the workload's value patterns,
checked by simulating each collective in plain Python."""

import unittest

import helpers  # noqa: F401  (puts scripts/ on sys.path)

from gpu_e2e import metrics, patterns


class BusFactors(unittest.TestCase):
    def test_factors_match_nccl_tests(self):
        self.assertEqual(metrics.bus_factor("all_reduce", 2), 1.0)
        self.assertEqual(metrics.bus_factor("all_reduce", 8), 1.75)
        self.assertEqual(metrics.bus_factor("all_gather", 2), 0.5)
        self.assertEqual(metrics.bus_factor("reduce_scatter", 4), 0.75)
        self.assertEqual(metrics.bus_factor("sendrecv", 8), 1.0)

    def test_bad_inputs(self):
        with self.assertRaisesRegex(ValueError, "unknown op 'broadcast'"):
            metrics.bus_factor("broadcast", 2)
        with self.assertRaisesRegex(ValueError, "nranks must be >= 1"):
            metrics.bus_factor("all_reduce", 0)
        with self.assertRaisesRegex(ValueError, "time must be > 0"):
            metrics.bandwidths("all_reduce", 8, 0.0, 2)

    def test_bandwidths(self):
        # 256 MiB all_gather in 0.1 s over 2 ranks: algbw 2.68435456 GB/s, busbw half of it.
        alg, bus = metrics.bandwidths("all_gather", 256 << 20, 0.1, 2)
        self.assertAlmostEqual(alg, 2.68435456, places=12)
        self.assertAlmostEqual(bus, 1.34217728, places=12)
        alg, bus = metrics.bandwidths("all_reduce", 1000000000, 0.5, 4)
        self.assertEqual((alg, bus), (2.0, 3.0))


class Sizes(unittest.TestCase):
    def test_default_sweep(self):
        s = metrics.sizes(8, 256 << 20)
        self.assertEqual(len(s), 26)
        self.assertEqual((s[0], s[1], s[-1]), (8, 16, 256 << 20))

    def test_max_not_power_of_two(self):
        self.assertEqual(metrics.sizes(8, 100), [8, 16, 32, 64])

    def test_bad_bounds(self):
        with self.assertRaisesRegex(ValueError, "min bytes 4 below 8"):
            metrics.sizes(4, 64)
        with self.assertRaisesRegex(ValueError, "max bytes 7 below min bytes 8"):
            metrics.sizes(8, 7)

    def test_parse_bytes(self):
        self.assertEqual(metrics.parse_bytes("8"), 8)
        self.assertEqual(metrics.parse_bytes("64K"), 65536)
        self.assertEqual(metrics.parse_bytes("256M"), 268435456)
        self.assertEqual(metrics.parse_bytes("1g"), 1 << 30)
        self.assertEqual(metrics.parse_bytes("4MiB"), 4 << 20)
        for bad in ("", "M", "1.5M", "-8", "8T"):
            with self.assertRaises(ValueError):
                metrics.parse_bytes(bad)

    def test_element_counts(self):
        self.assertEqual(metrics.element_counts("all_reduce", 8, 4, 2), (2, 2))
        self.assertEqual(metrics.element_counts("all_gather", 8, 4, 2), (1, 2))
        self.assertEqual(metrics.element_counts("reduce_scatter", 8, 2, 2), (4, 2))
        self.assertEqual(metrics.element_counts("sendrecv", 16, 2, 2), (8, 8))
        self.assertIsNone(metrics.element_counts("all_gather", 8, 4, 4))  # 2 elements over 4 ranks
        self.assertIsNone(metrics.element_counts("all_reduce", 6, 4, 2))

    def test_iterations(self):
        self.assertEqual(metrics.iterations(8), 20)
        self.assertEqual(metrics.iterations(4 << 20), 16)
        self.assertEqual(metrics.iterations(64 << 20), 3)
        self.assertEqual(metrics.iterations(256 << 20), 3)
        self.assertEqual(metrics.iterations(8, quick=True), 5)
        self.assertEqual(metrics.iterations(1 << 20, quick=True), 5)
        self.assertEqual(metrics.iterations(4 << 20, quick=True), 2)

    def test_human_bytes(self):
        self.assertEqual([metrics.human_bytes(n) for n in (8, 1024, 3 << 20, 1 << 30, 1536)],
                         ["8 B", "1 KiB", "3 MiB", "1 GiB", "1536 B"])


def simulate(op, world, chunk, total, calls=1):
    """Outputs per rank after `calls` calls of op, computed from the send patterns alone."""
    sends = []
    for r in range(world):
        n_in = chunk if op == "all_gather" else total
        p = patterns.send_pattern(op, r, world, chunk)
        sends.append([p.value(i) for i in range(n_in)])
    if op == "all_reduce":
        buf = sends
        for _ in range(calls):
            s = [sum(col) for col in zip(*buf)]
            buf = [list(s) for _ in range(world)]
        return buf
    if op == "all_gather":
        flat = [v for r in range(world) for v in sends[r]]
        return [list(flat) for _ in range(world)]
    if op == "reduce_scatter":
        s = [sum(col) for col in zip(*sends)]
        return [s[r * chunk:(r + 1) * chunk] for r in range(world)]
    if op == "sendrecv":
        return [sends[patterns.peers(r, world)[1]] for r in range(world)]
    raise ValueError(op)


class Patterns(unittest.TestCase):
    def check(self, op, world, chunk, calls=1):
        total = chunk * world
        outs = simulate(op, world, chunk, total, calls)
        for r in range(world):
            p = patterns.expected_pattern(op, r, world, chunk, calls)
            want = [p.value(i) for i in range(len(outs[r]))]
            self.assertEqual(outs[r], want, "%s world %d chunk %d rank %d" % (op, world, chunk, r))

    def test_every_op_matches_simulation(self):
        for op in ("all_reduce", "all_gather", "reduce_scatter", "sendrecv"):
            for world in (2, 3, 4):
                for chunk in (1, 2, 5, 11, 37):
                    self.check(op, world, chunk)

    def test_repeated_in_place_all_reduce(self):
        for calls in (1, 2, 5, 21):
            self.check("all_reduce", 2, 9, calls)
        self.assertEqual(patterns.expected_pattern("all_reduce", 0, 2, 1, 21).scale, 1 << 20)

    def test_values_exact_in_bfloat16(self):
        # bfloat16 holds every integer up to 256 exactly; scales are powers of two (exact).
        world = 2
        for op in ("all_reduce", "all_gather", "reduce_scatter", "sendrecv"):
            for r in range(world):
                for chunk in (1, 7, 1 << 20):
                    total = chunk * world
                    p_in = patterns.send_pattern(op, r, world, chunk)
                    p_out = patterns.expected_pattern(op, r, world, chunk)
                    n_in = chunk if op == "all_gather" else total
                    n_out = total if op in ("all_gather", "all_reduce", "sendrecv") else chunk
                    self.assertLessEqual(p_in.unscaled_max(n_in), 256, op)
                    self.assertLessEqual(p_out.unscaled_max(n_out), 256, op)

    def test_unscaled_max_is_the_maximum(self):
        p = patterns.expected_pattern("reduce_scatter", 1, 2, 13)
        self.assertEqual(p.unscaled_max(13), max(p.value(i) for i in range(13)))
        p = patterns.expected_pattern("all_gather", 0, 2, 13)
        self.assertEqual(p.unscaled_max(26), max(p.value(i) for i in range(26)))

    def test_ranks_send_distinct_data(self):
        # A transport swapping the two ranks' data must not go unnoticed.
        for op in ("all_gather", "sendrecv", "reduce_scatter"):
            a = patterns.expected_pattern(op, 0, 2, 16)
            b = patterns.expected_pattern(op, 1, 2, 16)
            if op == "all_gather":
                self.assertNotEqual([a.value(i) for i in range(16)], [a.value(i) for i in range(16, 32)])
            else:
                self.assertNotEqual([a.value(i) for i in range(16)], [b.value(i) for i in range(16)])

    def test_bad_arguments(self):
        with self.assertRaisesRegex(ValueError, "unknown op 'gather'"):
            patterns.send_pattern("gather", 0, 2, 1)
        with self.assertRaisesRegex(ValueError, "calls must be >= 1"):
            patterns.expected_pattern("all_reduce", 0, 2, 1, 0)


if __name__ == "__main__":
    unittest.main()
