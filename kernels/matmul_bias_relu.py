"""Fused matmul + bias + ReLU, C = relu(A·B + bias): what fusion saves is bytes, not FLOPs.

A (M×K) and B (K×N) fp16 row-major, bias fp16 of length N (one per column), fp32 sums, C fp16.
Rungs: torch:three_ops (matmul, add, relu: three kernels, the M×N intermediate goes through DRAM
between them), torch:compile (the same three calls through torch.compile, GPU only), and
triton:fused (rung 6's kernel with its epilogue on: bias and ReLU applied to the fp32 tile in
registers before the one fp16 store; the kernel is kernels/triton/matmul.py's, searched per shape as rung 6 is, by
kernels/matmul_triton_search.py). `bytes_moved` counts what each variant moves.

The same epilogue with GELU instead of ReLU (the MLP of a GPT-2-shaped transformer, lesson 05):
`three_ops_gelu` (eager: matmul, add, GELU) and `fused_gelu` (one kernel), checked against `reference_gelu`.
GELU here is its tanh form, as GPT-2 uses it: torch.nn.functional.gelu(x, approximate="tanh").
"""
from __future__ import annotations

import functools

import torch
import torch.nn.functional as F

from ladder.runtime import validate
from ladder.problems import Problem, Rung, register
from ladder.runtime.world import device
from kernels import matmul_triton_search as triton_search
from kernels.matmul import CUDA_CORE_DOT
from kernels.triton import matmul as triton_matmul


def _operands(a, b, bias, out):
    M, N, K, out = validate.matmul_operands(a, b, out, device=device())
    validate.tensor("bias", bias, dtype=torch.float16, ndim=1, device=device())
    if bias.shape[0] != N:
        raise ValueError(f"bias has {bias.shape[0]} elements; a @ b has N={N} columns")
    return out


def _three_calls(a, b, bias, out):
    # clamp(min=0) is ReLU, and unlike torch.relu it can write into `out`
    return torch.clamp(torch.matmul(a, b) + bias, min=0, out=out)


def three_ops(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """Eager PyTorch: a matmul kernel, an add kernel and a ReLU kernel, each a full pass over M×N."""
    return _three_calls(a, b, bias, _operands(a, b, bias, out))


@functools.cache
def _compiled():
    # dynamic=False: a graph per shape, specialized as the Triton kernel is (the 6 check and benchmark
    # shapes stay under Dynamo's limit of 8 recompiles). TORCH_LOGS=output_code prints the kernels.
    return torch.compile(_three_calls, dynamic=False)


def compiled(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """The same three calls through torch.compile: Inductor decides what to fuse."""
    return _compiled()(a, b, bias, _operands(a, b, bias, out))


def fused(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """Triton rung 6's kernel with its bias + ReLU epilogue: one kernel, C written once."""
    return triton_search.launch_autotuned(a, b, _operands(a, b, bias, out), bias)


def three_ops_gelu(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor,
                   out: torch.Tensor | None = None) -> torch.Tensor:
    """Eager PyTorch: matmul, bias add, GELU (tanh form), as an MLP's first layer runs them unfused."""
    out = _operands(a, b, bias, out)
    return out.copy_(F.gelu(torch.matmul(a, b) + bias, approximate="tanh"))


def fused_gelu(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """Triton rung 6's kernel with its bias + GELU epilogue: gelu(a @ b + bias) in one kernel."""
    return triton_search.launch_autotuned(a, b, _operands(a, b, bias, out), bias, activation="gelu")


def reference_gelu(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """gelu(a @ b + bias) in fp64 (tanh form), the products of the fp16 inputs exact."""
    return F.gelu(a.double() @ b.double() + bias.double(), approximate="tanh")


def bytes_moved(shape: tuple) -> dict[str, int]:
    """DRAM bytes each variant must move at `shape` (fp16: 2 bytes an element), if every pass
    streams its operands once. torch:compile's depends on the kernels Inductor generates."""
    M, N, K = shape
    inputs = 2 * (M * K + K * N + N)
    tile = 2 * M * N
    return {
        "triton:fused": inputs + tile,            # A, B, bias read once; C written once
        # matmul writes A·B; add reads it (+ bias) and writes the sum; relu reads the sum, writes C
        "torch:three_ops": inputs + tile + 2 * tile + 2 * tile,
    }


def _make_inputs(shape: tuple, where: str, gen: torch.Generator) -> tuple:
    M, N, K = shape
    return (torch.randn(M, K, generator=gen, device=where).half(),
            torch.randn(K, N, generator=gen, device=where).half(),
            torch.randn(N, generator=gen, device=where).half())


def reference(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """In fp64: exact products of the fp16 inputs, sums far more precise than any rung's."""
    return torch.relu(a.double() @ b.double() + bias.double())


def _tune(labels: list[str]) -> list:
    """The fused kernel's own search at the benchmark shapes (its epilogue is part of what is timed)."""
    return triton_search.tune(BENCH_SHAPES, bias_relu=True) if "triton:fused" in labels else []


BENCH_SHAPES = [(4096, 4096, 4096), (8192, 8192, 8192)]
PROBLEM = register(Problem(
    name="matmul_bias_relu",
    # a multiply and an add per (m, n, k); the M·N bias adds and max(·, 0) are 1/K of that: left out
    flops=lambda s: 2 * s[0] * s[1] * s[2],
    min_bytes=lambda s: bytes_moved(s)["triton:fused"],
    make_inputs=_make_inputs,
    reference=reference,
    new_output=lambda s, where: torch.empty(s[:2], dtype=torch.float16, device=where),
    check_shapes=[(1, 1, 1), (17, 33, 65), (1000, 1000, 1000), (4095, 4097, 31)],
    bench_shapes=BENCH_SHAPES,
    interpret_shapes=[(1, 1, 1), (17, 33, 65), (33, 47, 31)],
    compute_roof="fp16_tc_TFLOPs",
    tune=_tune,
    rungs=[
        Rung("torch", "three_ops", three_ops),
        Rung("torch", "compile", compiled, needs="gpu"),
        Rung("triton", "fused", fused, triton_matmul.SOURCE, needs="tensor_cores",
             fallback=CUDA_CORE_DOT, searches=True),
    ],
))
