"""Assignment 09: the fused epilogue of a linear layer's Triton matmul (lesson 03's `fused` rung).

The layer is y = relu(x·Wᵀ + b), x [tokens, in_features], W [out_features, in_features] (nn.Linear's layout),
b [out_features], computed as C = A·B with A = x and B = Wᵀ. The kernel below is a tiled matmul: after its K
loop it calls the student's @triton.jit `epilogue(acc, bias_ptr, rows, cols, M, N)` on the fp32 tile in
registers (rows, cols: the tile's index vectors into C, ragged at the edges; bias_ptr: b, fp16) and stores what
that returns once, in fp16. The student decides how the epilogue reads b and what it does with it.

The check runs the layer at ragged shapes where M != N and BLOCK_M != BLOCK_N, and at one layer whose bias
nearly cancels x·Wᵀ, against the float64 reference; b lies in front of poisoned memory, and a probe runs the
epilogue on a tile that reaches past the end of b. A wrong answer is named by the tile it leaves.
"""
from __future__ import annotations

import re

import torch
import triton
import triton.language as tl

from ladder.check import compare
from ladder.exercises.grading import Fail, Result, first_line, judge
from ladder.runtime.world import device


TASK = "linear-layer epilogue"
SHAPES = [(40, 24, 20), (1, 17, 5), (33, 50, 40)]   # (M tokens, N out_features, K in_features): ragged, M != N
CANCEL = (24, 40, 16)                               # a layer whose bias nearly cancels x·Wᵀ
BLOCK = (32, 16, 16)                                # BLOCK_M != BLOCK_N
POISON = 10000.0                                    # what lies in memory after b (fp16-exact)
PROBE = (40, 20, 16)                                # (M, N, first column) of the probe's tile: it straddles N


