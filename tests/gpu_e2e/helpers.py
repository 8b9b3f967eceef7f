"""Shared paths for the gpu-e2e offline tests: repository root, the script, the sample logs."""

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
SCRIPTS = os.path.join(REPO, "scripts")
SCRIPT = os.path.join(SCRIPTS, "gpu-e2e.sh")
LOGS = os.path.join(HERE, "logs")
PLUGIN_PATH = "/opt/dqplb/target/release/libnccl-net-dqplb.so"

if SCRIPTS not in sys.path:
    sys.path.insert(0, SCRIPTS)


def read_log(name):
    with open(os.path.join(LOGS, name), "r", encoding="utf-8") as fh:
        return fh.read()
