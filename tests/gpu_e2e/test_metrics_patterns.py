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


OPS = ("all_reduce", "all_gather", "reduce_scatter", "sendrecv")


def simulate(op, world, chunk, it):
    """Outputs per rank of one call of op in iteration `it`, computed from the send values alone
    with each collective's own semantics (concatenate, sum, scatter, ring)."""
    total = chunk * world
    n_in = chunk if op == "all_gather" else total
    sends = [[patterns.send_value(op, r, world, chunk, it, i) for i in range(n_in)] for r in range(world)]
    if op == "all_reduce":
        s = [sum(col) for col in zip(*sends)]
        return [list(s) for _ in range(world)]
    if op == "all_gather":
        flat = [v for r in range(world) for v in sends[r]]
        return [list(flat) for _ in range(world)]
    if op == "reduce_scatter":
        s = [sum(col) for col in zip(*sends)]
        return [s[r * chunk:(r + 1) * chunk] for r in range(world)]
    if op == "sendrecv":
        return [sends[patterns.peers(r, world)[1]] for r in range(world)]
    raise ValueError(op)


def expected(op, rank, world, chunk, it, n):
    return [patterns.expected_value(op, rank, world, chunk, it, j) for j in range(n)]


class Patterns(unittest.TestCase):
    def test_every_op_matches_simulation(self):
        for op in OPS:
            for world in (2, 3, 4):
                for chunk in (1, 2, 5, 11, 37, 300):
                    for it in (0, 1, 7, 20):
                        outs = simulate(op, world, chunk, it)
                        for r in range(world):
                            self.assertEqual(outs[r], expected(op, r, world, chunk, it, len(outs[r])),
                                             "%s world %d chunk %d it %d rank %d" % (op, world, chunk, it, r))

    def test_modulus(self):
        self.assertEqual([patterns.modulus(w) for w in (1, 2, 3, 4, 8)], [251, 127, 83, 61, 31])
        with self.assertRaisesRegex(ValueError, "world must be >= 1"):
            patterns.modulus(0)

    def test_values_exact_in_bfloat16(self):
        # bfloat16 holds every integer up to 256 exactly: every input and every sum stays within.
        for world in (2, 3, 4):
            m = patterns.modulus(world)
            self.assertLessEqual(world * m, 256)
            for op in OPS:
                for r in range(world):
                    for it in (0, 1, 20):
                        outs = expected(op, r, world, 64, it, 64 * world if op != "reduce_scatter" else 64)
                        self.assertGreaterEqual(min(outs), 1)
                        self.assertLessEqual(max(outs), 256, op)

    def test_every_iteration_differs_everywhere(self):
        # A stale output (an earlier iteration's result) mismatches at every element, for every op:
        # the workload runs at most 21 iterations (warm-up + 20).
        for world in (2, 4):
            for op in OPS:
                for r in range(world):
                    n = 300 * world if op != "reduce_scatter" else 300
                    outs = [expected(op, r, world, 300, it, n) for it in range(21)]
                    for t in range(21):
                        for u in range(t):
                            same = sum(1 for a, b in zip(outs[t], outs[u]) if a == b)
                            self.assertEqual(same, 0, "%s world %d rank %d: iterations %d and %d" % (op, world, r, u, t))

    def test_inputs_depend_on_rank_iteration_and_index(self):
        for op in OPS:
            a = [patterns.send_value(op, 0, 2, 16, 3, i) for i in range(300)]
            b = [patterns.send_value(op, 1, 2, 16, 3, i) for i in range(300)]
            c = [patterns.send_value(op, 0, 2, 16, 4, i) for i in range(300)]
            self.assertTrue(all(x != y for x, y in zip(a, b)), op)  # ranks differ everywhere
            self.assertTrue(all(x != y for x, y in zip(a, c)), op)  # iterations differ everywhere
            self.assertTrue(all(x != y for x, y in zip(a, a[1:])), op)  # neighbours differ
            self.assertNotEqual(a[:127], a[127:254], op)  # no period of m elements

    def test_ranks_see_distinct_data(self):
        # A transport swapping the two ranks' data must not go unnoticed.
        for op in ("all_gather", "sendrecv", "reduce_scatter"):
            a = expected(op, 0, 2, 16, 1, 32 if op == "all_gather" else 16)
            b = expected(op, 1, 2, 16, 1, 32 if op == "all_gather" else 16)
            if op == "all_gather":
                self.assertTrue(all(x != y for x, y in zip(a[:16], a[16:])))
            else:
                self.assertTrue(all(x != y for x, y in zip(a, b)), op)

    def test_bad_arguments(self):
        with self.assertRaisesRegex(ValueError, "unknown op 'gather'"):
            patterns.send_value("gather", 0, 2, 1, 0, 0)
        with self.assertRaisesRegex(ValueError, "unknown op 'gather'"):
            patterns.expected_value("gather", 0, 2, 1, 0, 0)


if __name__ == "__main__":
    unittest.main()
