"""`python -m dqplb_net selftest`: loads the plugin library as NCCL does (dlopen, ncclNetPlugin_v8),
then moves byte-checked messages between two processes through the vtable over TCP on loopback.

The parent starts a receiver process (init, devices, listen; prints the 128-byte handle), passes
the handle to a sender process (connect) and waits for both within the time limit. Each message
is a 32-bit counter pattern (every 4-byte word distinct, so a misplaced segment shows), salted
per message; the receiver zeroes its buffer before each irecv and compares every byte.
"""

import argparse
import array
import ctypes
import os
import queue
import re
import subprocess
import sys
import threading
import time

from . import _vtable

#: The environment each process runs with: the TCP transport on the loopback interface (the
#: selftest needs no RDMA device), INFO logging so the init line naming the version is seen.
CHILD_ENV = {
    "NCCL_DQPLB_FABRIC_TRANSPORT": "tcp",
    "NCCL_SOCKET_IFNAME": "lo",
    "NCCL_DEBUG": "INFO",
    "NCCL_DQPLB_LOG_LEVEL": "info",
}
#: Removed from the children's environment: the alias would conflict with the transport above.
CHILD_UNSET = ("NCCL_DQPLB_TRANSPORT",)

#: The plugin's init INFO line: "NET/DQPLB : dqplb-net 0.1.0 (<hash>); config <source>; policy ...".
_INIT_LINE = re.compile(r"NET/DQPLB : dqplb-net (\S+ \([^)]*\)); config (.*?); policy ")


def counter_bytes(nbytes, first):
    """`nbytes` of little-endian 32-bit words first, first + 1, ... (mod 2**32)."""
    words = (nbytes + 3) // 4
    wrap = min(words, (1 << 32) - first)  # words before the counter wraps to 0
    a = array.array("I", range(first, first + wrap))
    a.extend(range(0, words - wrap))
    if sys.byteorder != "little":
        a.byteswap()
    return a.tobytes()[:nbytes]


def pattern(nbytes, salt):
    """Message `salt`'s bytes: the word counter from salt * 0x01000193 (mod 2**32)."""
    return counter_bytes(nbytes, (salt * 0x01000193) & 0xFFFFFFFF)


def first_mismatch(expected, got):
    """None when equal, else (offset, expected byte, received byte) of the first difference
    (offset len(...) of the shorter one when only the lengths differ)."""
    if expected == got:
        return None
    n = min(len(expected), len(got))
    lo, hi = 0, n
    # bisect on slice equality: C-speed compares instead of a Python loop over every byte
    while hi - lo > 64:
        mid = (lo + hi) // 2
        if expected[lo:mid] != got[lo:mid]:
            hi = mid
        else:
            lo = mid
    for i in range(lo, hi):
        if expected[i] != got[i]:
            return i, expected[i], got[i]
    return n, None, None


# ---- the two processes ----------------------------------------------------------------------


class _Peer:
    def __init__(self, role, library, deadline):
        self.role = role
        self.deadline = deadline
        self.init_line = None
        self.verbose = os.environ.get("DQPLB_SELFTEST_VERBOSE") == "1"
        self.net = _vtable.Net(library)
        # kept referenced for as long as the plugin may call it (the process ends with os._exit)
        self.logger = _vtable.Logger(self._log)

    def _log(self, level, _flags, _file, _line, fmt, arg):
        if fmt != b"%s" or arg is None:
            return
        msg = arg.decode("utf-8", "replace")
        m = _INIT_LINE.search(msg)
        if m and self.init_line is None:
            self.init_line = m
        if level <= 2 or self.verbose:  # NCCL_LOG_WARN = 2
            sys.stderr.write("selftest[{}]: plugin: {}\n".format(self.role, msg))
            sys.stderr.flush()

    def say(self, key, *words):
        sys.stdout.write(" ".join([key] + [str(w) for w in words]) + "\n")
        sys.stdout.flush()

    def until(self, what, fn):
        """Calls fn until it returns something other than None, within the deadline."""
        while True:
            r = fn()
            if r is not None:
                return r
            if time.monotonic() > self.deadline:
                raise _vtable.NetError("{}: not complete within the time limit".format(what))
            time.sleep(0.0001)

    def start(self):
        self.net.init(self.logger)
        ndev = self.net.devices()
        if ndev < 1:
            raise _vtable.NetError("devices() reports {} devices on NCCL_SOCKET_IFNAME=lo".format(ndev))
        p = self.net.properties(0)
        if not p.ptrSupport & _vtable.PTR_HOST:
            raise _vtable.NetError("device 0 does not support host memory (ptrSupport {})".format(p.ptrSupport))
        if self.init_line is not None:
            self.say("INIT", self.init_line.group(1), "|", self.init_line.group(2))
        self.say("DEVICE", (p.name or b"?").decode("utf-8", "replace"), p.speed)


