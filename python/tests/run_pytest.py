"""Runs the nabla Python test suite (CTest test `python`); exit 77 = skipped when numpy or
pytest is missing for this interpreter."""
import sys

try:
    import numpy  # noqa: F401
    import pytest
except ImportError as e:
    print(f"skipped: {e} (install python3-numpy python3-pytest)")
    sys.exit(77)

sys.exit(pytest.main(["-q", "-p", "no:cacheprovider", *sys.argv[1:]]))
