"""Reads an NCCL_DEBUG=INFO log and decides whether NCCL loaded the named net plugin and used it.

The lines matched were checked against NVIDIA/nccl sources v2.19 .. v2.30 (see docs/records/gpu-e2e.md).
"""

import os
import re
from dataclasses import dataclass, field
from typing import List, Optional

# Verdicts, from best to worst.  Only USED passes.
USED = "USED"  # loaded by name, selected, and every net channel goes through it
MIXED = "MIXED"  # some channels through the plugin, some through another transport
FELL_BACK = "FELL_BACK"  # NCCL selected another network (Socket/IB) or connected through it
LOAD_FAILED = "LOAD_FAILED"  # NCCL reported that the plugin could not be loaded or initialised
NOT_NET = "NOT_NET"  # channels were connected, but through P2P/SHM, not through any network
NO_EVIDENCE = "NO_EVIDENCE"  # nothing to decide on (NCCL_DEBUG not INFO, or the run died early)

# Text after "NCCL INFO " / "NCCL WARN " (the prefix differs by version: host:pid:tid [dev], and a
# timestamp in front of WARN lines since 2.28).
_MSG = re.compile(r"NCCL (INFO|WARN) (.*)$")
_VERSION = re.compile(r"NCCL version (\d+)\.(\d+)\.(\d+)")
# 2.24+ for a v8 plugin (2.24/2.25 after "Failed to find ncclNetPlugin_v9 symbol."; 2.26+ from
# plugin/net/net_v8.cc); 2.19-2.23 print it only for v5-v7 plugins loaded through a shim.
_LOADED = re.compile(r"NET/Plugin: Loaded net plugin (\S+) \(v(\d+)\)")
# 2.21-2.27 after a successful dlopen ("NET/Plugin: " prefix); 2.19/2.20 print the unprefixed form
# before dlopen, so there it proves the load only together with "Using network <name>", which
# USED requires anyway (the name can only come from the loaded library).
_NAME_SET = re.compile(r"^(NET/Plugin: )?Plugin name set by env to (\S+)")
# 2.27: "Successfully loaded external plugin <name>"; 2.28+: "... external network plugin <path>".
# 2.30's "GIN/Plugin: Successfully loaded external plugin" is about another plugin type: excluded.
_EXT_LOADED = re.compile(r"^Successfully loaded external (?:network )?plugin (\S+)")
# 2.27+.
_INITIALIZED = re.compile(r"(?:Initialized|Assigned) NET plugin (\S+)")
# All versions (init.cc): the network the communicator uses.
_USING = re.compile(r"^Using network (\S+)")
# All versions: "Channel 00/0 : 0[0] -> 1[0] [send] via NET/DQPLB/0/GDRDMA/Shared"; P2P and SHM
# channels have no [send]/[receive] tag ("Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read").
_CHANNEL = re.compile(
    r"^Channel (\d+)(?:/(\d+))? : (\d+)\[[^\]]*\] -> (\d+)\[[^\]]*\] (?:\[(send|receive)\] )?via (\S+)"
)
# Load and selection failures, per version: (pattern, whether group 1 names the network and only
# counts when it is ours).
_FAILURES = [
    (re.compile(r"Error: network (\S*) not found"), False),  # WARN 2.19-2.26: NCCL_NET matched nothing
    (re.compile(r"Failed to initialize any NET plugin"), False),  # WARN 2.27+: same
    (re.compile(r"NET/Plugin ?: (?:dlerror=.*)?No plugin found"), False),  # 2.19-2.21
    (re.compile(r"NET/Plugin ?: Plugin load returned"), False),  # 2.19-2.21
    (re.compile(r"NET/Plugin: Could not find:"), False),  # 2.22+
    (re.compile(r"NET/Plugin: Failed to find ncclNetPlugin symbol"), False),  # 2.19-2.25: no symbol
    (re.compile(r"External network plugin \S+ is unsupported"), False),  # 2.28+: no usable symbol
    (re.compile(r"Failed to initialize NET plugin (\S+)"), True),  # 2.28+: its init() failed
    (re.compile(r"NET/Plugin ?: (?:No plugin found, )?[Uu]sing internal (?:network|net|impl)"), False),
]


@dataclass
class Channel:
    channel: int
    direction: Optional[str]  # "send", "receive", or None (P2P/SHM lines)
    transport: str  # e.g. "NET/DQPLB/0/GDRDMA"

    @property
    def net_name(self) -> Optional[str]:
        parts = self.transport.split("/")
        if len(parts) >= 2 and parts[0] == "NET":
            return parts[1]
        return None

    @property
    def gdr(self) -> bool:
        """GPUDirect RDMA: transport/net.cc prints "NET/<name>/<dev>[(proxy)][/GDRDMA[(PCI)]][/Shared]"
        (the same in 2.19 .. 2.30; "(PCI)" since 2.28), /GDRDMA only when useGdr is set."""
        parts = self.transport.split("/")
        return self.net_name is not None and any(p == "GDRDMA" or p.startswith("GDRDMA(") for p in parts[3:])


@dataclass
class LogReport:
    verdict: str
    nccl_version: Optional[str] = None
    load_evidence: List[str] = field(default_factory=list)
    using_network: List[str] = field(default_factory=list)
    channels: List[Channel] = field(default_factory=list)
    failures: List[str] = field(default_factory=list)
    warnings: List[str] = field(default_factory=list)
    reason: str = ""
    net_channels: int = 0  # channels through the named network
    gdr_channels: int = 0  # of those, channels with /GDRDMA (GPUDirect RDMA used)

    @property
    def gdr_used(self) -> bool:
        return self.gdr_channels > 0


