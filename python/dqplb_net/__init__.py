"""dqplb-net: the DQPLB NCCL net plugin (libnccl-net-dqplb.so) and the `dqplb` command.

    import dqplb_net
    dqplb_net.enable()          # before torch.distributed.init_process_group(backend="nccl")

sets NCCL_NET_PLUGIN to the library's full path and NCCL_NET=DQPLB in os.environ, which NCCL
reads when it creates its first communicator. `plugin_path()` is the library's absolute path;
`python -m dqplb_net path | --version | selftest` are the same from a shell.
"""

import os

from . import _build_info

__all__ = [
    "PluginConflict",
    "command_path",
    "enable",
    "plugin_path",
    "version_string",
    "GIT_HASH",
    "LIBRARY_NAME",
    "NET_NAME",
]

#: The package's version (the Cargo workspace's), None in an unbuilt source checkout.
__version__ = _build_info.VERSION
#: Short git hash of the commit the bundled binaries were built from.
GIT_HASH = _build_info.GIT_HASH
#: The file name NCCL looks for with NCCL_NET_PLUGIN=dqplb.
LIBRARY_NAME = "libnccl-net-dqplb.so"
#: The plugin's name in its vtable, the value of NCCL_NET that selects it.
NET_NAME = "DQPLB"

_HERE = os.path.dirname(os.path.abspath(__file__))


class PluginConflict(RuntimeError):
    """enable() found NCCL_NET_PLUGIN or NCCL_NET already set to another value."""


def version_string():
    """'0.1.0 (c302e4d)': what `dqplb --version` prints after its name."""
    if __version__ is None:
        return "unknown (an unbuilt source checkout: build with bash scripts/wheel.sh)"
    return "{} ({})".format(__version__, GIT_HASH)


def _installed(kind, stamped, bundled):
    path = stamped or os.path.join(_HERE, bundled)
    if not os.path.isfile(path):
        where = (
            "stamped into {} by the package build".format(_build_info.__file__)
            if stamped
            else "bundled in the wheel"
        )
        raise FileNotFoundError(
            "dqplb_net: the {} {} ({}) is missing; reinstall the package".format(kind, path, where)
        )
    return path


def plugin_path():
    """Absolute path of libnccl-net-dqplb.so: the wheel's bundled copy, or the one the Debian
    package installed (/usr/lib/<multiarch>/). FileNotFoundError if it is not there."""
    return _installed("plugin library", _build_info.LIBRARY, os.path.join("lib", LIBRARY_NAME))


def command_path():
    """Absolute path of the `dqplb` executable (bundled, or /usr/bin/dqplb from the .deb)."""
    return _installed("dqplb command", _build_info.COMMAND, os.path.join("bin", "dqplb"))


def _same_plugin(current, wanted):
    # NCCL_NET_PLUGIN may name the same file through a symbolic link or a relative path.
    try:
        return os.path.samefile(current, wanted)
    except OSError:
        return False


def enable(force=False, environ=None):
    """Sets NCCL_NET_PLUGIN=<plugin_path()> and NCCL_NET=DQPLB in os.environ (or `environ`).

    Call it before NCCL creates a communicator (before init_process_group); each process that
    uses NCCL needs it (torchrun's workers run the script, so calling it in the script is enough).
    A variable already set to something else is left alone and PluginConflict is raised, naming
    it, unless force=True: another plugin or network chosen on purpose is not silently replaced.
    NCCL compares NCCL_NET without regard to case, so NCCL_NET=dqplb is not a conflict.
    Returns the two values set, as a dict.
    """
    env = os.environ if environ is None else environ
    wanted = {"NCCL_NET_PLUGIN": plugin_path(), "NCCL_NET": NET_NAME}
    conflicts = []
    cur = env.get("NCCL_NET_PLUGIN", "")
    if cur and cur != wanted["NCCL_NET_PLUGIN"] and not _same_plugin(cur, wanted["NCCL_NET_PLUGIN"]):
        conflicts.append(("NCCL_NET_PLUGIN", cur, wanted["NCCL_NET_PLUGIN"]))
    cur = env.get("NCCL_NET", "")
    if cur and cur.upper() != NET_NAME:
        conflicts.append(("NCCL_NET", cur, NET_NAME))
    if conflicts and not force:
        lines = "; ".join("{}={!r} (dqplb_net would set {!r})".format(*c) for c in conflicts)
        raise PluginConflict(
            "dqplb_net.enable(): already set to another value: {}. Unset it, or call "
            "enable(force=True) to replace it".format(lines)
        )
    env.update(wanted)
    return dict(wanted)
