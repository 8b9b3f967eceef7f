"""What the package build stamps in: scripts/wheel.sh and scripts/deb.sh rewrite this file in
their staging copy. These values are the source checkout's: nothing built, nothing bundled."""

#: Version of the bundled binaries (`dqplb --version`, without the name and hash).
VERSION = None
#: Short git hash they were built from.
GIT_HASH = None
#: Absolute path of the plugin library when it lives outside the package (the .deb), else None
#: (the wheel: lib/libnccl-net-dqplb.so inside the package).
LIBRARY = None
#: Absolute path of `dqplb` when it lives outside the package (the .deb), else None (bin/dqplb).
COMMAND = None
