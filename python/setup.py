"""The wheel's two departures from a pure-Python build: it is tagged for the platform its
binaries run on (py3-none-manylinux_2_28_x86_64, installed to platlib), and the bundled `dqplb`
keeps its executable bit (setuptools copies package data without the file mode)."""

import os

from setuptools import Distribution, setup
from setuptools.command.bdist_wheel import bdist_wheel
from setuptools.command.build_py import build_py

# scripts/build.sh --portable links against glibc 2.28 at most; scripts/wheel.sh checks it
PLATFORM = "manylinux_2_28_x86_64"


class BinaryDistribution(Distribution):
    # prebuilt binaries inside: a platform wheel whose files install to platlib
    def has_ext_modules(self):
        return True


class PlatformWheel(bdist_wheel):
    def get_tag(self):
        return "py3", "none", PLATFORM


class BuildPy(build_py):
    def run(self):
        super().run()
        exe = os.path.join(self.build_lib, "dqplb_net", "bin", "dqplb")
        if os.path.exists(exe):
            os.chmod(exe, 0o755)


setup(distclass=BinaryDistribution, cmdclass={"bdist_wheel": PlatformWheel, "build_py": BuildPy})
