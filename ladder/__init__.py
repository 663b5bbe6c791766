"""Kernel Ladder: the harness behind the notebooks.

Importing `ladder` first decides which world we are in (GPU, or CPU with Triton's interpreter)
and sets TRITON_INTERPRET=1 before any Triton kernel is defined when there is no GPU.
"""
from ladder.runtime.world import WORLD, has_gpu, device  # noqa: F401  (must run first)
from ladder.runtime.errors import NotAvailable  # noqa: F401

__version__ = "0.1.0"