def _receiver(p, nbytes, iters):
    net = p.net
    handle, lcomm = net.listen(0)
    p.say("HANDLE", handle.hex())
    rcomm = p.until("accept", lambda: net.accept(lcomm))
    buf = ctypes.create_string_buffer(nbytes)
    mh = net.reg_mr(rcomm, buf)
    expect = [pattern(nbytes, 1), pattern(nbytes, 2)]
    t0 = None
    for it in range(iters + 1):  # message 0 is the untimed warm-up
        ctypes.memset(buf, 0, nbytes)
        req = p.until("irecv of message {}".format(it), lambda: net.irecv(rcomm, buf, nbytes, mh))
        got = p.until("message {}".format(it), lambda: net.test(req))
        if got != nbytes:
            raise _vtable.NetError("message {}: test() reports {} bytes, sent {}".format(it, got, nbytes))
        bad = first_mismatch(expect[it % 2], ctypes.string_at(buf, nbytes))
        if bad is not None:
            raise _vtable.NetError(
                "message {}: byte {} is {:#04x}, sent {:#04x}".format(it, bad[0], bad[2], bad[1])
            )
        if t0 is None:
            t0 = time.perf_counter()
    secs = time.perf_counter() - t0
    net.dereg_mr(rcomm, mh)
    net.close("closeRecv", rcomm)
    net.close("closeListen", lcomm)
    p.say("RESULT", nbytes * iters, "%.6f" % secs)


def _sender(p, nbytes, iters):
    net = p.net
    line = sys.stdin.readline().split()
    if len(line) != 2 or line[0] != "HANDLE":
        raise _vtable.NetError("expected 'HANDLE <hex>' on stdin, got {!r}".format(" ".join(line)))
    handle = bytes.fromhex(line[1])
    scomm = p.until("connect", lambda: net.connect(0, handle))
    buf = ctypes.create_string_buffer(nbytes)
    mh = net.reg_mr(scomm, buf)
    data = [pattern(nbytes, 1), pattern(nbytes, 2)]
    for it in range(iters + 1):
        ctypes.memmove(buf, data[it % 2], nbytes)
        req = p.until("isend of message {}".format(it), lambda: net.isend(scomm, buf, nbytes, mh))
        got = p.until("send of message {}".format(it), lambda: net.test(req))
        if got != nbytes:
            raise _vtable.NetError("message {}: test() reports {} bytes sent, posted {}".format(it, got, nbytes))
    net.dereg_mr(scomm, mh)
    net.close("closeSend", scomm)
    p.say("SENT", nbytes * (iters + 1))


def peer_main(argv):
    """python -m dqplb_net._selftest {recv|send} LIBRARY BYTES ITERS SECONDS"""
    role, library, nbytes, iters, secs = argv[0], argv[1], int(argv[2]), int(argv[3]), float(argv[4])
    rc = 1
    try:
        p = _Peer(role, library, time.monotonic() + secs)
        p.start()
        (_receiver if role == "recv" else _sender)(p, nbytes, iters)
        rc = 0
    except _vtable.NetError as e:
        sys.stderr.write("selftest[{}]: {}\n".format(role, e))
    except Exception as e:  # anything else is reported the same way: one line, non-zero exit
        sys.stderr.write("selftest[{}]: {}: {}\n".format(role, type(e).__name__, e))
    sys.stdout.flush()
    sys.stderr.flush()
    # No interpreter shutdown: the plugin's threads may still hold the logger callback.
    os._exit(rc)


# ---- the parent ----------------------------------------------------------------------------


def _reader(proc, q, name):
    for line in proc.stdout:
        q.put((name, line.rstrip("\n")))
    q.put((name, None))


def _size(text):
    m = re.fullmatch(r"(\d+)([KMG]?)", text.strip().upper())
    if not m:
        raise argparse.ArgumentTypeError("{!r}: a byte count, e.g. 4194304, 512K, 4M".format(text))
    n = int(m.group(1)) * {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}[m.group(2)]
    if not 1 <= n <= (1 << 31) - 1:
        raise argparse.ArgumentTypeError("{!r}: 1 byte .. 2 GiB - 1 (isend takes an int size)".format(text))
    return n


