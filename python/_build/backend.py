"""PEP 517 backend for `pip install ./python` without network access and without `wheel`.

pip's build isolation hides the interpreter's site-packages and would download setuptools and
wheel; this backend puts the interpreter's own site-packages back on sys.path (where Debian's
python3-setuptools lives), builds the extension with setuptools' plain `build` command (which,
unlike setuptools' `bdist_wheel` before setuptools 70.1, does not need the `wheel` package) and
writes the wheel itself: a zip of the built files plus METADATA (from pyproject.toml's [project]),
WHEEL and RECORD. It asks for nothing more (get_requires_* return []), so both
`pip install ./python` and `pip install --no-build-isolation ./python` work with setuptools alone.
"""
import base64
import contextlib
import hashlib
import os
import re
import site
import sys
import sysconfig
import tempfile
import zipfile

for _p in site.getsitepackages():
    if _p not in sys.path:
        sys.path.append(_p)

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # python/


def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def _project():
    import tomllib

    with open(os.path.join(HERE, "pyproject.toml"), "rb") as f:
        return tomllib.load(f)["project"]


def _metadata(p):
    lines = ["Metadata-Version: 2.1", f"Name: {p['name']}", f"Version: {p['version']}"]
    if p.get("description"):
        lines.append(f"Summary: {p['description']}")
    if p.get("requires-python"):
        lines.append(f"Requires-Python: {p['requires-python']}")
    lic = p.get("license", {})
    if isinstance(lic, dict) and lic.get("text"):
        lines.append(f"License: {lic['text']}")
    for req in p.get("dependencies", []):
        lines.append(f"Requires-Dist: {req}")
    for extra, reqs in p.get("optional-dependencies", {}).items():
        lines.append(f"Provides-Extra: {extra}")
        for req in reqs:
            lines.append(f'Requires-Dist: {req}; extra == "{extra}"')
    return "\n".join(lines) + "\n"


@contextlib.contextmanager
def _cwd(path):
    old = os.getcwd()
    os.chdir(path)
    try:
        yield
    finally:
        os.chdir(old)


def _run_setup(args):
    import setuptools  # noqa: F401  (installs its distutils)
    from distutils.core import run_setup

    saved = sys.argv[:]
    try:
        with _cwd(HERE):
            run_setup("setup.py", script_args=args, stop_after="run")
    finally:
        sys.argv = saved


def _record_line(arcname, data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{arcname},sha256={digest},{len(data)}"


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    p = _project()
    name = re.sub(r"[-_.]+", "_", p["name"])
    version = p["version"]
    plat = re.sub(r"[-.]", "_", sysconfig.get_platform())
    tag = f"cp311-abi3-{plat}"  # one stable-ABI module for CPython >= 3.11 (setup.py)
    dist_info = f"{name}-{version}.dist-info"
    wheel_name = f"{name}-{version}-{tag}.whl"
    with tempfile.TemporaryDirectory(prefix="nabla-build-") as tmp:
        lib = os.path.join(tmp, "lib")
        jobs = str(min(os.cpu_count() or 1, 8))
        _run_setup(["build", "--build-lib", lib, "--build-temp", os.path.join(tmp, "temp"), "-j", jobs])
        built = []
        for root, dirs, files in os.walk(lib):
            dirs.sort()
            for fn in sorted(files):
                full = os.path.join(root, fn)
                built.append((os.path.relpath(full, lib).replace(os.sep, "/"), full))
        if not any(arc.startswith("nabla/_nabla") for arc, _ in built):
            raise RuntimeError("nabla: the build produced no nabla/_nabla extension")
        records = []
        path = os.path.join(wheel_directory, wheel_name)
        with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
            for arc, full in built:
                with open(full, "rb") as f:
                    data = f.read()
                z.writestr(arc, data)
                records.append(_record_line(arc, data))
            meta = {
                "METADATA": _metadata(p),
                "WHEEL": "Wheel-Version: 1.0\nGenerator: nabla _build/backend.py\n"
                         f"Root-Is-Purelib: false\nTag: {tag}\n",
            }
            for fn, text in meta.items():
                arc = f"{dist_info}/{fn}"
                z.writestr(arc, text)
                records.append(_record_line(arc, text.encode()))
            records.append(f"{dist_info}/RECORD,,")
            z.writestr(f"{dist_info}/RECORD", "\n".join(records) + "\n")
    return wheel_name


def build_sdist(sdist_directory, config_settings=None):
    from setuptools import build_meta

    return build_meta.build_sdist(sdist_directory, config_settings)
