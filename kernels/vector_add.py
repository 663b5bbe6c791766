"""Vector add, C = A + B on fp16 vectors: the problem and its rungs.

Rungs: cuda:1_scalar (2-byte loads) and cuda:2_vectorized (16-byte loads), launched by kernels/cuda/vector_add.py;
triton:1_blocked (kernels/triton/vector_add.py's kernel and launcher); and torch:add, the library version everyone
is compared with.
"""
from __future__ import annotations

import torch

from ladder.problems import Problem, Rung, register
from ladder.runtime import validate
from ladder.runtime.world import device
from kernels.cuda import vector_add as cuda_vector_add
from kernels.triton import vector_add as triton_vector_add


def torch_add(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    out = validate.vector_operands(a, b, out, device=device())
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
        Rung("cuda", "1_scalar", cuda_vector_add.scalar, "kernels/cuda/vector_add/1_scalar.cu"),
        Rung("cuda", "2_vectorized", cuda_vector_add.vectorized, "kernels/cuda/vector_add/2_vectorized.cu"),
        Rung("triton", "1_blocked", triton_vector_add.blocked, "kernels/triton/vector_add.py"),
        Rung("torch", "add", torch_add),
    ],
))
