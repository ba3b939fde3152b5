"""The optional compiled part of the package (pyproject.toml holds the rest): the C extension
tensorref._speedups, the hot path of Tensor's operators (see tensorref/_accel.py). It links to
nothing; without a C compiler the build skips it (optional=True) and the package is pure ctypes."""
import sys

from setuptools import Extension, setup

setup(ext_modules=[Extension(
    "tensorref._speedups", ["tensorref/_speedups.c"], optional=True,
    extra_compile_args=[] if sys.platform == "win32" else ["-Wall", "-Wextra"])])
