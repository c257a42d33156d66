"""Builds nabla._nabla: the extension (src/*.c) compiled together with the C library (../src),
linked into one abi3 module for CPython >= 3.11. Used by `pip install ./python`; the CMake build
(python/CMakeLists.txt) is the other way to build it."""
import glob
import os

from setuptools import Extension, setup

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
# setuptools wants paths relative to this directory
lib_sources = sorted(os.path.relpath(p, HERE)
                     for p in glob.glob(os.path.join(ROOT, "src", "**", "*.c"), recursive=True))
ext_sources = sorted(os.path.relpath(p, HERE) for p in glob.glob(os.path.join(HERE, "src", "*.c")))
if not lib_sources:
    raise SystemExit("nabla: ../src not found: install from a checkout of the whole repository "
                     "(pip install ./python from its root)")

ext = Extension(
    "nabla._nabla",
    sources=ext_sources + lib_sources,
    include_dirs=[os.path.relpath(os.path.join(ROOT, d), HERE) for d in ("include", "src")],
    define_macros=[("_POSIX_C_SOURCE", "200809L"), ("_DEFAULT_SOURCE", None),
                   ("NB_VERSION_STRING", '"0.1.0"'), ("Py_LIMITED_API", "0x030B0000")],
    extra_compile_args=["-std=c11", "-O2", "-fvisibility=hidden", "-Wno-unused-parameter"],
    libraries=["dl", "m", "pthread"],
    py_limited_api=True,
)

setup(
    packages=["nabla"],
    ext_modules=[ext],
    options={"bdist_wheel": {"py_limited_api": "cp311"}},
)
