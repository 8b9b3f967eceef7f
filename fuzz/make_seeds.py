#!/usr/bin/env python3
"""Writes the small committed seed corpus under fuzz/seeds/<target>/ (run from the repo root)."""
import os
import random
import struct

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "seeds")
rng = random.Random(20240601)


def put(target, name, data):
    d = os.path.join(ROOT, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def hello(qps=4, outst=8, seg=65536, maxm=32, fabric=3, policy=0, stream=0):
    b = bytearray(64)
    b[0:4] = b"DQPS"
    struct.pack_into("<HHH", b, 4, 1, stream, qps)
    struct.pack_into("<IIII", b, 12, outst, seg, maxm, fabric)
    b[28] = policy
    struct.pack_into("<Q", b, 32, 0x1234)
    b[40:56] = bytes(range(16))
    return bytes(b)


def announce(slot=1, tag=-1, cap=1 << 20, index=0, count=1):
    # Version 2 ("2NNA"): buffer `index` of a grouped receive of `count` buffers.
    return struct.pack("<IIiBBHQ", 0x414E4E32, slot, tag, index, count, 0, cap)


def seg(imm=0x80000000, slot=0, off=128, ln=64):
    return struct.pack("<IIQII", imm, slot, off, ln, 0x53454721)


def ack(imm=5, stream=0, gen=0, count=1):
    # Control-stream ack frame ("ACKS"): the oldest `count` segments of a data stream's socket.
    return struct.pack("<IHHHHI8x", 0x534B4341, stream, gen, count, 0, imm)


def handle(v6=False, port=4242):
    b = bytearray(128)
    b[0:4] = b"DQPL"
    struct.pack_into("<HH", b, 4, 1, 10 if v6 else 2)
    struct.pack_into(">H", b, 8, port)
    b[10:14] = bytes([127, 0, 0, 1])
    if v6:
        b[10:26] = bytes(15) + b"\x01"
    struct.pack_into("<I", b, 26, 17)
    b[30:46] = bytes(range(16))
    return bytes(b)


# wire_frames: flag byte, then hello | announce | segment header | ack | handle.
put("wire_frames", "valid", b"\x00" + hello() + announce() + seg() + ack() + handle())
put("wire_frames", "valid-v6-static", b"\x00" + hello(policy=1, qps=128, outst=256)
    + announce(index=7, count=8) + seg(imm=7) + ack() + handle(v6=True))
put("wire_frames", "bad-params", b"\x1f" + hello(qps=0, seg=100, maxm=0, policy=9)
    + announce(cap=0) + seg(off=(1 << 64) - 1, ln=0xFFFFFFFF) + ack() + handle(port=0))
put("wire_frames", "zeros", bytes(250))

# Engine targets read `arbitrary` structures: random bytes are valid inputs of every shape.
for t in ("engine_receiver", "engine_sender_receiver"):
    for i, n in enumerate((64, 256, 1024, 4096)):
        put(t, "random-%d" % i, bytes(rng.getrandbits(8) for _ in range(n)))

# config_toml: selector byte, TOML text, NUL, NCCL_IB_HCA, NUL-separated NAME=VALUE entries.
conf_dir = os.path.join(os.path.dirname(ROOT), "..", "plugin-conf")
for name in ("default.toml", "two-dc.toml", "rail-optimized-8rail-roce.toml"):
    with open(os.path.join(conf_dir, name), "rb") as f:
        text = f.read()
    put("config_toml", name.replace(".toml", ""),
        b"\x10" + text + b"\0mlx5_0:1:0,mlx5_1:1:9\0NCCL_DQPLB_QPS=4\0NCCL_DQPLB_POLICY=static-split")
put("config_toml", "small", b"\x03[engine]\npolicy = \"single-qp\"\n\0^=mlx5_0:1,mlx5_2\0"
    b"NCCL_DQPLB_CLASS_CROSS_DC_QPS=32\0NCCL_DQPLB_OUTSTANDING=16\0NCCL_DQPLB_BOGUS=1")
put("config_toml", "rail-plane", b"\x11[fabric]\nhca-third-field = \"rail:plane\"\nmax-rails = 4\n"
    b"\0mlx5_0:1:3:2,mlx5_1:1:0\0NCCL_DQPLB_SEGMENT_BYTES=1048576")