def _names_plugin(text: str, plugin_name: str, lib_basename: Optional[str]) -> bool:
    """True when a printed library name/path designates our plugin."""
    base = os.path.basename(text)
    if lib_basename and base == lib_basename:
        return True
    return plugin_name.lower() in base.lower()


def parse_log(
    text: str, plugin_name: str, lib_basename: Optional[str] = None, require_load: bool = True
) -> LogReport:
    """Parses one rank's log. plugin_name is the plugin's `name` field (e.g. "DQPLB"), matched
    case-insensitively as NCCL does for NCCL_NET; lib_basename is the library file name.
    require_load=False for NCCL's built-in transports, which no line reports as loaded."""
    want = plugin_name.lower()
    rep = LogReport(verdict=NO_EVIDENCE)
    for raw in text.splitlines():
        line = raw.rstrip()
        ver = _VERSION.search(line)
        if ver and rep.nccl_version is None:
            rep.nccl_version = "%s.%s.%s" % ver.groups()
        m = _MSG.search(line)
        if not m:
            continue
        level, msg = m.group(1), m.group(2).strip()
        if level == "WARN":
            rep.warnings.append(msg)
        lm = _LOADED.search(msg)
        if lm and lm.group(1).lower() == want:
            rep.load_evidence.append(msg)
        nm = _NAME_SET.search(msg)
        if nm and _names_plugin(nm.group(2), plugin_name, lib_basename):
            rep.load_evidence.append(msg)
        em = _EXT_LOADED.search(msg)
        if em and _names_plugin(em.group(1), plugin_name, lib_basename):
            rep.load_evidence.append(msg)
        im = _INITIALIZED.search(msg)
        if im and im.group(1).lower() == want:
            rep.load_evidence.append(msg)
        um = _USING.search(msg)
        if um:
            rep.using_network.append(um.group(1))
        cm = _CHANNEL.search(msg)
        if cm:
            rep.channels.append(Channel(int(cm.group(1)), cm.group(5), cm.group(6)))
        for pat, names_net in _FAILURES:
            fm = pat.search(msg)
            if fm:
                # "Failed to initialize NET plugin IB" is about another network: not ours.
                if not names_net or fm.group(1).lower() == want:
                    rep.failures.append(msg)
                break
    rep.verdict, rep.reason = _decide(rep, plugin_name, require_load)
    ours = [c for c in rep.channels if (c.net_name or "").lower() == want]
    rep.net_channels = len(ours)
    rep.gdr_channels = sum(1 for c in ours if c.gdr)
    return rep


def _decide(rep: LogReport, plugin_name: str, require_load: bool):
    want = plugin_name.lower()
    used_ours = [n for n in rep.using_network if n.lower() == want]
    used_other = sorted({n for n in rep.using_network if n.lower() != want})
    ours = [c for c in rep.channels if (c.net_name or "").lower() == want]
    other_net = [c for c in rep.channels if c.net_name is not None and c.net_name.lower() != want]
    not_net = [c for c in rep.channels if c.net_name is None]
    if ours and (other_net or not_net or used_other):
        return MIXED, "%d channel(s) via %s but %d via %s" % (
            len(ours),
            ours[0].transport,
            len(other_net) + len(not_net),
            (other_net + not_net)[0].transport if (other_net or not_net) else used_other[0],
        )
    if ours:
        dirs = {c.direction for c in ours}
        if not used_ours:
            return NO_EVIDENCE, "channels via %s but no 'Using network %s' line" % (
                ours[0].transport,
                ours[0].net_name,
            )
        if require_load and not rep.load_evidence:
            return NO_EVIDENCE, "plugin used but no line shows NCCL loading it by name"
        if not {"send", "receive"} <= dirs:
            return NO_EVIDENCE, "only %s channels via the plugin" % "/".join(sorted(d or "?" for d in dirs))
        how = rep.load_evidence[0] if rep.load_evidence else "Using network %s" % used_ours[0]
        return USED, "%d channel(s) via %s; %s" % (len(ours), ours[0].transport, how)
    if used_other or other_net:
        name = used_other[0] if used_other else other_net[0].net_name
        return FELL_BACK, "NCCL used network %s instead of %s" % (name, plugin_name)
    if rep.failures:
        return LOAD_FAILED, rep.failures[-1]
    if not_net:
        return NOT_NET, "channels via %s, not through any network" % not_net[0].transport
    if used_ours:
        return NO_EVIDENCE, "network selected but no channel was connected"
    return NO_EVIDENCE, "no NCCL plugin, network or channel lines (is NCCL_DEBUG=INFO set?)"


def parse_socket_log(text: str) -> LogReport:
    """The baseline run must use NCCL's built-in Socket transport: same rules, name "Socket"."""
    return parse_log(text, "Socket", None, require_load=False)


def main(argv=None) -> int:
    import argparse
    import json

    ap = argparse.ArgumentParser(description="Verdict on NCCL_DEBUG=INFO logs for a net plugin")
    ap.add_argument("--plugin-name", default="DQPLB")
    ap.add_argument("--lib", default=None, help="plugin library path or file name")
    ap.add_argument("logs", nargs="+")
    args = ap.parse_args(argv)
    rc = 0
    for path in args.logs:
        with open(path, "r", encoding="utf-8", errors="replace") as fh:
            rep = parse_log(fh.read(), args.plugin_name, os.path.basename(args.lib) if args.lib else None)
        print(json.dumps({"log": path, "verdict": rep.verdict, "nccl_version": rep.nccl_version, "reason": rep.reason,
                          "gdr": rep.gdr_used, "gdr_channels": rep.gdr_channels, "net_channels": rep.net_channels}))
        if rep.verdict != USED:
            rc = 1
    return rc


if __name__ == "__main__":
    raise SystemExit(main())
