"""The optional compiled part of the package (pyproject.toml holds the rest): the C extension
tensorref._speedups, the hot path of Tensor's operators (see tensorref/_accel.py). It links to
nothing and includes the repository's C header (include/tensorref.h) and its generated operator
table (tensorref/_speedups_generated.h, from src/ops/ops.def); without a C compiler, or
outside the repository, the build skips it (optional=True) and the package is pure ctypes."""
import sys
from pathlib import Path

from setuptools import Extension, setup

INCLUDE = Path(__file__).resolve().parents[2] / "include"

setup(ext_modules=[Extension(
    "tensorref._speedups", ["tensorref/_speedups.c"], optional=True, include_dirs=[str(INCLUDE)],
    depends=["tensorref/_speedups_generated.h"],
    extra_compile_args=[] if sys.platform == "win32" else ["-Wall", "-Wextra"])])
