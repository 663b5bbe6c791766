"""Which of the three worlds are we in: a GPU, a T4-class GPU, or CPU only.

The decision is made once, at import, and before Triton kernels are defined, because
`@triton.jit` reads TRITON_INTERPRET when it decorates.
"""
from __future__ import annotations

import os
from dataclasses import dataclass

import torch


class NotAvailable(RuntimeError):
    """Something cannot run in this world (no GPU, GPU too old, library missing).

    Notebooks catch it and print its message instead of a traceback.
    """


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
            return f"GPU ({torch.cuda.get_device_name()})"
        return "CPU only (Triton interpreter, compile-only CUDA, recorded timings)"


def _decide() -> World:
    gpu = has_gpu()
    if not gpu:
        os.environ.setdefault("TRITON_INTERPRET", "1")
    return World(gpu=gpu)


WORLD = _decide()


def require_gpu(what: str) -> None:
    if not WORLD.gpu:
        raise NotAvailable(f"{what} needs a CUDA GPU; none is visible here (CPU-only world).")
