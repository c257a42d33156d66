"""PEP 517 backend for `pip install ./python` without network access.

pip's build isolation hides the interpreter's site-packages and would download setuptools (and
wheel); this backend puts the interpreter's own site-packages back on sys.path (where Debian's
python3-setuptools lives) and then delegates to setuptools.build_meta, asking for nothing more."""
import site
import sys

for _p in site.getsitepackages():
    if _p not in sys.path:
        sys.path.append(_p)

from setuptools import build_meta as _bm  # noqa: E402

build_wheel = _bm.build_wheel
build_sdist = _bm.build_sdist
prepare_metadata_for_build_wheel = getattr(_bm, "prepare_metadata_for_build_wheel", None)
build_editable = getattr(_bm, "build_editable", None)
prepare_metadata_for_build_editable = getattr(_bm, "prepare_metadata_for_build_editable", None)


def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def get_requires_for_build_editable(config_settings=None):
    return []
