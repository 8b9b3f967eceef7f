"""The `dqplb` console script of the wheel: replaces this Python process with the bundled
dqplb executable, passing the arguments through (exit status and signals are its own)."""

import os
import sys

from . import command_path


def main():
    try:
        exe = command_path()
    except FileNotFoundError as e:
        print(e, file=sys.stderr)
        return 1
    os.execv(exe, [exe] + sys.argv[1:])
    return 1  # not reached: execv replaces the process or raises


if __name__ == "__main__":
    sys.exit(main())