def say(text):
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def add_arguments(ap):
    ap.add_argument("--bytes", type=_size, default=4 << 20, help="bytes per message (default 4M)")
    ap.add_argument("--iters", type=int, default=8, help="timed messages after one warm-up (default 8)")
    ap.add_argument("--timeout", type=float, default=60.0, help="seconds for the whole test (default 60)")
    ap.add_argument("--library", help="the plugin library to test (default: dqplb_net.plugin_path())")


def run(args, library, expect_version):
    """The selftest; returns the exit status (0 ok, 1 failed) after printing the result."""
    if args.iters < 1:
        say("selftest: --iters must be at least 1", file=sys.stderr)
        return 2
    library = os.path.abspath(library)
    env = dict(os.environ)
    env.update(CHILD_ENV)
    for k in CHILD_UNSET:
        env.pop(k, None)
    # the children import this very package, wherever it was imported from
    pkg_parent = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env["PYTHONPATH"] = os.pathsep.join([pkg_parent] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    t_start = time.monotonic()
    deadline = t_start + args.timeout
    cmd = [sys.executable, "-m", "dqplb_net._selftest"]
    tail = [library, str(args.bytes), str(args.iters), str(args.timeout)]
    say("selftest: library {}".format(library))
    if not os.path.isfile(library):
        say("selftest: FAILED: {} does not exist".format(library))
        return 1
    q = queue.Queue()
    procs = {}
    killed = set()
    failures = []
    lines = {"recv": {}, "send": {}}
    try:
        for role in ("recv", "send"):
            procs[role] = subprocess.Popen(
                cmd + [role] + tail,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                env=env,
                universal_newlines=True,
            )
            threading.Thread(target=_reader, args=(procs[role], q, role), daemon=True).start()
        open_streams = 2
        while open_streams:
            try:
                role, line = q.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                failures.append("no result within --timeout {} s".format(args.timeout))
                break
            if line is not None:
                key, _, rest = line.partition(" ")
                lines[role][key] = rest
                if role == "recv" and key == "HANDLE":
                    try:
                        procs["send"].stdin.write(line + "\n")
                        procs["send"].stdin.flush()
                    except OSError:
                        pass  # the sender has already ended: its exit status says why
                continue
            open_streams -= 1
            rc = procs[role].wait(timeout=max(0.1, deadline - time.monotonic()))
            if rc != 0:
                # the other side would wait for its peer until the deadline: end it now
                failures.append("the {} process failed (exit {})".format(role, rc))
                break
            if role == "recv" and "HANDLE" not in lines["recv"]:
                break
    except subprocess.TimeoutExpired:
        failures.append("no result within --timeout {} s".format(args.timeout))
    finally:
        for role, p in procs.items():
            if failures and p.poll() is None:
                p.kill()
                killed.add(role)
            try:
                p.stdin.close()
            except OSError:
                pass
            try:
                p.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
                failures.append("the {} process did not exit in time (killed)".format(role))
            if p.returncode != 0 and role not in killed and not any(role + " process" in f for f in failures):
                failures.append("the {} process failed (exit {})".format(role, p.returncode))
    r = lines["recv"]
    if "INIT" in r:
        version, _, source = r["INIT"].partition(" | ")
        say("selftest: plugin {} (config: {})".format(version, source))
        if expect_version and version != expect_version:
            failures.append("the library reports version {}, the package is {}".format(version, expect_version))
    elif not failures:
        say("selftest: note: the plugin's init line (version) was not seen")
    if "DEVICE" in r:
        name, _, speed = r["DEVICE"].rpartition(" ")
        say("selftest: device 0 '{}' ({} Mbps), TCP transport on loopback".format(name, speed))
    if "RESULT" in r and not failures:
        total, secs = r["RESULT"].split()
        total, secs = int(total), float(secs)
        say(
            "selftest: {} x {} bytes sent, received and byte-checked in {:.4f} s: {:.2f} GB/s".format(
                args.iters, args.bytes, secs, total / secs / 1e9 if secs > 0 else float("inf")
            )
        )
    elif not failures:
        failures.append("the receiver reported no result")
    if failures:
        say("selftest: FAILED: {}".format("; ".join(failures)))
        return 1
    say("selftest: ok ({:.1f} s)".format(time.monotonic() - t_start))
    return 0


if __name__ == "__main__":
    peer_main(sys.argv[1:])
