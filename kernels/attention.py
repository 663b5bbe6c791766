"""Attention forward, O = softmax(Q·Kᵀ/√D)·V, non-causal and causal.

Q, K, V, O fp16 of shape (B, H, S, D), contiguous; D is 64 or 128. A shape is (B, H, S, D, causal)
with causal 0 or 1. FLOPs: 4·B·H·S²·D (two matmuls), half of it when causal. Reference: PyTorch's
math attention in fp32. The rungs: CUDA C++ (kernels/cuda/attention/, one file per rung, launched
here), kernels/triton/attention.py (Triton), torch:sdpa (PyTorch's default backend) and
torch:sdpa_flash (its FlashAttention backend, forced).

Every launcher takes (q, k, v, causal, out=None) and returns out; a bad argument raises a ValueError
that names it. The CUDA launchers check that the tensors are on the GPU before anything else, so a
CPU-only machine gets that ValueError, not a missing-GPU error.
"""
from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from ladder import cuda, validate
from ladder.problems import Problem, Rung, register
from kernels.triton import attention as triton_attention

CUDA_DIR = "kernels/cuda/attention"
NAIVE_THREADS = 128          # rung 1: a thread per query of a score, row or output element
COALESCED_THREADS = 128      # rung 2: 4 warps (scores: 4 x 32 keys of a query; softmax: 4 rows)
PV_THREADS = 256             # rung 2's P·V: HEAD_DIM threads along D x 256/HEAD_DIM rows
FUSED_THREADS = 128          # rung 3: 4 warps, fixed in 3_fused.cu
# Rung 3's tiles per head dimension: Q (fp32) + K, V (fp16) + P (fp32) within 48 KiB of static shared memory.
FUSED_TILES = {64: dict(BLOCK_M=64, BLOCK_N=32), 128: dict(BLOCK_M=32, BLOCK_N=32)}
GRID_YZ_MAX = 65535          # a grid's y and z dimensions (x goes to 2^31 - 1)


def flops(shape: tuple) -> float:
    B, H, S, D, causal = shape
    return 4 * B * H * S * S * D * (0.5 if causal else 1.0)


def min_bytes(shape: tuple) -> float:
    """Q, K and V read once, O written once (fp16): what the fused rungs must move."""
    B, H, S, D, _ = shape
    return 4 * 2 * B * H * S * D


def _make_inputs(shape: tuple, where: str, gen: torch.Generator) -> tuple:
    B, H, S, D, causal = shape
    q, k, v = (torch.randn(B, H, S, D, generator=gen, device=where).half() for _ in range(3))
    return q, k, v, bool(causal)


def reference(q, k, v, causal: bool) -> torch.Tensor:
    """Math attention in fp32, written out (no fused kernel in the reference)."""
    s = (q.float() @ k.float().transpose(-1, -2)) / q.shape[-1] ** 0.5
    if causal:
        S = q.shape[-2]
        s = s.masked_fill(torch.ones(S, S, dtype=torch.bool, device=q.device).triu(1), float("-inf"))
    return torch.softmax(s, dim=-1) @ v.float()


def sdpa(q, k, v, causal: bool, out: torch.Tensor | None = None) -> torch.Tensor:
    """PyTorch's scaled_dot_product_attention, the backend it picks (the result is copied into out)."""
    *_, out = triton_attention.operands(q, k, v, out)
    return out.copy_(F.scaled_dot_product_attention(q, k, v, is_causal=causal))


def sdpa_flash(q, k, v, causal: bool, out: torch.Tensor | None = None) -> torch.Tensor:
    """scaled_dot_product_attention with its FlashAttention backend forced."""
    *_, out = triton_attention.operands(q, k, v, out)
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        return out.copy_(F.scaled_dot_product_attention(q, k, v, is_causal=causal))


# ------------------------------------------------------------- CUDA C++ rungs (kernels/cuda/attention/)

def _cuda_operands(q, k, v, out, align_bytes: int = 0):
    """triton_attention.operands for a CUDA kernel: first each tensor must be fp16, 4-D, on the GPU (and
    `align_bytes`-aligned where the kernel loads vectors); then the shared checks (shapes, D)."""
    named = [("q", q), ("k", k), ("v", v)] + ([("out", out)] if out is not None else [])
    for name, t in named:
        validate.tensor(name, t, dtype=torch.float16, ndim=4, device="cuda", align_bytes=align_bytes)
    return triton_attention.operands(q, k, v, out)


def _grid_fits(**dims: int) -> None:
    for name, n in dims.items():
        if n > GRID_YZ_MAX:
            raise ValueError(f"{name}={n} blocks: over the {GRID_YZ_MAX} a grid's y or z dimension can hold")


