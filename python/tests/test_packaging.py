"""The in-tree PEP 517 backend (python/_build/backend.py): a wheel without the `wheel` package.

The real build compiles the whole C library (minutes), so here setuptools' `build` step is
replaced by a stand-in that lays out what it would produce; everything else (metadata from
pyproject.toml, the wheel's files, RECORD hashes, the tag) is the backend's own code, run with
`wheel` made unimportable. The full `pip install` is checked by hand (docs/PYTHON.md)."""
import base64
import hashlib
import os
import subprocess
import sys
import zipfile

from nbtest import ROOT

BACKEND = os.path.join(ROOT, "python", "_build", "backend.py")

SCRIPT = r"""
import importlib.util, os, sys
sys.modules["wheel"] = None          # as on a Python without the wheel package
sys.modules["wheel.bdist_wheel"] = None
spec = importlib.util.spec_from_file_location("nb_backend", sys.argv[1])
b = importlib.util.module_from_spec(spec)
spec.loader.exec_module(b)
assert b.get_requires_for_build_wheel() == [] and b.get_requires_for_build_sdist() == []

def fake_build(args):
    lib = args[args.index("--build-lib") + 1]
    os.makedirs(os.path.join(lib, "nabla"))
    with open(os.path.join(lib, "nabla", "__init__.py"), "w") as f:
        f.write("x = 1\n")
    with open(os.path.join(lib, "nabla", "_nabla.abi3.so"), "wb") as f:
        f.write(b"\x7fELF fake")

b._run_setup = fake_build
print(b.build_wheel(sys.argv[2]))
"""


def test_backend_builds_a_wheel_without_the_wheel_package(tmp_path):
    r = subprocess.run([sys.executable, "-c", SCRIPT, BACKEND, str(tmp_path)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    name = r.stdout.strip().splitlines()[-1]
    assert name.startswith("nabla-0.1.0-cp311-abi3-") and name.endswith(".whl")
    with zipfile.ZipFile(tmp_path / name) as z:
        names = set(z.namelist())
        assert {"nabla/__init__.py", "nabla/_nabla.abi3.so", "nabla-0.1.0.dist-info/METADATA",
                "nabla-0.1.0.dist-info/WHEEL", "nabla-0.1.0.dist-info/RECORD"} <= names
        meta = z.read("nabla-0.1.0.dist-info/METADATA").decode()
        assert "Name: nabla\n" in meta and "Requires-Python: >=3.11" in meta
        assert 'Requires-Dist: numpy; extra == "numpy"' in meta
        wheel = z.read("nabla-0.1.0.dist-info/WHEEL").decode()
        assert "Root-Is-Purelib: false" in wheel and "Tag: cp311-abi3-" in wheel
        record = z.read("nabla-0.1.0.dist-info/RECORD").decode().splitlines()
        rows = {line.split(",")[0]: line.split(",")[1:] for line in record}
        assert set(rows) == names
        for arc, (digest, size) in rows.items():
            if arc.endswith("RECORD"):
                assert digest == "" and size == ""
                continue
            data = z.read(arc)
            want = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            assert digest == "sha256=" + want and int(size) == len(data), arc


def test_backend_refuses_a_build_without_the_extension(tmp_path):
    script = SCRIPT.replace('    with open(os.path.join(lib, "nabla", "_nabla.abi3.so"), "wb") as f:\n'
                            '        f.write(b"\\x7fELF fake")\n', "")
    assert script != SCRIPT
    r = subprocess.run([sys.executable, "-c", script, BACKEND, str(tmp_path)], capture_output=True, text=True)
    assert r.returncode != 0 and "no nabla/_nabla extension" in r.stderr
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".whl")]  # no half-made wheel
