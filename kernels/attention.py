"""Attention forward, O = softmax(Q·Kᵀ/√D)·V, non-causal and causal.

Q, K, V, O fp16 of shape (B, H, S, D), contiguous; D is 64 or 128. A shape is (B, H, S, D, causal)
with causal 0 or 1. FLOPs: 4·B·H·S²·D (two matmuls), half of it when causal. Reference: PyTorch's
math attention in fp32. The rungs: kernels/triton/attention.py (Triton), torch:sdpa (PyTorch's
default backend) and torch:sdpa_flash (its FlashAttention backend, forced).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from ladder.problems import Problem, Rung, register
from kernels.triton import attention as triton_attention


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
    sweep_shapes=[(4, 32, S, 64, 0) for S in (512, 1024, 2048, 8192, 16384)],
    rungs=[
        *triton_attention.rungs(),
        Rung("torch", "sdpa", sdpa),
        Rung("torch", "sdpa_flash", sdpa_flash, needs="gpu"),
    ],
))
