"""The optional compiled part of the package (pyproject.toml holds the rest): the C extension
tensorref._speedups, the hot path of Tensor's operators (see tensorref/_accel.py). It links to
nothing and includes the repository's C header (include/tensorref.h) and its generated operator
table (tensorref/_speedups_generated.h, from src/ops/ops.def); without a C compiler, or
outside the repository, the build skips it (optional=True) and the package is pure ctypes.

With TENSORREF_WHEEL_LIB set to a built libtensorref.so (`make wheel`), the build puts that
library inside the package (tensorref/libtensorref.so, which tensorref._lib finds first), and the
wheel is a platform wheel."""
import os
import shutil
import sys
from pathlib import Path

from setuptools import Distribution, Extension, setup
from setuptools.command.build_py import build_py

INCLUDE = Path(__file__).resolve().parents[2] / "include"
BUNDLED = os.environ.get("TENSORREF_WHEEL_LIB")


class BuildWithLibrary(build_py):
    """Copies the library named by TENSORREF_WHEEL_LIB into the built package."""

    def run(self):
        super().run()
        if BUNDLED:
            shutil.copy2(BUNDLED, Path(self.build_lib) / "tensorref" / "libtensorref.so")


class PlatformDistribution(Distribution):
    """A wheel that carries the native library is for this platform, with or without the
    accelerator."""

    def has_ext_modules(self):
        return bool(BUNDLED) or super().has_ext_modules()


setup(cmdclass={"build_py": BuildWithLibrary}, distclass=PlatformDistribution, ext_modules=[Extension(
    "tensorref._speedups", ["tensorref/_speedups.c"], optional=True, include_dirs=[str(INCLUDE)],
    depends=["tensorref/_speedups_generated.h"],
    extra_compile_args=[] if sys.platform == "win32" else ["-Wall", "-Wextra"])])
