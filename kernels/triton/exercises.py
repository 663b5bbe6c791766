"""Assignment 04's kernel: a tiled Triton matmul whose masks are the student's.

C = A·B (A M×K, B K×N, fp16 row-major; fp32 sums; C fp16), one program per BLOCK_M×BLOCK_N tile of
C, K in BLOCK_K steps. The notebook writes one @triton.jit function and passes it in as a constexpr
(Triton inlines it into the kernel, as it would a helper of this module):

    masks(rows, cols, ks, M, N, K) -> (a_mask, b_mask, c_mask)

rows [BLOCK_M], cols [BLOCK_N] and ks [BLOCK_K] are the indices the tile and the K step cover, some
past the edges on ragged shapes. Unlike lesson 03's kernel, nothing wraps rows with % M here: the
masks alone keep every load and the store inside A, B and C.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from ladder import validate
from ladder.world import device


@triton.jit
def _tile(M, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    tiles_n = (N + BLOCK_N - 1) // BLOCK_N
    pid = tl.program_id(0)
    return (pid // tiles_n) * BLOCK_M + tl.arange(0, BLOCK_M), (pid % tiles_n) * BLOCK_N + tl.arange(0, BLOCK_N)


@triton.jit
def masked_matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, masks: tl.constexpr,
                         BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    rows, cols = _tile(M, N, BLOCK_M, BLOCK_N)
    acc = tl.full((BLOCK_M, BLOCK_N), 0.0, tl.float32)
    for k in range(0, K, BLOCK_K):
        ks = k + tl.arange(0, BLOCK_K)
        a_mask, b_mask, _ = masks(rows, cols, ks, M, N, K)
        # other=0.0: a k that is masked off adds 0 to every sum of the tile
        a = tl.load(a_ptr + rows[:, None].to(tl.int64) * K + ks[None, :], mask=a_mask, other=0.0)
        b = tl.load(b_ptr + ks[:, None].to(tl.int64) * N + cols[None, :], mask=b_mask, other=0.0)
        acc = tl.dot(a, b, acc)
    # asked again: in compiled Triton a name first bound inside the loop does not outlive it
    _, _, c_mask = masks(rows, cols, tl.arange(0, BLOCK_K), M, N, K)
    tl.store(c_ptr + rows[:, None].to(tl.int64) * N + cols[None, :], acc.to(tl.float16), mask=c_mask)


@triton.jit
def masks_kernel(a_out, b_out, c_out, M, N, K, masks: tl.constexpr,
                 BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """For the checker: per program and K step, 1 where masked_matmul_kernel's loads and store would
    touch memory. A masked store of ones into zeros broadcasts a mask exactly as the loads do."""
    rows, cols = _tile(M, N, BLOCK_M, BLOCK_N)
    i = tl.arange(0, BLOCK_M)[:, None]
    j = tl.arange(0, BLOCK_N)[None, :]
    kk = tl.arange(0, BLOCK_K)
    steps = (K + BLOCK_K - 1) // BLOCK_K
    for s in range(0, steps):
        a_mask, b_mask, _ = masks(rows, cols, s * BLOCK_K + kk, M, N, K)
        step = tl.program_id(0) * steps + s
        tl.store(a_out + (step * BLOCK_M + i) * BLOCK_K + kk[None, :], 1, mask=a_mask)
        tl.store(b_out + (step * BLOCK_K + kk[:, None]) * BLOCK_N + j, 1, mask=b_mask)
    _, _, c_mask = masks(rows, cols, kk, M, N, K)
    tl.store(c_out + (tl.program_id(0) * BLOCK_M + i) * BLOCK_N + j, 1, mask=c_mask)


def masked_matmul(a: torch.Tensor, b: torch.Tensor, masks_fn, out: torch.Tensor | None = None,
                  block=(16, 16, 16)) -> torch.Tensor:
    """C = A·B with masked_matmul_kernel, its masks from `masks_fn` (a @triton.jit function)."""
    M, N, K, out = validate.matmul_operands(a, b, out, device=device())
    if out.numel():
        grid = (triton.cdiv(M, block[0]) * triton.cdiv(N, block[1]),)
        masked_matmul_kernel[grid](a, b, out, M, N, K, masks_fn, BLOCK_M=block[0], BLOCK_N=block[1], BLOCK_K=block[2])
    return out


def tile_masks_used(masks_fn, shape: tuple, block=(16, 16, 16)) -> tuple[torch.Tensor, ...]:
    """The masks masked_matmul would use at (M, N, K), laid out over the tiles' whole index range
    (rows and columns rounded up to whole tiles): A's [tiles_n, Mp, Kp] (one per column of tiles),
    B's [tiles_m, Kp, Np] (one per row of tiles) and C's [Mp, Np], True where memory is touched."""
    M, N, K = shape
    BM, BN, BK = block
    tm, tn, steps = triton.cdiv(M, BM), triton.cdiv(N, BN), triton.cdiv(K, BK)
    a = torch.zeros(tm, tn, steps, BM, BK, dtype=torch.int8, device=device())
    b = torch.zeros(tm, tn, steps, BK, BN, dtype=torch.int8, device=device())
    c = torch.zeros(tm, tn, BM, BN, dtype=torch.int8, device=device())
    masks_kernel[(tm * tn,)](a, b, c, M, N, K, masks_fn, BLOCK_M=BM, BLOCK_N=BN, BLOCK_K=BK)
    return (a.permute(1, 0, 3, 2, 4).reshape(tn, tm * BM, steps * BK).bool().cpu(),
            b.permute(0, 2, 3, 1, 4).reshape(tm, steps * BK, tn * BN).bool().cpu(),
            c.permute(0, 2, 1, 3).reshape(tm * BM, tn * BN).bool().cpu())
