"""Assignment 09: the fused bias + ReLU epilogue of a Triton matmul (lesson 03's `fused` rung).

C = relu(A·B + bias), bias one fp16 value per column of C. The kernel below is a tiled matmul that
calls the student's @triton.jit `epilogue(acc, bias)` on the fp32 tile in registers, before its one
fp16 store: acc is [BLOCK_M, BLOCK_N] fp32, bias this tile's [BLOCK_N] columns of it, as fp32 (0 past
N). The check runs it at ragged shapes (the interpreter on a CPU, the GPU where there is one) against
relu(A·B + bias) in float64, and names the usual mistakes by the tile they leave.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from ladder.exercises.grading import Fail, Result, judge

TASK = "bias + ReLU epilogue"
SHAPES = [(40, 24, 20), (1, 17, 5), (33, 50, 40)]   # (M, N, K): ragged, one row, more tiles
BLOCK = (32, 16, 16)                                # BLOCK_M != BLOCK_N: a bias along the wrong axis does not fit


@triton.jit
def bias_relu_matmul_kernel(a_ptr, b_ptr, bias_ptr, c_ptr, M, N, K, epilogue: tl.constexpr,
                            BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    tiles_n = (N + BLOCK_N - 1) // BLOCK_N
    rows = (tl.program_id(0) // tiles_n) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = (tl.program_id(0) % tiles_n) * BLOCK_N + tl.arange(0, BLOCK_N)
    acc = tl.zeros((BLOCK_M, BLOCK_N), tl.float32)
    for k in range(0, K, BLOCK_K):
        ks = k + tl.arange(0, BLOCK_K)
        a = tl.load(a_ptr + rows[:, None] * K + ks[None, :], mask=(rows[:, None] < M) & (ks[None, :] < K), other=0.0)
        b = tl.load(b_ptr + ks[:, None] * N + cols[None, :], mask=(ks[:, None] < K) & (cols[None, :] < N), other=0.0)
        acc = tl.dot(a, b, acc)
    bias = tl.load(bias_ptr + cols, mask=cols < N, other=0.0).to(tl.float32)
    out = epilogue(acc, bias)
    tl.store(c_ptr + rows[:, None] * N + cols[None, :], out.to(tl.float16), mask=(rows[:, None] < M) & (cols[None, :] < N))


def bias_relu_matmul(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor, epilogue, block=BLOCK) -> torch.Tensor:
    M, K = a.shape
    N = b.shape[1]
    c = torch.full((M, N), float("nan"), dtype=torch.float16, device=a.device)
    grid = (triton.cdiv(M, block[0]) * triton.cdiv(N, block[1]),)
    bias_relu_matmul_kernel[grid](a, b, bias, c, M, N, K, epilogue, *block)
    return c


class BiasReluEpilogue:
    def check(self, epilogue) -> Result:
        def body() -> str:
            if not hasattr(epilogue, "fn"):
                raise Fail("decorate your function with @triton.jit: the kernel calls it from GPU code")
            from ladder.check import compare
            from ladder.world import device
            gen = torch.Generator().manual_seed(9)
            for M, N, K in SHAPES:
                a, b = torch.randn(M, K, generator=gen).half(), torch.randn(K, N, generator=gen).half()
                bias = (torch.randn(N, generator=gen) * 3).half()
                try:
                    got = bias_relu_matmul(*(x.to(device()) for x in (a, b, bias)), epilogue).cpu()
                except Exception as e:
                    first = (str(e).strip().splitlines() or [""])[0][:160]
                    raise Fail(f"the kernel fails with your epilogue at {M}x{N}x{K} ({type(e).__name__}: {first}); "
                               f"acc is [BLOCK_M, BLOCK_N] and bias [BLOCK_N]: one value per column, "
                               f"bias[None, :]") from None
                prod = a.double() @ b.double()
                want = torch.relu(prod + bias.double())
                if compare(got, want).ok:
                    continue
                where = f"at {M}x{N}x{K}"
                for wrong, why in [(prod + bias.double(), "no ReLU: negative sums must become 0"),
                                   (torch.relu(prod), "the bias is missing"),
                                   (torch.relu(prod) + bias.double(), "ReLU comes after the bias: relu(acc + bias), "
                                                                      "not relu(acc) + bias"),
                                   (torch.relu(prod - bias.double()), "the bias is added, not subtracted")]:
                    if compare(got, wrong).ok:
                        raise Fail(f"{where}: {why}")
                if got.isnan().any():
                    raise Fail(f"{where}: NaN in C; return a tile of numbers shaped like acc")
                raise Fail(f"{where}: C differs from relu(A·B + bias) ({compare(got, want)})")
            return (f"correct: relu(A·B + bias) at {len(SHAPES)} ragged shapes, in registers before the one "
                    f"fp16 store")
        return judge(TASK, (epilogue,), body)
