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
    assert {"cube", "affine2d", "mulpair", "twice", "DiffTensorView"} <= set(dir(m))
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


# ---- launches -------------------------------------------------------------------------------------


def test_launch_primal_fwd_bwd_torch():
    torch = pytest.importorskip("torch")
    m = slangtorch.loadModule(path("kernels.slang"))
    for dev in tdevices():
        x = torch.tensor([1.0, -2.0, 0.5, 3.0, 4.0], device=dev)
        n = x.shape[0]
        want = x ** 3 + 2 * x
        # direct tensors, (tensor,) and DiffTensorView without grad; small blocks: several blocks
        y = torch.zeros_like(x)
        k = m.cube(x=x, y=y)
        assert isinstance(k, slangtorch.LaunchableObject)
        assert k.launchRaw(blockSize=(2, 1, 1), gridSize=(3, 1, 1)) is None
        assert torch.allclose(y, want)
        y = torch.zeros_like(x)
        launch1d(m.cube(x=(x,), y=(y,)), n)
        assert torch.allclose(y, want)
        y = torch.zeros_like(x)
        launch1d(m.cube(x=m.DiffTensorView(value=x), y=slangtorch.DiffTensorView(y)), n)
        assert torch.allclose(y, want)
        # forward mode: y_d = (3x^2 + 2) x_d, pairs and the namedtuple
        xd = torch.tensor([1.0, 0.0, 2.0, 1.0, -1.0], device=dev)
        y, yd = torch.zeros_like(x), torch.zeros_like(x)
        launch1d(m.cube.fwd(x=(x, xd), y=(y, yd)), n)
        assert torch.allclose(y, want) and torch.allclose(yd, (3 * x ** 2 + 2) * xd)
        y, yd = torch.zeros_like(x), torch.zeros_like(x)
        launch1d(m.cube.fwd(x=m.DiffTensorView(value=x, grad=xd), y=m.DiffTensorView(value=y, grad=yd)), n)
        assert torch.allclose(yd, (3 * x ** 2 + 2) * xd)
        # reverse mode: x_d += (3x^2 + 2) y_d (accumulates, as slang-torch's atomics)
        gy = torch.tensor([1.0, 2.0, 0.0, 1.0, 0.5], device=dev)
        gx = torch.ones_like(x)
        want_gx = 1 + (3 * x ** 2 + 2) * gy
        launch1d(m.cube.bwd(x=(x, gx), y=(torch.zeros_like(x), gy)), n, block=4)
        assert torch.allclose(gx, want_gx)
        assert gy.tolist() == [0.0] * n  # consumed by the store's reverse (Slang's DiffTensorView)


def test_launch_block_and_grid_ids():
    torch = pytest.importorskip("torch")
    m = slangtorch.loadModule(path("blocks.slang"))
    for dev in tdevices():
        block, grid = (2, 3, 1), (2, 1, 2)
        n = 2 * 3 * 2 * 2
        ids = torch.full((n, 9), -1, dtype=torch.int32, device=dev)
        m.where(ids=ids).launchRaw(blockSize=block, gridSize=grid)
        rows = ids.cpu().tolist()
        want = []
        for bz in range(2):
            for by in range(1):
                for bx in range(2):
                    for tz in range(1):
                        for ty in range(3):
                            for tx in range(2):
                                want.append([tx, ty, tz, bx, by, bz, 2, 3, 1])
        assert rows == want


