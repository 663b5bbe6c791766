"""Which of the three worlds are we in: a GPU, a T4-class GPU, or CPU only.

The decision is made once, at import, and before Triton kernels are defined, because
`@triton.jit` reads TRITON_INTERPRET when it decorates.
"""
from __future__ import annotations

import importlib.metadata
import os
from dataclasses import dataclass

import torch

from ladder.runtime.errors import NotAvailable
from ladder.runtime import hardware


def has_gpu() -> bool:
    return torch.cuda.is_available()


def device() -> str:
    return "cuda" if has_gpu() else "cpu"


@dataclass(frozen=True)
class World:
    gpu: bool

    @property
    def name(self) -> str:
        if self.gpu:
            gpu = hardware.detect()
            return f"GPU ({gpu.emulation_note or gpu.name})"
        return "CPU only (Triton interpreter, compile-only CUDA, recorded timings)"


def _decide() -> World:
    # Triton 3.9 warns on every first compile that its FP-fusion default (a*b+c -> FMA) will flip in 3.10
    # unless this is set. Our recordings were made with fusion on, so we keep it on and say so explicitly.
    os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")
    gpu = has_gpu()
    if not gpu:
        os.environ.setdefault("TRITON_INTERPRET", "1")
        check_interpreter()
    return World(gpu=gpu)


def check_interpreter() -> None:
    """Triton 3.6's interpreter turns one-element arrays into Python ints, which NumPy 2.4 refuses (every Triton
    kernel then fails on CPU with "only 0-dimensional arrays can be converted to Python scalars"); Triton 3.7
    fixed it. Say so once, at import, rather than in every kernel."""
    triton_v, numpy_v = importlib.metadata.version("triton"), importlib.metadata.version("numpy")
    if _release(triton_v) < (3, 7) and _release(numpy_v) >= (2, 4):
        raise NotAvailable(f"Triton {triton_v}'s interpreter (the CPU world) cannot run with NumPy {numpy_v}: "
                           "`pip install -U triton` (3.7 or newer) or `pip install \"numpy<2.4\"`.")


def _release(text: str) -> tuple[int, int]:
    return tuple(int(part) for part in text.split(".")[:2])


WORLD = _decide()


def require_gpu(what: str) -> None:
    if not WORLD.gpu:
        raise NotAvailable(f"{what} needs a CUDA GPU; none is visible here (CPU-only world).")
