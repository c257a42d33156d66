"""Runs the nabla Python test suite (CTest test `python`): with pytest when this interpreter has
it, else with the suite's own stand-in (minipytest.py: the parts of pytest the tests use), so a
machine without pytest (the GPU machines) still runs every test. Exit 77 = skipped: numpy missing."""
import os
import sys

try:
    import numpy  # noqa: F401
except ImportError as e:
    print(f"skipped: {e} (install python3-numpy)")
    sys.exit(77)

try:
    import pytest
except ImportError:
    pytest = None

if pytest is None:
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path.insert(0, here)
    import minipytest

    print("pytest not installed: running the suite with minipytest.py")
    sys.exit(minipytest.main(sys.argv[1] if len(sys.argv) > 1 else here))
sys.exit(pytest.main(["-q", "-p", "no:cacheprovider", *sys.argv[1:]]))