def test_launch_total_and_auto_launch():
    torch = pytest.importorskip("torch")
    m = slangtorch.loadModule(path("blocks.slang"))
    for dev in tdevices():
        # launchTotal: ceil(total / block) blocks per axis; the kernel skips the threads past it
        ids = torch.full((10, 9), -1, dtype=torch.int32, device=dev)
        m.where(ids=ids).launchTotal(blockSize=(4, 1, 1), totalSize=(10, 1, 1))
        rows = ids.cpu().tolist()
        assert rows == [[g % 4, 0, 0, g // 4, 0, 0, 4, 1, 1] for g in range(10)]
        # every element of a 2-D / 3-D total is reached once, in blocks of the given shape
        out = torch.zeros((5, 7, 3, 3), dtype=torch.int32, device=dev)
        m.blockShape(dst=out).launchTotal(blockSize=(2, 4, 2), totalSize=(5, 7, 3))
        assert out.cpu().reshape(-1, 3).tolist() == [[2, 4, 2]] * (5 * 7 * 3)
        # autoLaunch: the block shape follows the total's rank
        for total, block in (((300, 1, 1), [256, 1, 1]), ((5, 33, 1), [16, 16, 1]),
                             ((1, 3, 1), [16, 16, 1]), ((9, 2, 5), [8, 8, 4]), (20, [256, 1, 1]),
                             ((3, 4), [16, 16, 1])):
            t = (total,) if isinstance(total, int) else tuple(total)
            t = t + (1,) * (3 - len(t))
            out = torch.zeros(t + (3,), dtype=torch.int32, device=dev)
            m.blockShape(dst=out).autoLaunch(totalSize=total)
            assert out.cpu().reshape(-1, 3).tolist() == [block] * (t[0] * t[1] * t[2]), total
        # a zero total launches nothing
        out = torch.zeros((0, 1, 1, 3), dtype=torch.int32, device=dev)
        m.blockShape(dst=out).launchTotal(blockSize=(4, 1, 1), totalSize=(0, 1, 1))
        m.blockShape(dst=out).autoLaunch(totalSize=0)
        # a kernel without the bounds check: the threads past the total are caught, not run wild
        out = torch.zeros(10, device=dev)
        m.unchecked(dst=out).launchTotal(blockSize=(10, 1, 1), totalSize=(10, 1, 1))
        assert out.cpu().tolist() == list(range(10))
        # (on CUDA the launch returns at once and the error comes at the module's check point)
        with pytest.raises(nabla.ShapeError, match="out-of-bounds index"):
            m.unchecked(dst=out).launchTotal(blockSize=(4, 1, 1), totalSize=(10, 1, 1))
            slangtorch.checkErrors(m)
        with pytest.raises(nabla.ShapeError, match="out-of-bounds index"):
            m.unchecked(dst=out).autoLaunch(totalSize=(10, 1, 1))
            slangtorch.checkErrors(m)
        slangtorch.checkErrors(m)


def test_launch_total_bad_sizes():
    m = slangtorch.loadModule(path("blocks.slang"))
    ids = np.zeros((4, 9), np.int32)
    lo = m.where(ids=ids)
    for bad in ((4, 1), (4, 1, 1.0), [4, 1, 1], "4"):
        with pytest.raises(slangtorch.ArgumentError, match="blockSize"):
            lo.launchTotal(blockSize=bad, totalSize=(4, 1, 1))
    with pytest.raises(slangtorch.ArgumentError, match="blockSize must be positive"):
        lo.launchTotal(blockSize=(0, 1, 1), totalSize=(4, 1, 1))
    for bad in ((4, 1, 1, 1), (), (4.0,), "4", None, True, (-1, 1, 1)):
        with pytest.raises(slangtorch.ArgumentError, match="totalSize"):
            lo.launchTotal(blockSize=(4, 1, 1), totalSize=bad)
        with pytest.raises(slangtorch.ArgumentError, match="totalSize"):
            lo.autoLaunch(totalSize=bad)
    # a grid past CUDA's limits (y and z at most 65535 blocks) is an ArgumentError on every device
    with pytest.raises(slangtorch.ArgumentError):
        lo.launchTotal(blockSize=(1, 1, 1), totalSize=(1, 70000, 1))


def test_vectors_scalars_structs_matrices_arrays():
    torch = pytest.importorskip("torch")
    m = slangtorch.loadModule(path("kernels.slang"))
    for dev in tdevices():
        a = torch.arange(12, dtype=torch.float32, device=dev).reshape(3, 4)
        dst = torch.zeros_like(a)
        m.affine2d(a=a, s=2.0, offset=(10.0, 20.0, 30.0), dst=dst).launchRaw(
            blockSize=(2, 2, 1), gridSize=(2, 2, 1))
        off = torch.tensor([10.0, 20.0, 30.0, 10.0], device=dev)
        assert torch.equal(dst, a * 2 + off)
        # structs: namedtuple made by the module, tuple in field order, dict, nested
        pa, pb = torch.tensor([1.0, 2.0, 3.0], device=dev), torch.tensor([4.0, 5.0, 6.0], device=dev)
        want = pa * pb * 0.5
        for s in (m.Scaled(pair=m.Pair(a=pa, b=pb), k=0.5), ((pa, pb), 0.5),
                  {"pair": {"a": pa, "b": pb}, "k": 0.5}, m.Scaled(k=0.5, pair=(pa, pb))):
            dst = torch.zeros(3, device=dev)
            launch1d(m.mulpair(s=s, dst=dst), 3)
            assert torch.equal(dst, want), s
        assert m.Pair._fields == ("a", "b") and m.Scaled._fields == ("pair", "k")
        # matrices and arrays of vectors as nested tuples / lists, inside a struct too
        rot = ((1.0, 2.0, 3.0), (4.0, 5.0, 6.0), (7.0, 8.0, 9.0))
        dst = torch.zeros(16, device=dev)
        m.unpack(f=m.Frame(rot=rot, shift=[(10.0, 11.0, 12.0), (13.0, 14.0, 15.0)]),
                 w=[(0.0, 0.0, 0.0), (0.0, 0.0, 99.0)], dst=dst).launchRaw(blockSize=(1, 1, 1), gridSize=(1, 1, 1))
        assert dst.tolist() == [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 99]
        # half views
        h = torch.tensor([1.0, 2.0, 3.0], dtype=torch.float16, device=dev)
        hy = torch.zeros_like(h)
        launch1d(m.halfsq(x=h, y=hy), 3)
        assert hy.tolist() == [1.0, 4.0, 9.0]
        # empty tensors launch and do nothing
        e = torch.zeros(0, device=dev)
        launch1d(m.cube(x=e, y=torch.zeros(0, device=dev)), 1)


def test_array_of_generic_structs_with_views():
    # slang-torch's inline-MLP style: m.Affine(w=, b=) for Affine<N>, m.Stack(layers=[...]) for
    # Stack<N, L>; DiffTensorView fields as (value, grad) pairs in .bwd
    torch = pytest.importorskip("torch")
    m = slangtorch.loadModule(path("layers.slang"))
    for dev in tdevices():
        x = torch.tensor([1.0, 2.0, 3.0, 4.0], device=dev)
        w = [torch.tensor([1.0, 2.0, 3.0, 4.0], device=dev), torch.tensor([0.5, 0.5, 0.5, 0.5], device=dev)]
        b = [torch.tensor([0.0, 1.0, 0.0, 1.0], device=dev), torch.tensor([2.0, 2.0, 2.0, 2.0], device=dev)]
        y = torch.zeros(4, device=dev)
        net = m.Stack(layers=[m.Affine(w=w[i], b=b[i]) for i in range(2)])
        launch1d(m.run(net=net, x=x, y=y), 4)
        assert torch.allclose(y, (w[0] + w[1]) * x + b[0] + b[1])
        wd = [torch.zeros(4, device=dev) for _ in range(2)]
        bd = [torch.zeros(4, device=dev) for _ in range(2)]
        xd, yd = torch.zeros(4, device=dev), torch.tensor([1.0, 0.0, 2.0, 1.0], device=dev)
        net = m.Stack(layers=[m.Affine(w=(w[i], wd[i]), b=(b[i], bd[i])) for i in range(2)])
        g = yd.clone()  # the store's gradient is consumed (zeroed) by the reverse pass, as in Slang
        launch1d(m.run.bwd(net=net, x=(x, xd), y=(y, yd)), 4)
        for i in range(2):
            assert torch.allclose(wd[i], x * g) and torch.allclose(bd[i], g)
        assert torch.allclose(xd, (w[0] + w[1]) * g)
        assert yd.tolist() == [0.0, 0.0, 0.0, 0.0]
        with pytest.raises(nabla.ArgumentError, match="layers.*expected 2 items, got 1"):
            m.run(net=m.Stack(layers=[m.Affine(w=w[0], b=b[0])]), x=x, y=y)


def test_numpy_and_nabla_tensors_without_torch():
    # in a child process where `import torch` fails: numpy arrays and nabla.Tensors are tensors
    import subprocess

    code = ("import sys; sys.modules['torch'] = None\n"
            "import numpy as np, nabla, nabla.slangtorch as st\n"
            f"m = st.loadModule({path('kernels.slang')!r})\n"
            "x = np.array([1.0, 2.0, 3.0], np.float32); y = np.zeros(3, np.float32)\n"
            "m.cube(x=x, y=y).launchRaw(blockSize=(4, 1, 1), gridSize=(1, 1, 1))\n"
            "assert y.tolist() == [3.0, 12.0, 33.0], y\n"
            "gx = np.zeros(3, np.float32)\n"
            "m.cube.bwd(x=(x, gx), y=(y, np.ones(3, np.float32))).launchRaw(blockSize=(4, 1, 1), gridSize=(1, 1, 1))\n"
            "assert gx.tolist() == [5.0, 14.0, 29.0], gx\n"
            "t = nabla.Tensor.from_numpy(x); u = nabla.Tensor.zeros((3,))\n"
            "m.cube(x=t, y=u).launchRaw(blockSize=(4, 1, 1), gridSize=(1, 1, 1))\n"
            "assert u.to_numpy().tolist() == [3.0, 12.0, 33.0]\n"
            "print('ok')\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr


def test_plain_function_runs_on_the_arguments_device():
    # a function that is neither a kernel nor a host function is called over arrays, as nabla does,
    # on the module loaded for its arguments' device (no copies)
    m = slangtorch.loadModule(path("kernels.slang"))
    assert m.twice(np.array([1.0, 2.0], np.float32)).tolist() == [2.0, 4.0]
    torch = pytest.importorskip("torch")
    for dev in tdevices():
        y = m.twice(torch.tensor([1.0, 3.0], device=dev))
        assert isinstance(y, torch.Tensor) and y.device.type == dev
        assert y.cpu().tolist() == [2.0, 6.0]


# ---- hot reload ------------------------------------------------------------------------------------


def _write(p, text):
    with open(p, "w") as f:
        f.write(text)


# a prelude header for both back ends (NVRTC defines __CUDACC__)
PRE = "#ifdef __CUDACC__\n__device__\n#endif\nstatic float pre_k(void) { return %d.0f; }\n"


def test_hot_reload_file_import_and_prelude():
    torch = pytest.importorskip("torch")
    d = tempfile.mkdtemp()
    try:
        main = os.path.join(d, "main.slang")
        _write(os.path.join(d, "helper.slang"), "float k() { return 2.0; }\n")
        _write(os.path.join(d, "pre.h"), PRE % 10)
        src = ("import helper;\n"
               "float pre() { __target_switch { case cpp: __requirePrelude(\"#include \\\"pre.h\\\"\");"
               " __intrinsic_asm \"pre_k()\"; case cuda: __requirePrelude(\"#include \\\"pre.h\\\"\");"
               " __intrinsic_asm \"pre_k()\"; } }\n"
               "[AutoPyBindCUDA] [CudaKernel] void f(TensorView<float> y)\n"
               "{ if (cudaThreadIdx().x == 0) y[0] = FACTOR * k() + pre(); }\n")
        _write(main, src.replace("FACTOR", "1.0"))

        def run(mod, dev):
            y = torch.zeros(1, device=dev)
            mod.f(y=y).launchRaw(blockSize=(1, 1, 1), gridSize=(1, 1, 1))
            return y.item()

        for dev in tdevices():
            m1 = slangtorch.loadModule(main)
            assert run(m1, dev) == 12.0
            _write(main, src.replace("FACTOR", "3.0"))  # the file itself
            m2 = slangtorch.loadModule(main)
            assert run(m2, dev) == 16.0 and run(m1, dev) == 12.0  # the old module keeps its code
            _write(os.path.join(d, "helper.slang"), "float k() { return 5.0; }\n")  # an import
            assert run(slangtorch.loadModule(main), dev) == 25.0
            _write(os.path.join(d, "pre.h"), PRE % 20)  # a prelude
            assert run(slangtorch.loadModule(main), dev) == 35.0
            _write(main, src.replace("FACTOR", "1.0"))
            _write(os.path.join(d, "helper.slang"), "float k() { return 2.0; }\n")
            _write(os.path.join(d, "pre.h"), PRE % 10)
            assert run(slangtorch.loadModule(main), dev) == 12.0
    finally:
        shutil.rmtree(d)


def test_relative_path_then_chdir():
    """loadModule('m.slang') from the module's directory, then a chdir before the first launch
    (kernels compile lazily): imports and preludes still resolve beside the files (seed 000's
    image_model.py loads 'image-model.slang' relative; its prelude sits beside inline-mlp.slang)."""
    torch = pytest.importorskip("torch")
    d = tempfile.mkdtemp()
    old = os.getcwd()
    try:
        _write(os.path.join(d, "pre.h"), PRE % 10)
        _write(os.path.join(d, "helper_mod.slang"),
               "float pre() { __target_switch { case cpp: __requirePrelude(\"#include \\\"pre.h\\\"\");"
               " __intrinsic_asm \"pre_k()\"; case cuda: __requirePrelude(\"#include \\\"pre.h\\\"\");"
               " __intrinsic_asm \"pre_k()\"; } }\n")
        _write(os.path.join(d, "rel.slang"), "import helper_mod;\n"
               "[AutoPyBindCUDA] [CudaKernel] void f(TensorView<float> y)\n"
               "{ if (cudaThreadIdx().x == 0) y[0] = pre(); }\n")
        os.chdir(d)
        m = slangtorch.loadModule("rel.slang", includePaths=["."])
        os.chdir(old)
        for dev in tdevices():
            y = torch.zeros(1, device=dev)
            m.f(y=y).launchRaw(blockSize=(1, 1, 1), gridSize=(1, 1, 1))
            assert y.item() == 10.0
    finally:
        os.chdir(old)
        shutil.rmtree(d)


# ---- the slangtorch tutorial (seed 002): MySquareFuncInSlang -------------------------------------


def test_tutorial_square_autograd_function():
    torch = pytest.importorskip("torch")
    import nabla as slangpy  # the tutorial's spelling: `import slangpy; slangpy.loadModule(...)`

    m = slangpy.loadModule(path("square.slang"))

    class MySquareFuncInSlang(torch.autograd.Function):
        # the tutorial's forward / backward through the [CudaKernel] kernels of square.slang
        # (its [TorchEntryPoint] host functions square_fwd / square_bwd launch them the same way)
        @staticmethod
        def forward(ctx, input):
            ctx.save_for_backward(input)
            output = torch.zeros_like(input)
            m.square_fwd_kernel(input=input, output=output).launchRaw(
                blockSize=(input.shape[0], input.shape[1], 1), gridSize=(1, 1, 1))
            return output

        @staticmethod
        def backward(ctx, grad_output):
            [input] = ctx.saved_tensors
            grad_in = torch.zeros_like(input)
            m.square_bwd_kernel(input=input, grad_in=grad_output.contiguous(), grad_output=grad_in).launchRaw(
                blockSize=(input.shape[0], input.shape[1], 1), gridSize=(1, 1, 1))
            return grad_in

    for dev in tdevices():
        x = torch.tensor([[3.0, 4.0], [0.0, 1.0]], requires_grad=True, device=dev)
        y_pred = MySquareFuncInSlang.apply(x)
        assert torch.equal(y_pred.detach(), x.detach() ** 2)
        loss = y_pred.sum()
        loss.backward()
        assert x.grad.cpu().tolist() == [[6.0, 8.0], [0.0, 2.0]]


def test_tutorial_torch_entry_points_as_written():
    # seed 002 verbatim: m.square_fwd(x) / m.square_bwd(x, g) are the [TorchEntryPoint] host
    # functions of square.slang, on CPU torch tensors here and CUDA tensors on a GPU machine
    torch = pytest.importorskip("torch")
    import nabla as slangpy

    m = slangpy.loadModule(path("square.slang"))
    x = torch.randn(2, 2)
    y = m.square_fwd(x)
    assert isinstance(y, torch.Tensor) and torch.allclose(y.cpu(), x * x)

    class MySquareFuncInSlang(torch.autograd.Function):
        @staticmethod
        def forward(ctx, input):
            ctx.save_for_backward(input)
            return m.square_fwd(input)

        @staticmethod
        def backward(ctx, grad_output):
            [input] = ctx.saved_tensors
            return m.square_bwd(input, grad_output)

    for dev in tdevices():
        x = torch.tensor([[3.0, 4.0], [0.0, 1.0]], requires_grad=True, device=dev)
        y_pred = MySquareFuncInSlang.apply(x)
        assert y_pred.device == x.device
        loss = y_pred.sum()
        loss.backward()
        assert x.grad.cpu().tolist() == [[6.0, 8.0], [0.0, 2.0]]


# ---- errors ----------------------------------------------------------------------------------------


def test_argument_errors():
    torch = pytest.importorskip("torch")
    m = slangtorch.loadModule(path("kernels.slang"))
    x, y = torch.ones(3), torch.zeros(3)
    with pytest.raises(nabla.ArgumentError, match=r"unexpected arguments: \['yy'\].*Available arguments: \['x', 'y'\]"):
        m.cube(x=x, yy=y)
    with pytest.raises(ValueError, match=r"missing required arguments: \['y'\]"):
        m.cube(x=x)
    with pytest.raises(nabla.ArgumentError, match="positional"):
        m.cube(x, y)
    with pytest.raises(nabla.ArgumentError, match="tuple of 3 integers"):
        m.cube(x=x, y=y).launchRaw(blockSize=(32, 1), gridSize=(1, 1, 1))
    with pytest.raises(ValueError, match="gridSize"):
        m.cube(x=x, y=y).launchRaw(blockSize=(32, 1, 1), gridSize=[1, 1, 1])
    with pytest.raises(nabla.ArgumentError, match=r"DiffTensorView.*got a tuple of 3"):
        m.cube(x=(x, x, x), y=y)
    with pytest.raises(nabla.ArgumentError, match="does not have a bwd-mode derivative"):
        m.affine2d.bwd(a=x, s=1.0, offset=(0.0, 0.0, 0.0), dst=y)
    # dtype: an int tensor for a TensorView<float>
    with pytest.raises(nabla.DtypeError, match="'x'"):
        m.cube(x=torch.ones(3, dtype=torch.int64), y=y).launchRaw(blockSize=(4, 1, 1), gridSize=(1, 1, 1))


def test_struct_errors_are_type_errors():
    # slang-torch's test_struct_failed_input: TypeError for too few / too many tuple items, a
    # missing or misspelled dict key
    torch = pytest.importorskip("torch")
    m = slangtorch.loadModule(path("kernels.slang"))
    a, dst = torch.ones(3), torch.zeros(3)
    for bad, msg in ((((a,), 1.0), r"Pair has 2 field\(s\) \(a, b\), got a tuple of 1"),
                     (((a, a, a), 1.0), "got a tuple of 3"),
                     ({"pair": {"a": a}, "k": 1.0}, "missing field"),
                     ({"pair": {"a": a, "bb": a}, "k": 1.0}, "unknown field.*bb"),
                     ({"pair": (a, a)}, "missing field.*k"),
                     (m.Scaled(pair=7, k=1.0), "expected Pair")):
        with pytest.raises(TypeError, match=msg):
            m.mulpair(s=bad, dst=dst)
        with pytest.raises(slangtorch.StructArgumentError):
            m.mulpair(s=bad, dst=dst)
    with pytest.raises(TypeError):
        m.Pair(a=a)  # the namedtuple itself


def test_broadcast_tensor_is_an_error():
    torch = pytest.importorskip("torch")
    m = slangtorch.loadModule(path("kernels.slang"))
    x = torch.tensor([[1.0, 2.0, 3.0, 4.0]]).expand(3, 4)[:, 0]  # stride 0
    y = torch.zeros(3)
    with pytest.raises(RuntimeError, match="zero stride"):
        m.cube(x=x, y=y)
    with pytest.raises(nabla.LayoutError):
        m.cube(x=x, y=y)
    launch1d(m.cube(x=x.contiguous(), y=y), 3)
    assert y.tolist() == [3.0, 3.0, 3.0]


@pytest.mark.parametrize("dev", tdevices())
def test_view_of_more_dims_uses_the_leading_dims(dev):
    # slang-torch's TensorView takes the tensor's rank at run time and x[i] on a [3, 4] tensor
    # reads x[i, 0] (the leading stride): nabla's rank-1 views (cube indexes x[i]) bind a tensor of
    # more dims as the view of its leading dims - the same memory, so the writes land in y itself
    # (slang-torch's tests/test.py TestBroadcastedTensorError launches a contiguous [3, 4] so)
    torch = pytest.importorskip("torch")
    m = slangtorch.loadModule(path("kernels.slang"))
    x = torch.arange(12, dtype=torch.float32, device=dev).reshape(3, 4)
    y = torch.zeros(3, 2, device=dev)
    launch1d(m.cube(x=x, y=y), 3)  # (the one-pass binding path: plain torch tensors)
    want = [v ** 3 + 2 * v for v in (0.0, 4.0, 8.0)]
    assert y[:, 0].tolist() == want and y[:, 1].tolist() == [0.0] * 3
    dy = torch.ones(3, 2, device=dev)
    dx = torch.zeros(3, 4, device=dev)
    launch1d(m.cube.bwd(x=(x, dx), y=(y, dy)), 3)  # pairs: the gradients alike
    assert dx[:, 0].tolist() == [3 * v * v + 2 for v in (0.0, 4.0, 8.0)]
    assert dx[:, 1:].abs().sum().item() == 0.0
    # numpy and nabla tensors (the general path) the same way
    if dev == "cpu":
        xn, yn = x.numpy().copy(), np.zeros((3, 2), np.float32)
        launch1d(m.cube(x=xn, y=yn), 3)
        assert yn[:, 0].tolist() == want
        xt, yt = nabla.Tensor.from_numpy(xn), nabla.Tensor.zeros((3, 2), dtype="f32")
        launch1d(m.cube(x=xt, y=yt), 3)
        assert yt.to_numpy()[:, 0].tolist() == want
    # a kernel that indexes past the leading dim is still an error (nothing written past y):
    # slang-torch's test above writes y[1], y[2] of a [1, 4] output, 32 bytes past its end
    y1 = torch.zeros(1, 4, device=dev)
    # (on CUDA launchRaw reports it late: at the module's next launch or check, here checkErrors)
    with pytest.raises(nabla.ShapeError, match=r"out-of-bounds index \[1\] into tensor 'y' of shape \[1\]"):
        launch1d(m.cube(x=x, y=y1), 3)
        slangtorch.checkErrors(m)
    # fewer dims than the kernel's indices: an error naming both (affine2d indexes a[p], p uint2)
    with pytest.raises(nabla.ShapeError, match="'a' is f32\\[3\\] but parameter 'a' is"):
        launch1d(m.affine2d(a=torch.ones(3, device=dev), s=1.0, offset=(0.0, 0.0, 0.0),
                            dst=torch.zeros(3, 3, device=dev)), 3)


def test_argument_errors_are_runtime_errors_as_in_slang_torch():
    # slang-torch's make_tensor_view raises RuntimeError for a wrong dtype, a tensor not on the
    # device and broadcast dims; nabla's ShapeError / DtypeError / LayoutError / DeviceError are
    # RuntimeErrors too (beside ValueError / TypeError), so `except RuntimeError` code moves over
    torch = pytest.importorskip("torch")
    for cls, also in ((nabla.ShapeError, ValueError), (nabla.DtypeError, TypeError),
                      (nabla.LayoutError, ValueError), (nabla.DeviceError, RuntimeError)):
        assert issubclass(cls, RuntimeError) and issubclass(cls, also) and issubclass(cls, nabla.NablaError)
    m = slangtorch.loadModule(path("kernels.slang"))
    with pytest.raises(RuntimeError, match="f64"):
        launch1d(m.cube(x=torch.ones(3, dtype=torch.float64), y=torch.zeros(3)), 3)
    with pytest.raises(nabla.DtypeError):
        launch1d(m.cube(x=torch.ones(3, dtype=torch.float64), y=torch.zeros(3)), 3)
    with pytest.raises(RuntimeError, match="zero stride"):
        m.cube(x=torch.ones(1).expand(3), y=torch.zeros(3))


@pytest.mark.parametrize("dev", tdevices())
def test_arrays_of_views(dev):
    # `TensorView<float> ws[2]` and a struct field `a[2]`: a list of tensors, one leaf per element
    torch = pytest.importorskip("torch")
    m = slangtorch.loadModule(path("view_arrays.slang"))
    x = torch.tensor([5.0, 7.0, 9.0], device=dev)
    y = torch.tensor([1.0, 2.0, 3.0], device=dev)
    r = torch.zeros(3, device=dev)
    launch1d(m.diffOf(ws=[x, y], res=r), 3)
    assert r.tolist() == [4.0, 5.0, 6.0]
    launch1d(m.mixMany(m=m.ManyViews(a=(x, y), k=10.0), res=r), 3)
    assert r.tolist() == [51.0, 72.0, 93.0]
    launch1d(m.mixMany(m={"a": [y, x], "k": 2.0}, res=r), 3)
    assert r.tolist() == [7.0, 11.0, 15.0]
    with pytest.raises(nabla.ArgumentError, match="argument 'ws': expected 2 items, got 1"):
        m.diffOf(ws=[x], res=r)
    with pytest.raises(nabla.ArgumentError, match="expected a list or tuple of 2 items"):
        m.diffOf(ws=x, res=r)


def test_mixed_devices_are_an_error():
    torch = pytest.importorskip("torch")
    if "cuda" not in tdevices():
        pytest.skip("needs a GPU")
    m = slangtorch.loadModule(path("kernels.slang"))
    with pytest.raises(nabla.DeviceError, match="different devices"):
        m.cube(x=torch.ones(3), y=torch.zeros(3, device="cuda"))


def test_repeated_launches_many_arguments_one_pass_binding():
    # the per-call path: the kernel attribute cached on the module, plain tensors and numbers bound
    # in one pass (9 arguments, ints and floats), the same results launch after launch
    torch = pytest.importorskip("torch")
    tmp = tempfile.mkdtemp()
    try:
        p = os.path.join(tmp, "many.slang")
        with open(p, "w") as f:
            f.write("[AutoPyBindCUDA] [CudaKernel]\n"
                    "void many(TensorView<float> a, TensorView<float> b, TensorView<float> c,\n"
                    "          TensorView<float> d, float s0, float s1, float s2, int k, TensorView<float> o)\n"
                    "{\n"
                    "    uint i = (cudaBlockIdx() * cudaBlockDim() + cudaThreadIdx()).x;\n"
                    "    if (i >= o.size(0)) return;\n"
                    "    o[i] = a[i] * s0 + b[i] * s1 + c[i] * s2 + d[i] * float(k);\n"
                    "}\n")
        m = slangtorch.loadModule(p)
        assert m.many is m.many
        for dev in tdevices():
            a, b, c, d = (torch.arange(5, dtype=torch.float32, device=dev) * s for s in (1, 10, 100, 1000))
            for i in range(4):
                o = torch.zeros(5, device=dev)
                lo = m.many(a=a, b=b, c=c, d=d, s0=1.0, s1=2, s2=0.5, k=i, o=o)
                assert repr(lo) == f"<slangtorch launch many on {'cpu' if dev == 'cpu' else 'cuda:0'}>"
                lo.launchRaw(blockSize=(2, 1, 1), gridSize=(3, 1, 1))
                assert torch.allclose(o, a + 2 * b + 0.5 * c + i * d)
            # a wrong name, a missing one and a broadcast tensor still take the checked path
            with pytest.raises(nabla.ArgumentError, match=r"unexpected arguments: \['oo'\]"):
                m.many(a=a, b=b, c=c, d=d, s0=1.0, s1=2, s2=0.5, k=1, oo=o)
            with pytest.raises(nabla.ArgumentError, match=r"missing required arguments: \['o'\]"):
                m.many(a=a, b=b, c=c, d=d, s0=1.0, s1=2, s2=0.5, k=1)
            with pytest.raises(slangtorch.BroadcastError):
                m.many(a=torch.ones(1, device=dev).expand(5), b=b, c=c, d=d, s0=1.0, s1=2, s2=0.5, k=1, o=o)
    finally:
        shutil.rmtree(tmp)


def test_deferred_bounds_errors():
    # launch_raw(defer_checks=True) (the default on CUDA: no wait for the GPU per launch): an
    # out-of-range index is raised by the module's next check point, naming the kernel, tensor and
    # launch number; in-range launches raise nothing; one error is raised once
    for dev in ["cpu"] + (["cuda"] if "cuda" in devices() else []):
        mod = nabla.load_module(path("blocks.slang"), nabla.device(dev))
        f, g = mod.unchecked, mod.where
        dst = nabla.Tensor.from_numpy(np.zeros(8, np.float32), device=nabla.device(dev))
        ids = nabla.Tensor.from_numpy(np.zeros((4, 9), np.int32), device=nabla.device(dev))
        f.launch_raw((4, 1, 1), (2, 1, 1), "primal", {"dst": dst}, defer_checks=True)  # launch #1
        mod.check_errors()  # nothing pending
        f.launch_raw((4, 1, 1), (3, 1, 1), "primal", {"dst": dst}, defer_checks=True)  # #2: 12 > 8
        with pytest.raises(nabla.ShapeError, match=r"out-of-bounds index \[8\] into tensor 'dst' of "
                           r"shape \[8\] in function 'unchecked' \(launch #2 of this module, reported late\)"):
            g.launch_raw((2, 1, 1), (2, 1, 1), "primal", {"ids": ids}, defer_checks=True)
        g.launch_raw((2, 1, 1), (2, 1, 1), "primal", {"ids": ids}, defer_checks=True)  # #3: cleared
        assert ids.numpy()[3, 3] == 1
        f.launch_raw((4, 1, 1), (3, 1, 1), "primal", {"dst": dst}, defer_checks=True)  # #4
        with pytest.raises(nabla.ShapeError, match=r"launch #4 of this module"):
            mod.check_errors()
        mod.check_errors()
        # defer_checks=False: the launch's own error, on every device
        with pytest.raises(nabla.ShapeError, match="out-of-bounds index"):
            f.launch_raw((4, 1, 1), (3, 1, 1), "primal", {"dst": dst}, defer_checks=False)
        mod.check_errors()


def test_deferred_bounds_errors_at_sync_points():
    # nabla's own sync points raise a deferred launch's error too: reading a tensor back
    # (to_numpy), Device.synchronize(); a module freed with one pending leaves it to the device
    import gc
    for dev in ["cpu"] + (["cuda"] if "cuda" in devices() else []):
        d = nabla.device(dev)
        mod = nabla.load_module(path("blocks.slang"), d)
        f = mod.unchecked
        dst = nabla.Tensor.from_numpy(np.zeros(8, np.float32), device=d)
        f.launch_raw((4, 1, 1), (2, 1, 1), "primal", {"dst": dst}, defer_checks=True)  # #1: in range
        assert dst.to_numpy().shape == (8,)
        d.synchronize()
        f.launch_raw((4, 1, 1), (3, 1, 1), "primal", {"dst": dst}, defer_checks=True)  # #2: 12 > 8
        with pytest.raises(nabla.ShapeError, match=r"in function 'unchecked' \(launch #2 of this module, "
                           r"reported late\)"):
            dst.to_numpy()
        dst.to_numpy()  # (reported once)
        f.launch_raw((4, 1, 1), (3, 1, 1), "primal", {"dst": dst}, defer_checks=True)  # #3
        with pytest.raises(nabla.ShapeError, match=r"launch #3 of this module"):
            d.synchronize()
        d.synchronize()
        f.launch_raw((4, 1, 1), (3, 1, 1), "primal", {"dst": dst}, defer_checks=True)  # #4
        del f, mod
        gc.collect()
        with pytest.raises(nabla.ShapeError, match=r"launch #4 of this module, reported late\) \(module "
                           r"'.*blocks.slang' was freed before this was reported\)"):
            d.synchronize()
        d.synchronize()


def test_check_errors_slangtorch():
    # slangtorch.checkErrors(m): the check point of every device m is loaded on
    m = slangtorch.loadModule(path("blocks.slang"))
    dst = np.zeros(8, np.float32)
    m.unchecked(dst=dst).launchRaw(blockSize=(8, 1, 1), gridSize=(1, 1, 1))
    slangtorch.checkErrors(m)
    with pytest.raises(nabla.ShapeError, match="out-of-bounds index"):  # the CPU: at once
        m.unchecked(dst=dst).launchRaw(blockSize=(4, 1, 1), gridSize=(3, 1, 1))
    slangtorch.checkErrors(m)
    with pytest.raises(slangtorch.ArgumentError, match="checkErrors: expected a module"):
        slangtorch.checkErrors("blocks.slang")


def test_launch_on_torch_current_stream():
    # a launch of torch CUDA tensors runs on torch's current stream (no ordering between streams):
    # a side stream made busy by matmuls, written by torch before the launch and read after it;
    # with a nabla.Tensor among the arguments nabla's stream is ordered both ways instead
    torch = pytest.importorskip("torch")
    if "cuda" not in devices() or not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    m = slangtorch.loadModule(path("blocks.slang"))
    n = 1 << 16
    dst = torch.zeros(n, device="cuda")
    nb_dst = nabla.Tensor.from_numpy(np.zeros(n, np.float32), device=nabla.device("cuda"))
    big = torch.rand((4096, 4096), device="cuda")
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        for k in range(3):
            big = big @ big
            big = big / big.abs().max()
            dst.fill_(-1)  # torch's write before the launch
            m.unchecked(dst=dst).launchRaw(blockSize=(256, 1, 1), gridSize=(n // 256, 1, 1))
            dst.add_(1)  # torch's read after it
            assert torch.equal(dst, torch.arange(n, device="cuda", dtype=torch.float32) + 1)
            m.unchecked(dst=nb_dst).launchRaw(blockSize=(256, 1, 1), gridSize=(n // 256, 1, 1))
            assert nb_dst.numpy()[n - 1] == n - 1
    torch.cuda.synchronize()
    slangtorch.checkErrors(m)
