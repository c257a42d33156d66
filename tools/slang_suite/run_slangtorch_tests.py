#!/usr/bin/env python3
"""Runs slang-torch's own tests/test.py with `import slangtorch` mapped to nabla.slangtorch.

    tools/slang_suite/run_slangtorch_tests.py [--mirror GITDIR | --tests DIR] [--cpu] [-v] [-k PAT]
    tools/slang_suite/run_slangtorch_tests.py --extract-to DIR [--mirror GITDIR]

The tests are not part of this repository: they are read from a slang-torch checkout's git
directory (--mirror, default /work/.mirror/shader-slang+slang-torch/repo; `git archive HEAD
tests`) into a temporary directory, or from a directory that already holds them (--tests DIR:
test.py and its .slang / .cuh files, e.g. made by --extract-to on a machine with the mirror, for a
GPU machine without it). A small launcher puts nabla.slangtorch in sys.modules as `slangtorch`,
loads test.py from there and runs it with unittest, printing one line per test and a total:

    slang-torch tests/test.py on nabla: P passed, F failed, E errors, S skipped (of N)

The tests use CUDA tensors (`.cuda()`, device='cuda'). --cpu runs them on a machine without a GPU
by mapping those to the CPU (torch.Tensor.cuda returns the tensor, device='cuda...' arguments of
torch's factory functions become 'cpu'), so nabla runs the kernels through its C back end: a check
of the Python API's behaviour, not of CUDA. Needs torch and nabla importable (PYTHONPATH=build/python).
Exit status: 0 when nothing failed, 1 otherwise.
"""
import argparse
import importlib.util
import io
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import unittest

MIRROR = "/work/.mirror/shader-slang+slang-torch/repo"


def extract(mirror, dest):
    """tests/test.py and the files it loads (.slang, .cuh) from the git dir into dest."""
    data = subprocess.run(["git", "-C", mirror, "archive", "--format=tar", "HEAD", "tests"],
                          check=True, capture_output=True).stdout
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        for m in tar.getmembers():
            name = m.name.split("/", 1)[1] if "/" in m.name else ""
            if not m.isfile() or "/" in name or not name.endswith((".py", ".slang", ".cuh")):
                continue  # only the top of tests/ (not its committed build cache)
            with open(os.path.join(dest, name), "wb") as f:
                f.write(tar.extractfile(m).read())


def emulate_cuda_on_cpu(torch):
    """--cpu: .cuda() and device='cuda...' arguments stay on the CPU."""

    def cpu_device(d):
        s = str(d) if d is not None else ""
        return "cpu" if s.startswith("cuda") else d

    torch.Tensor.cuda = lambda self, *a, **k: self

    def wrap(fn):
        def f(*a, **k):
            if "device" in k:
                k["device"] = cpu_device(k["device"])
            return fn(*a, **k)

        f.__name__ = fn.__name__
        return f

    for name in ("tensor", "zeros", "ones", "empty", "full", "arange", "linspace", "rand", "randn",
                 "zeros_like", "ones_like", "empty_like", "full_like", "rand_like", "randn_like"):
        setattr(torch, name, wrap(getattr(torch, name)))


class Result(unittest.TextTestResult):
    def __init__(self, *a, **k):
        super().__init__(*a, **k)
        self.passed = []

    def addSuccess(self, test):
        super().addSuccess(test)
        self.passed.append(test)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mirror", default=MIRROR, help="slang-torch git directory (default %(default)s)")
    ap.add_argument("--tests", help="a directory holding test.py and its .slang files")
    ap.add_argument("--extract-to", help="only extract the tests into this directory")
    ap.add_argument("--cpu", action="store_true", help="map CUDA tensors to the CPU (no GPU here)")
    ap.add_argument("-k", dest="pattern", help="run only tests whose id contains this")
    ap.add_argument("-v", action="store_true", help="print each failure's traceback")
    args = ap.parse_args()

    if args.extract_to:
        os.makedirs(args.extract_to, exist_ok=True)
        extract(args.mirror, args.extract_to)
        print(f"extracted slang-torch tests into {args.extract_to}")
        return 0

    tmp = tempfile.mkdtemp(prefix="slangtorch-tests-")
    try:
        if args.tests:
            for name in os.listdir(args.tests):
                if name.endswith((".py", ".slang", ".cuh")):
                    shutil.copy(os.path.join(args.tests, name), tmp)
        else:
            extract(args.mirror, tmp)
        if not os.path.exists(os.path.join(tmp, "test.py")):
            print("no test.py found", file=sys.stderr)
            return 2

        import torch
        import nabla.slangtorch

        sys.modules["slangtorch"] = nabla.slangtorch
        if args.cpu:
            emulate_cuda_on_cpu(torch)
        spec = importlib.util.spec_from_file_location("slangtorch_test", os.path.join(tmp, "test.py"))
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)

        suite = unittest.defaultTestLoader.loadTestsFromModule(mod)
        if args.pattern:
            def keep(s):
                out = unittest.TestSuite()
                for t in s:
                    if isinstance(t, unittest.TestSuite):
                        out.addTests(keep(t))
                    elif args.pattern in t.id():
                        out.addTest(t)
                return out
            suite = keep(suite)
        stream = io.StringIO()
        runner = unittest.TextTestRunner(stream=stream, resultclass=Result, verbosity=0)
        res = runner.run(suite)

        rows = [(t.id(), "PASS", "") for t in res.passed]
        rows += [(t.id(), "FAIL", tb) for t, tb in res.failures]
        rows += [(t.id(), "ERROR", tb) for t, tb in res.errors]
        rows += [(t.id(), "SKIP", why) for t, why in res.skipped]
        for tid, what, tb in sorted(rows):
            line = tb.strip().splitlines()[-1] if tb.strip() else ""
            print(f"{what:5} {tid.replace('slangtorch_test.', '')}" + (f"  -- {line}" if what != "PASS" and line else ""))
            if args.v and what in ("FAIL", "ERROR"):
                print("      " + tb.replace("\n", "\n      "))
        where = "the CPU (CUDA emulated)" if args.cpu else "CUDA" if torch.cuda.is_available() else "CPU"
        print(f"slang-torch tests/test.py on nabla ({where}): {len(res.passed)} passed, "
              f"{len(res.failures)} failed, {len(res.errors)} errors, {len(res.skipped)} skipped "
              f"(of {res.testsRun})")
        return 0 if res.wasSuccessful() else 1
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
