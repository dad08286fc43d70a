"""Builds the Python module `specverify` (python/) with pybind11.

Offline on Debian 12 (PEP 668: into a venv that sees Debian's numpy, torch and pybind11):
    python3 -m venv --system-site-packages .venv
    .venv/bin/pip install --no-build-isolation --no-index .
The module is compiled for this machine (-march=native, as the README advises for the C++
library); set SPECVERIFY_MARCH (e.g. x86-64-v3) to build for another, or to "" for the default.
"""
import os
import pathlib

from pybind11.setup_helpers import ParallelCompile, Pybind11Extension, build_ext
from setuptools import setup

ParallelCompile("SPECVERIFY_BUILD_JOBS", default=2).install()

march = os.environ.get("SPECVERIFY_MARCH", "native")
extension = Pybind11Extension(
    "specverify._core",
    sorted(str(p) for p in pathlib.Path("python/src").glob("*.cpp")),
    include_dirs=["include"],
    cxx_std=17,
    extra_compile_args=["-O3"] + ([f"-march={march}"] if march else []),
    extra_link_args=["-pthread"],
)

setup(
    name="specverify",
    version="0.1.0",
    description="Speculative-decoding verification rules over NumPy arrays and PyTorch CPU tensors",
    license="Apache-2.0",
    python_requires=">=3.8",
    packages=["specverify"],
    package_dir={"": "python"},
    ext_modules=[extension],
    cmdclass={"build_ext": build_ext},
    zip_safe=False,
)
