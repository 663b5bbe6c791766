"""Vector add, C = A + B on fp16 vectors: the problem, its rungs and their launchers.

Rungs: cuda:1_scalar (2-byte loads), cuda:2_vectorized (16-byte loads), triton:1_blocked,
and torch:add, the library version everyone is compared with.
"""
from __future__ import annotations

import numpy as np
import torch
import triton

from ladder.runtime import cuda, validate
from ladder.problems import Problem, Rung, register
from ladder.runtime.world import device
from kernels.triton.vector_add import vector_add_kernel

THREADS = 256
SCALAR_ELEMS_PER_THREAD = 4  # must match ELEMS_PER_THREAD in 1_scalar.cu
TRITON_BLOCK = 4096


def _prepare(a, b, out, *, where: str, align: int = 0):
    for name, t in (("a", a), ("b", b)):
        validate.tensor(name, t, dtype=torch.float16, ndim=1, device=where, align_bytes=align)
    validate.same_shape(a=a, b=b)
    if out is None:
        out = torch.empty_like(a)
    validate.tensor("out", out, dtype=torch.float16, ndim=1, device=where, align_bytes=align)
    validate.same_shape(a=a, out=out)
    return out


def cuda_scalar(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    out = _prepare(a, b, out, where="cuda")
    n = a.numel()
    per_block = THREADS * SCALAR_ELEMS_PER_THREAD
    if n:
        module = cuda.load("vector_add/1_scalar.cu", {"ELEMS_PER_THREAD": SCALAR_ELEMS_PER_THREAD})
        cuda.launch(module, "vector_add", (n + per_block - 1) // per_block, THREADS, (a, b, out, np.int64(n)))
    return out


def cuda_vectorized(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    out = _prepare(a, b, out, where="cuda", align=16)
    n = a.numel()
    threads_needed = n // 8 + 1  # one per 8-wide vector, plus one for the tail
    if n:
        module = cuda.load("vector_add/2_vectorized.cu")
        cuda.launch(module, "vector_add", (threads_needed + THREADS - 1) // THREADS, THREADS, (a, b, out, np.int64(n)))
    return out


def triton_add(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    out = _prepare(a, b, out, where=device())
    n = a.numel()
    if n:
        vector_add_kernel[(triton.cdiv(n, TRITON_BLOCK),)](a, b, out, n, BLOCK=TRITON_BLOCK)
    return out


def torch_add(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    out = _prepare(a, b, out, where=device())
    return torch.add(a, b, out=out)


def _make_inputs(shape: tuple, where: str, gen: torch.Generator) -> tuple:
    (n,) = shape
    return tuple(torch.randn(n, generator=gen, device=where, dtype=torch.float32).to(torch.float16)
                 for _ in range(2))


PROBLEM = register(Problem(
    name="vector_add",
    flops=lambda s: s[0],                 # one add per element
    min_bytes=lambda s: 3 * 2 * s[0],     # read A, read B, write C; 2 bytes each
    make_inputs=_make_inputs,
    reference=lambda a, b: a.float() + b.float(),  # exact: fp16 + fp16 fits fp32
    new_output=lambda s, where: torch.empty(s, dtype=torch.float16, device=where),
    check_shapes=[(1,), (7,), (1000,), (4097,), (65_543,), (1_000_003,)],
    bench_shapes=[(100_000_000,), (1_000_000_000,)],
    interpret_shapes=[(1,), (7,), (1000,), (4097,)],
    compute_roof="fp32_TFLOPs",  # adds run on CUDA cores
    rungs=[
        Rung("cuda", "1_scalar", cuda_scalar, "kernels/cuda/vector_add/1_scalar.cu"),
        Rung("cuda", "2_vectorized", cuda_vectorized, "kernels/cuda/vector_add/2_vectorized.cu"),
        Rung("triton", "1_blocked", triton_add, "kernels/triton/vector_add.py"),
        Rung("torch", "add", torch_add),
    ],
))
