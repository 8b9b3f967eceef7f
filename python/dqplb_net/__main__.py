"""python -m dqplb_net {path | selftest | --version}: the plugin library's absolute path (for
NCCL_NET_PLUGIN), a two-process transfer through it on loopback, the version and git hash."""

import argparse
import sys

from . import _selftest, plugin_path, version_string


def main(argv=None):
    ap = argparse.ArgumentParser(
        prog="python -m dqplb_net",
        description="The DQPLB NCCL net plugin, packaged. "
        "Use it: NCCL_NET_PLUGIN=$(python -m dqplb_net path) NCCL_NET=DQPLB torchrun ...",
    )
    ap.add_argument("--version", action="version", version=version_string())
    sub = ap.add_subparsers(dest="cmd", metavar="{path,selftest}")
    sub.add_parser("path", help="print the plugin library's absolute path")
    st = sub.add_parser(
        "selftest",
        help="load the library as NCCL does and move byte-checked messages between two "
        "processes through its ncclNetPlugin_v8 vtable over TCP on loopback",
    )
    _selftest.add_arguments(st)
    args = ap.parse_args(argv)
    if args.cmd is None:
        ap.print_usage(sys.stderr)
        print("python -m dqplb_net: a command is required (path, selftest, --version)", file=sys.stderr)
        return 2
    try:
        library = args.library if getattr(args, "library", None) else plugin_path()
    except FileNotFoundError as e:
        print(e, file=sys.stderr)
        return 1
    if args.cmd == "path":
        print(library)
        return 0
    # a library given by --library may be another build: no version to hold it to
    expect = None if args.library or version_string().startswith("unknown") else version_string()
    return _selftest.run(args, library, expect)


if __name__ == "__main__":
    sys.exit(main())