@triton.jit
def bias_relu_matmul_kernel(a_ptr, b_ptr, bias_ptr, c_ptr, M, N, K, epilogue: tl.constexpr,
                            BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    tiles_n = tl.cdiv(N, BLOCK_N)
    rows = (tl.program_id(0) // tiles_n) * BLOCK_M + tl.arange(0, BLOCK_M)   # this tile's rows of C
    cols = (tl.program_id(0) % tiles_n) * BLOCK_N + tl.arange(0, BLOCK_N)    # and its columns
    acc = tl.zeros((BLOCK_M, BLOCK_N), tl.float32)
    for k in range(0, K, BLOCK_K):
        ks = k + tl.arange(0, BLOCK_K)
        a = tl.load(a_ptr + rows[:, None] * K + ks[None, :], mask=(rows[:, None] < M) & (ks[None, :] < K), other=0.0)
        b = tl.load(b_ptr + ks[:, None] * N + cols[None, :], mask=(ks[:, None] < K) & (cols[None, :] < N), other=0.0)
        acc = tl.dot(a, b, acc)
    out = epilogue(acc, bias_ptr, rows, cols, M, N)    # the student's: the tile of y, from the fp32 acc
    tl.store(c_ptr + rows[:, None] * N + cols[None, :], out.to(tl.float16), mask=(rows[:, None] < M) & (cols[None, :] < N))


@triton.jit
def _probe_kernel(acc_ptr, bias_ptr, out_ptr, col0, M, N, epilogue: tl.constexpr,
                  BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """One tile whose columns run past N, stored whole (no mask): what the epilogue read past b shows."""
    rows = tl.arange(0, BLOCK_M)
    cols = col0 + tl.arange(0, BLOCK_N)
    tile = rows[:, None] * BLOCK_N + tl.arange(0, BLOCK_N)[None, :]
    out = epilogue(tl.load(acc_ptr + tile), bias_ptr, rows, cols, M, N)
    tl.store(out_ptr + tile, out.to(tl.float32))


def bias_relu_matmul(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor, epilogue, block=BLOCK) -> torch.Tensor:
    """C = the layer's output for A = x [M, K], B = Wᵀ [K, N] (contiguous) and the bias, fp16."""
    M, K = a.shape
    N = b.shape[1]
    c = torch.full((M, N), float("nan"), dtype=torch.float16, device=a.device)
    grid = (triton.cdiv(M, block[0]) * triton.cdiv(N, block[1]),)
    bias_relu_matmul_kernel[grid](a, b, bias, c, M, N, K, epilogue, *block)
    return c


def _poisoned(bias: torch.Tensor, room: int) -> torch.Tensor:
    """`bias` as a view of a longer buffer whose tail is POISON: a read past its end reads that."""
    buf = torch.full((bias.numel() + room,), POISON, dtype=bias.dtype, device=bias.device)
    buf[:bias.numel()] = bias
    return buf[:bias.numel()]


def _layer(M: int, N: int, K: int, gen: torch.Generator, cancel: bool = False):
    """x [M, K], W [N, K], b [N] in fp16. `cancel`: x's first feature is 1 and b nearly cancels W's first column
    (hundreds), so x·Wᵀ + b is small and rounding x·Wᵀ to fp16 first shows."""
    x, w = torch.randn(M, K, generator=gen).half(), torch.randn(N, K, generator=gen).half()
    b = (torch.randn(N, generator=gen) * 3).half()
    if cancel:
        big = torch.randint(300, 1000, (N,), generator=gen).double()
        x[:, 0], w[:, 0] = 1, big.half()
        b = (torch.randn(N, generator=gen).double() - big).half()
    return x, w, b


def _span(idx: torch.Tensor) -> str:
    if not idx.numel():
        return "none"
    lo, hi = int(idx.min()), int(idx.max())
    return f"{lo}" if lo == hi else f"{lo} to {hi}"


class BiasReluEpilogue:
    def check(self, epilogue) -> Result:
        def body() -> str:
            if not hasattr(epilogue, "fn"):
                raise Fail("decorate your function with @triton.jit: the kernel calls it from GPU code")
            gen = torch.Generator().manual_seed(9)
            for M, N, K in SHAPES:
                _run(epilogue, M, N, K, _layer(M, N, K, gen), device())
            _probe(epilogue, device())
            M, N, K = CANCEL
            _run(epilogue, M, N, K, _layer(M, N, K, gen, cancel=True), device(), cancel=True)
            return (f"correct: relu(x·Wᵀ + b) at {len(SHAPES)} ragged shapes and where b nearly cancels x·Wᵀ, "
                    f"nothing read past the end of b, one fp16 rounding")
        return judge(TASK, (epilogue,), body)


def _what_broke(e: BaseException) -> str:
    """The error inside the interpreter's (a chain of causes) or the compiler's (`error_message`) wrapping."""
    while e.__cause__ is not None:
        e = e.__cause__
    inner = getattr(e, "error_message", None)
    if isinstance(inner, BaseException):
        return first_line(inner)
    if isinstance(inner, str) and inner.strip():   # the compiler keeps the repr: "ValueError('...')"
        line = inner.strip().splitlines()[0]
        wrapped = re.fullmatch(r"(\w+)\((['\"])(.*)\2\)", line)
        return f"{wrapped[1]}: {wrapped[3][:200]}" if wrapped else f"{type(e).__name__}: {line[:200]}"
    return first_line(e)


def _launch_failed(e: Exception, where: str) -> Fail:
    bm, bn, _ = BLOCK
    return Fail(f"the kernel fails with your epilogue {where} ({_what_broke(e)}); acc is [BLOCK_M, BLOCK_N] = "
                f"[{bm}, {bn}], rows has BLOCK_M indices and cols BLOCK_N: what you combine with acc must "
                f"broadcast to its shape, and the epilogue returns one tile shaped like acc")


def _run(epilogue, M: int, N: int, K: int, layer, dev, cancel: bool = False) -> None:
    x, w, b = layer
    where = (f"at {M} token{'s' * (M != 1)} x {N} out_features x {K} in_features"
             + (" (b nearly cancels x·Wᵀ)" if cancel else ""))
    bias = _poisoned(b.to(dev), room=2 * (M + N) + 4 * sum(BLOCK))
    try:
        got = bias_relu_matmul(x.to(dev), w.t().contiguous().to(dev), bias, epilogue).cpu()   # fp16: its tolerance
    except Exception as e:
        raise _launch_failed(e, where) from None
    prod, bb = x.double() @ w.double().t(), b.double()
    pre = prod + bb[None, :]
    want = pre.clamp_min(0)
    if compare(got, want).ok:
        return
    ext = torch.cat([bb, torch.full((M + 2 * sum(BLOCK),), POISON, dtype=torch.float64)])
    i, j = torch.arange(M, dtype=torch.float64), torch.arange(N)
    by_row = "the bias in your C changes down the rows (from token to token) and is the same across each row: " \
             "which axis of C are the out_features, and which index vector runs along it?"
    tiles = [
        (pre, "C has negative values: the ReLU is missing"),
        (prod.clamp_min(0) + bb[None, :], "C is relu(x·Wᵀ) + b: its negative values are the bias's; the layer "
                                         "applies the ReLU to the biased sum"),
        (prod.clamp_min(0), "C is relu(x·Wᵀ): the bias never reached the tile"),
        ((prod - bb[None, :]).clamp_min(0), "C is relu(x·Wᵀ − b): the bias is subtracted"),
        ((prod + ext[:M, None]).clamp_min(0), by_row),
        ((prod + torch.where(i < N, ext[:M], 0)[:, None]).clamp_min(0), by_row),
        ((prod + bb[j % BLOCK[1]][None, :]).clamp_min(0),
         f"every tile of {BLOCK[1]} columns got the bias of columns 0 to {BLOCK[1] - 1}: the index into b must "
         f"follow the tile's place in C"),
        ((prod + torch.where(j < M, bb, 0)[None, :]).clamp_min(0),
         f"C has its bias up to column {M - 1} and none after: the load's mask stops at M, the number of tokens"),
        (pre.clamp_max(0), "C keeps the negative values and zeroes the positive ones: the ReLU is inverted"),
        ((prod.half().double() + bb[None, :]).clamp_min(0),
         "C is off where x·Wᵀ and b nearly cancel: x·Wᵀ was rounded to fp16 before the bias was added, and "
         "its rounding error (up to 0.25 at a few hundred) survives the cancellation; round once, at the end"),
    ]
    for wrong, why in tiles:
        if compare(got, wrong).ok:
            raise Fail(f"{where}: {why}")
    if torch.isfinite(got).all():
        lo, hi = float(got.min()), float(got.max())   # a clamp: C is pre clamped to [lo, hi]
        if compare(got, pre.clamp(lo, hi)).ok:
            if abs(lo) > 1e-3:
                raise Fail(f"{where}: C's smallest value is {lo:g}: the ReLU's floor is wrong")
            raise Fail(f"{where}: C stops at {hi:g}: the ReLU has no ceiling")
    bad = ~torch.isclose(got.double(), want, rtol=2e-3, atol=2e-3)
    r, c = bad.nonzero(as_tuple=True)
    if got.isnan().any():
        raise Fail(f"{where}: NaN in C (rows {_span(r)}, columns {_span(c)}); return a tile of numbers shaped like acc")
    raise Fail(f"{where}: C differs from relu(x·Wᵀ + b) in {int(bad.sum())} of {M * N} values, in rows {_span(r)}, "
               f"columns {_span(c)} ({compare(got, want)})")


def _probe(epilogue, dev) -> None:
    """Columns past N of a tile never reach C (the store's mask drops them), but reading b there reads past its
    end: memory that is not b's (on a GPU, perhaps not mapped at all)."""
    M, N, col0 = PROBE
    bm, bn, _ = BLOCK
    acc = torch.randn(bm, bn, generator=torch.Generator().manual_seed(90))
    b = (torch.randn(N, generator=torch.Generator().manual_seed(91)) * 3).half()
    out = torch.full((bm, bn), float("nan"), device=dev)
    try:
        _probe_kernel[(1,)](acc.to(dev), _poisoned(b.to(dev), room=M + N + 4 * sum(BLOCK)), out, col0, M, N,
                            epilogue, bm, bn)
    except Exception as e:
        raise _launch_failed(e, f"on a tile of columns {col0} to {col0 + bn - 1} (N = {N})") from None
    past = out.cpu().double()[:, N - col0:]
    read = torch.isclose(past, acc.double()[:, N - col0:] + POISON, rtol=1e-3)   # relu(acc + what lies after b)
    if read.any():
        cols = read.any(0).nonzero().flatten() + N
        raise Fail(f"on a tile of columns {col0} to {col0 + bn - 1} with N = {N}: your load reads b past its end "
                   f"(columns {_span(cols)}, the values that lie in memory after b); those columns never reach C, "
                   f"but the read is out of bounds, and on a GPU it can fault")
