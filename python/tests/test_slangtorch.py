"""nabla.slangtorch: slang-torch's Python API (loadModule, [AutoPyBindCUDA] launchers with
launchRaw, .fwd / .bwd derivative kernels, DiffTensorView pairs, struct namedtuples, errors) on
CPU torch tensors and numpy here, and on CUDA torch tensors on a GPU machine (skipped without a
GPU; NB_REQUIRE_CUDA=1 makes that a failure). The kernels are python/tests/data/slangtorch/*.slang."""
import os
import shutil
import sys
import tempfile

import numpy as np
import pytest

import nabla
import nabla.slangtorch as slangtorch
from nbtest import devices

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "slangtorch")


def path(name):
    return os.path.join(DATA, name)


def tdevices():
    """torch device names to run on: cpu, plus cuda on a GPU machine."""
    return ["cpu"] + (["cuda"] if "cuda" in devices() else [])


def launch1d(k, n, block=32):
    k.launchRaw(blockSize=(block, 1, 1), gridSize=((n + block - 1) // block, 1, 1))


# ---- loadModule ---------------------------------------------------------------------------------


def test_load_names_and_spellings():
    m = slangtorch.loadModule(path("kernels.slang"))
    assert isinstance(m, slangtorch.SlangModule)
    assert isinstance(m.cube, slangtorch.KernelFunction)
    assert m.DiffTensorView is slangtorch.DiffTensorView
    assert m.DiffTensorView(value=1)._asdict() == {"value": 1, "grad": None}
    # the same names on nabla itself: `import nabla as slangtorch` / the tutorial's `import
    # nabla as slangpy; slangpy.loadModule(...)`
    assert nabla.loadModule is slangtorch.loadModule
    assert nabla.slangtorch is slangtorch
    for name in ("clearSessionShaderCache", "clearPersistentShaderCache", "clearShaderCaches"):
        assert getattr(nabla, name) is getattr(slangtorch, name)
    with pytest.raises(AttributeError):
        m.no_such_name
    with pytest.raises(AttributeError):
        m.cube = 1


def test_load_accepts_slangtorch_keywords():
    m = slangtorch.loadModule(path("scaled.slang"), skipSlang=None, verbose=False,
                              defines={"SCALE": "2.0"}, includePaths=[path("inc")],
                              skipNinjaCheck=True, slangGenLineInfo=False, cudaFastMath=True,
                              cudaGenLineInfo=False, extraSlangFlags=["-O2"], extraCudaFlags=[])
    assert isinstance(m.scale, slangtorch.KernelFunction)
    # -D / -I through extraSlangFlags, joined or separate
    slangtorch.loadModule(path("scaled.slang"), extraSlangFlags=["-DSCALE=3", "-I", path("inc")])
    with pytest.raises(TypeError, match="unexpected keyword argument 'includeDirs'"):
        slangtorch.loadModule(path("scaled.slang"), includeDirs=[path("inc")])
    with pytest.raises(nabla.UnsupportedError, match="extraCudaFlags"):
        slangtorch.loadModule(path("kernels.slang"), extraCudaFlags=["--use_fast_math"])
    with pytest.raises(nabla.UnsupportedError, match="-emit-spirv-directly"):
        slangtorch.loadModule(path("kernels.slang"), extraSlangFlags=["-emit-spirv-directly"])
    with pytest.raises(TypeError, match="cudaFastMath"):
        slangtorch.loadModule(path("kernels.slang"), cudaFastMath="yes")


def test_load_failures_are_compile_errors_and_runtime_errors():
    # slang-torch's tests expect RuntimeError for a missing define / include path
    with pytest.raises(nabla.CompileError, match="SCALE"):
        slangtorch.loadModule(path("scaled.slang"), includePaths=[path("inc")])
    with pytest.raises(RuntimeError, match="scale_helper"):
        slangtorch.loadModule(path("scaled.slang"), defines={"SCALE": 2})
    assert issubclass(nabla.CompileError, RuntimeError)
    with pytest.raises(nabla.FileError, match="nope.slang"):
        slangtorch.loadModule(path("nope.slang"))
    src = tempfile.mkdtemp()
    try:
        bad = os.path.join(src, "bad.slang")
        with open(bad, "w") as f:
            f.write("[CudaKernel]\nvoid k(TensorView<float> x) { x[0] = undefined_name; }\n")
        with pytest.raises(nabla.CompileError, match=r"bad.slang:2:\d+: error: .*undefined_name"):
            slangtorch.loadModule(bad)
    finally:
        shutil.rmtree(src)


def test_verbose_prints_to_stderr():
    import io

    err, old = io.StringIO(), sys.stderr
    sys.stderr = err
    try:
        slangtorch.loadModule(path("kernels.slang"), verbose=True)
    finally:
        sys.stderr = old
    assert "kernels.slang" in err.getvalue()


def test_clear_persistent_cache_in_a_private_cache_dir():
    # in a child process with its own NABLA_CACHE_DIR: the shared cache is left alone
    import subprocess

    d = tempfile.mkdtemp()
    try:
        code = ("import nabla, nabla.slangtorch as st, os, sys\n"
                "m = nabla.load_module_from_source('float f(float x) { return x + 1; }', 'c.nb', device='cpu')\n"
                "assert m.f([1.0]).tolist() == [2.0]\n"
                "n = len(os.listdir(sys.argv[1]))\n"
                "st.clearSessionShaderCache()\n"
                "nabla.clearShaderCaches()\n"
                "print(n, len(os.listdir(sys.argv[1])))\n")
        env = dict(os.environ, NABLA_CACHE_DIR=d, PYTHONPATH=os.pathsep.join(sys.path))
        out = subprocess.run([sys.executable, "-c", code, d], env=env, capture_output=True,
                             text=True, timeout=120)
        assert out.returncode == 0, out.stderr
        before, after = map(int, out.stdout.split())
        assert before > 0 and after == 0
    finally:
        shutil.rmtree(d, ignore_errors=True)