def cuda_naive(q, k, v, causal: bool, out: torch.Tensor | None = None) -> torch.Tensor:
    """Rung 1: scores, softmax, P·V as three kernels, a thread per element; S×S fp32 in DRAM."""
    B, H, S, D, out = _cuda_operands(q, k, v, out)
    if out.numel():
        _grid_fits(S=S, BH=B * H)
        scores = torch.empty((B, H, S, S), dtype=torch.float32, device=q.device)
        module, T = cuda.load("attention/1_naive.cu"), NAIVE_THREADS
        cuda.launch(module, "scores", (cuda.cdiv(S, T), S, B * H), T,
                    (q, k, scores) + cuda.int32s(S, D) + (np.float32(1 / math.sqrt(D)),) + cuda.int32s(causal))
        cuda.launch(module, "softmax", (cuda.cdiv(S, T), B * H), T, (scores,) + cuda.int32s(S))
        cuda.launch(module, "pv", (cuda.cdiv(S, T), D, B * H), T, (scores, v, out) + cuda.int32s(S, D))
    return out


def cuda_coalesced(q, k, v, causal: bool, out: torch.Tensor | None = None) -> torch.Tensor:
    """Rung 2: the same three passes, coalesced (a warp per query and 32 keys, a warp per row, threads
    along D); q and k are read as half2, so they must start on 4 bytes."""
    B, H, S, D, out = _cuda_operands(q, k, v, out, align_bytes=4)
    if out.numel():
        _grid_fits(S=S, BH=B * H)
        scores = torch.empty((B, H, S, S), dtype=torch.float32, device=q.device)
        module = cuda.load("attention/2_coalesced.cu", dict(HEAD_DIM=D))
        T, rows = COALESCED_THREADS, PV_THREADS // D
        cuda.launch(module, "scores", (cuda.cdiv(S, T), S, B * H), T,
                    (q, k, scores) + cuda.int32s(S) + (np.float32(1 / math.sqrt(D)),) + cuda.int32s(causal))
        cuda.launch(module, "softmax", (cuda.cdiv(S, T // 32), B * H), T, (scores,) + cuda.int32s(S))
        cuda.launch(module, "pv", (cuda.cdiv(S, rows), B * H), (D, rows), (scores, v, out) + cuda.int32s(S))
    return out


def cuda_fused(q, k, v, causal: bool, out: torch.Tensor | None = None) -> torch.Tensor:
    """Rung 3: one kernel, online softmax, K and V tiles through shared memory, fp32 FFMA; the tiles are
    loaded as 16-byte vectors, so every tensor must start on 16 bytes."""
    B, H, S, D, out = _cuda_operands(q, k, v, out, align_bytes=16)
    if out.numel():
        _grid_fits(BH=B * H)
        tiles = FUSED_TILES[D]
        module = cuda.load("attention/3_fused.cu", dict(HEAD_DIM=D, **tiles))
        cuda.launch(module, "attention", (cuda.cdiv(S, tiles["BLOCK_M"]), B * H), FUSED_THREADS,
                    (q, k, v, out) + cuda.int32s(S) + (np.float32(triton_attention.LOG2E / math.sqrt(D)),)
                    + cuda.int32s(causal))
    return out


def _cuda(name: str, run, **kw) -> Rung:
    return Rung("cuda", name, run, f"{CUDA_DIR}/{name}.cu", **kw)


def _tune(labels: list[str]) -> list:
    """Triton rung 6's searches at the headline shapes, before they are timed (for `record`)."""
    return triton_attention.tune(HEADLINE) if "triton:6_autotuned" in labels else []


HEADLINE = [(4, 32, 4096, D, causal) for D in (64, 128) for causal in (0, 1)]
PROBLEM = register(Problem(
    name="attention",
    flops=flops,
    min_bytes=min_bytes,
    make_inputs=_make_inputs,
    reference=reference,
    new_output=lambda s, where: torch.empty(s[:4], dtype=torch.float16, device=where),
    check_shapes=[(1, 2, 1, 64, 0), (2, 3, 100, 64, 1), (1, 2, 1000, 128, 0), (1, 2, 1000, 64, 1),
                  (1, 1, 4097, 128, 1)],
    bench_shapes=HEADLINE,
    interpret_shapes=[(1, 2, 1, 64, 0), (1, 1, 19, 64, 1), (1, 1, 17, 128, 0)],  # S: 16-wide tiles + a ragged edge
    compute_roof="fp16_tc_TFLOPs",
    tune=_tune,
    sweep_shapes=[(4, 32, S, 64, 0) for S in (512, 1024, 2048, 8192, 16384)],
    rungs=[
        _cuda("1_naive", cuda_naive, slow=True),
        _cuda("2_coalesced", cuda_coalesced, slow=True),
        _cuda("3_fused", cuda_fused),
        *triton_attention.rungs(),
        Rung("torch", "sdpa", sdpa),
        Rung("torch", "sdpa_flash", sdpa_flash, needs="gpu"),
    ],
))
