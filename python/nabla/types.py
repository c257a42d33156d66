"""SlangPy's `slangpy.types` spelling: `from nabla.types import Tensor, NDBuffer`."""
from . import NDBuffer, SlangType, Tensor  # noqa: F401

__all__ = ["Tensor", "NDBuffer", "SlangType"]
