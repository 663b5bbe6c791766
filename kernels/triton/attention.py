"""Attention forward in Triton, O = softmax(Q·Kᵀ/√D)·V: the ladder from three kernels to one.

Q, K, V, O are fp16 (B, H, S, D), contiguous; scores, softmax statistics and sums in fp32.

1_naive        three kernels, a program per element: S = Q·Kᵀ to DRAM (fp32), softmax in place, P·V
2_coalesced    the same three passes with vector loads along D and along rows, the softmax a program per
               row with block reductions; still S×S fp32 in DRAM
3_fused        one kernel (FlashAttention's reformulation): a program per BLOCK_M queries walks the keys in
               BLOCK_N blocks with an online softmax; S and P never leave the chip; fp32 dots: CUDA cores
4_tensor_core  the same kernel with fp16 dots (Q·Kᵀ and P·V on tensor cores), num_stages=1
5_pipelined    the same kernel, num_stages=3: the next K and V blocks load while this one computes
6_autotuned    the same kernel, @triton.autotune over BLOCK_M, BLOCK_N, warps and stages per (S, D, causal)
7_tma          (Hopper) rung 6 with Q, K, V loaded and O stored through tensor descriptors built on the host:
               each block is one TMA copy, its addresses, bounds and zero fill the copy engine's; searched as 6
8_barrier_pass (Hopper) Triton plus a barrier pass: rung 7's kernel compiled through ladder/ptx.py, which drops
               the key loop's CTA barriers that order nothing and splits the refill's into sync and arrive;
               searched over the tiles it changes (two warpgroups)

Rungs 3-6 are one kernel switched by constants, as in the matmul ladder; rung 7 is its twin with descriptors
where rung 6 has pointers, sharing its key loop; rung 8 is rung 7's kernel, its PTX rewritten. Causal attention
masks keys after the query (and the fused rungs stop their key loop at the diagonal block). Ragged S is masked.

This file holds the kernels, their launchers (rungs 1-5 in fixed tiles; launch_flash and launch_flash_tma in a
given configuration or under a given autotuner) and a self-check: `python -m kernels.triton.attention` checks
each rung against the fp32 math and, on a GPU, times it beside SDPA. The searches of rungs 6-8, rung 8's barrier
pass and the rung list live with the problem definition, kernels/attention.py.
"""
from __future__ import annotations

import math

import torch
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

from ladder.runtime import validate
from ladder.runtime.world import WORLD, device

LOG2E = 1.4426950408889634  # softmax in base 2: exp(x) = exp2(x · log2 e), exp2 is one instruction


# ------------------------------------------------------------- rung 1: three kernels, a program per element

@triton.jit
def naive_scores_kernel(q_ptr, k_ptr, s_ptr, S, D, scale, CAUSAL: tl.constexpr):
    ij, bh = tl.program_id(0), tl.program_id(1)        # one program per score (i, j) of head bh
    i, j = ij // S, ij % S
    q_row = q_ptr + (bh * S + i).to(tl.int64) * D
    k_row = k_ptr + (bh * S + j).to(tl.int64) * D
    acc = 0.0
    for d in range(D):
        acc += tl.load(q_row + d).to(tl.float32) * tl.load(k_row + d).to(tl.float32)
    score = acc * scale
    if CAUSAL:                                          # a key after the query: weight 0 after softmax
        score = tl.where(j > i, float("-inf"), score)
    tl.store(s_ptr + bh.to(tl.int64) * S * S + ij, score)


@triton.jit
def naive_softmax_kernel(s_ptr, S):
    i, bh = tl.program_id(0), tl.program_id(1)         # one program per row, three scalar passes over it
    row = s_ptr + (bh.to(tl.int64) * S + i) * S
    top = float("-inf")
    for j in range(S):
        top = tl.maximum(top, tl.load(row + j))
    total = 0.0
    for j in range(S):
        total += tl.exp(tl.load(row + j) - top)
    for j in range(S):
        tl.store(row + j, tl.exp(tl.load(row + j) - top) / total)


@triton.jit
def naive_pv_kernel(p_ptr, v_ptr, o_ptr, S, D):
    idd, bh = tl.program_id(0), tl.program_id(1)       # one program per output element (i, d)
    i, d = idd // D, idd % D
    p_row = p_ptr + (bh.to(tl.int64) * S + i) * S
    v_col = v_ptr + bh.to(tl.int64) * S * D + d
    acc = 0.0
    for j in range(S):
        acc += tl.load(p_row + j) * tl.load(v_col + j * D).to(tl.float32)
    tl.store(o_ptr + (bh * S + i).to(tl.int64) * D + d, acc.to(tl.float16))


# ------------------------------------------------------------- rung 2: the same passes, coalesced

@triton.jit
def coalesced_scores_kernel(q_ptr, k_ptr, s_ptr, S, scale, HEAD_DIM: tl.constexpr, BLOCK_N: tl.constexpr,
                            CAUSAL: tl.constexpr):
    jb, i, bh = tl.program_id(0), tl.program_id(1), tl.program_id(2)  # BLOCK_N scores of row i
    head = bh.to(tl.int64) * S * HEAD_DIM
    dims = tl.arange(0, HEAD_DIM)
    keys = jb * BLOCK_N + tl.arange(0, BLOCK_N)
    q = tl.load(q_ptr + head + i * HEAD_DIM + dims).to(tl.float32)                  # one row: a vector
    k = tl.load(k_ptr + head + keys[:, None] * HEAD_DIM + dims[None, :], mask=keys[:, None] < S, other=0.0)
    s = tl.sum(q[None, :] * k.to(tl.float32), axis=1) * scale                      # BLOCK_N dot products
    if CAUSAL:
        s = tl.where(keys > i, float("-inf"), s)
    tl.store(s_ptr + (bh.to(tl.int64) * S + i) * S + keys, s, mask=keys < S)


@triton.jit
def coalesced_softmax_kernel(s_ptr, S, BLOCK: tl.constexpr):
    i, bh = tl.program_id(0), tl.program_id(1)         # one program per row, BLOCK elements per step
    row = s_ptr + (bh.to(tl.int64) * S + i) * S
    cols = tl.arange(0, BLOCK)
    # pass 1: per lane, a running max and the sum of exp(x - max), rescaled when the max grows. The max
    # starts at -1e30, not -inf: masked scores are -inf, and -inf - -inf would be NaN.
    top = tl.full((BLOCK,), -1e30, tl.float32)
    total = tl.zeros((BLOCK,), tl.float32)
    for start in range(0, S, BLOCK):
        x = tl.load(row + start + cols, mask=start + cols < S, other=float("-inf"))
        new_top = tl.maximum(top, x)
        total = total * tl.exp(top - new_top) + tl.exp(x - new_top)
        top = new_top
    row_top = tl.max(top, axis=0)                      # then the lanes combine: block reductions
    row_total = tl.sum(total * tl.exp(top - row_top), axis=0)
    for start in range(0, S, BLOCK):                   # pass 2: the probabilities, in place
        x = tl.load(row + start + cols, mask=start + cols < S, other=float("-inf"))
        tl.store(row + start + cols, tl.exp(x - row_top) / row_total, mask=start + cols < S)


@triton.jit
def coalesced_pv_kernel(p_ptr, v_ptr, o_ptr, S, HEAD_DIM: tl.constexpr, BLOCK_N: tl.constexpr):
    i, bh = tl.program_id(0), tl.program_id(1)         # one program per output row: D sums at once
    head = bh.to(tl.int64) * S * HEAD_DIM
    dims = tl.arange(0, HEAD_DIM)
    acc = tl.zeros((HEAD_DIM,), tl.float32)
    for start in range(0, S, BLOCK_N):
        keys = start + tl.arange(0, BLOCK_N)
        p = tl.load(p_ptr + (bh.to(tl.int64) * S + i) * S + keys, mask=keys < S, other=0.0)
        v = tl.load(v_ptr + head + keys[:, None] * HEAD_DIM + dims[None, :], mask=keys[:, None] < S, other=0.0)
        acc += tl.sum(p[:, None] * v.to(tl.float32), axis=0)
    tl.store(o_ptr + head + i * HEAD_DIM + dims, acc.to(tl.float16))


# ------------------------------------------------------------- rungs 3-6: one fused kernel

@triton.jit
def attend(q, m, l, acc, k_ptr, v_ptr, b, h, stride_ks, stride_kd, stride_vs, stride_vd, rows, S, qk_scale, lo, hi,
           HEAD_DIM: tl.constexpr, BLOCK_N: tl.constexpr, MASKED: tl.constexpr, CAUSAL: tl.constexpr,
           TENSOR_CORES: tl.constexpr, DESCRIPTORS: tl.constexpr = False):
    """Keys lo..hi (in BLOCK_N blocks) into the online softmax of the queries `rows`: for each query the
    largest score so far (m), the sum of exp2(score - m) (l) and the output so far, unnormalized (acc).
    A block that raises m first rescales l and acc by exp2(m_old - m_new). MASKED: blocks that may hold
    keys past S or (causal) after a query; the others skip the compares. Key j's element d is
    stride_ks·j + stride_kd·d from k_ptr (V's likewise). DESCRIPTORS (rung 7): k_ptr and v_ptr are tensor
    descriptors of all of K and V instead, (B, H, S, D) in boxes of BLOCK_N rows of a head, the head's b and h their
    coordinates (the strides unused; pointers: b and h unused, k_ptr already at the head)."""
    dims = tl.arange(0, HEAD_DIM)
    for start_n in range(lo, hi, BLOCK_N):
        keys = start_n + tl.arange(0, BLOCK_N)
        if DESCRIPTORS:  # whole blocks, rows past S read as zeros: only the scores need the mask below
            kt = k_ptr.load([b, h, start_n, 0]).reshape(BLOCK_N, HEAD_DIM).T
            v = v_ptr.load([b, h, start_n, 0]).reshape(BLOCK_N, HEAD_DIM)
        else:
            kt_ptrs = k_ptr + keys[None, :] * stride_ks + dims[:, None] * stride_kd  # Kᵀ: a D x BLOCK_N view of K
            v_ptrs = v_ptr + keys[:, None] * stride_vs + dims[None, :] * stride_vd
            if MASKED:
                kt = tl.load(kt_ptrs, mask=keys[None, :] < S, other=0.0)
                v = tl.load(v_ptrs, mask=keys[:, None] < S, other=0.0)
            else:
                kt = tl.load(kt_ptrs)
                v = tl.load(v_ptrs)
        if TENSOR_CORES:
            s = tl.dot(q, kt)
        else:  # fp32 operands at full precision: FFMA on CUDA cores
            s = tl.dot(q, kt.to(tl.float32), input_precision="ieee")
        if MASKED:
            keep = keys[None, :] < S
            if CAUSAL:
                keep = keep & (keys[None, :] <= rows[:, None])
            s = tl.where(keep, s, float("-inf"))
        # the scale is applied inside the exponent: s·scale - m is one FFMA per score, not a multiply and a subtract
        m_new = tl.maximum(m, tl.max(s, axis=1) * qk_scale)
        alpha = tl.exp2(m - m_new)          # 0 on the first block (m = -inf): nothing to rescale yet
        p = tl.exp2(s * qk_scale - m_new[:, None])
        l = l * alpha + tl.sum(p, axis=1)
        if TENSOR_CORES:
            acc = tl.dot(p.to(v.dtype), v, acc * alpha[:, None])   # P rounded to V's type: fp16 (bf16 via ladder.ops)
        else:
            acc = tl.dot(p, v.to(tl.float32), acc * alpha[:, None], input_precision="ieee")
        m = m_new
    return m, l, acc


@triton.jit
def key_passes(start_m, S, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr):
    """(unmasked_end, end) of the two passes over the keys of the queries start_m..: keys before unmasked_end
    need no mask (wholly before the diagonal if causal, wholly inside S), keys unmasked_end..end do (the diagonal
    block(s), or S's ragged last block), keys from end on are never loaded. Rungs 3-7 and the backward's dQ."""
    if CAUSAL:
        return start_m, tl.minimum(S, start_m + BLOCK_M)   # no key after the last query
    return (S // BLOCK_N) * BLOCK_N, S


def causal_key_range(start_m: int, block_m: int, S: int) -> tuple[int, int]:
    """key_passes's causal (unmasked_end, end) in Python (the diagram and assignment 08 use it;
    tests/test_diagrams.py holds it to the kernel's line)."""
    return start_m, min(S, start_m + block_m)


@triton.jit
def flash_kernel(q_ptr, k_ptr, v_ptr, o_ptr, lse_ptr, S, H, qk_scale,
                 stride_qb, stride_qh, stride_qs, stride_qd, stride_kb, stride_kh, stride_ks, stride_kd,
                 stride_vb, stride_vh, stride_vs, stride_vd, stride_ob, stride_oh, stride_os, stride_od,
                 HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr,
                 TENSOR_CORES: tl.constexpr, STORE_LSE: tl.constexpr, HEAVIEST_FIRST: tl.constexpr = False):
    """Queries BLOCK_M·program_id(0).. of head program_id(1) = b·H + h. Q, K, V and O may be any strided views
    of (B, H, S, D) (the rungs pass contiguous ones; ladder.ops the views a model hands it). STORE_LSE: also
    write each query's log-sum-exp of its scaled scores (natural log, fp32, (B, H, S) contiguous), what a
    backward pass recomputes the probabilities from. HEAVIEST_FIRST (ladder.ops, where it measured it faster):
    the grid's axes swapped, program_id(0) the head, and the query blocks numbered from the last, so that every
    head's longest causal rows start first and the short ones fill the tail."""
    if HEAVIEST_FIRST:
        bh, start_m = tl.program_id(0), (tl.num_programs(1) - 1 - tl.program_id(1)) * BLOCK_M
    else:
        start_m, bh = tl.program_id(0) * BLOCK_M, tl.program_id(1)
    qk_scale = tl.cast(qk_scale, tl.float32)  # Triton's launcher passes a Python float as fp32, Inductor's as fp64
    b, h = (bh // H).to(tl.int64), (bh % H).to(tl.int64)
    rows = start_m + tl.arange(0, BLOCK_M)
    dims = tl.arange(0, HEAD_DIM)
    q = tl.load(q_ptr + b * stride_qb + h * stride_qh + rows[:, None] * stride_qs + dims[None, :] * stride_qd,
                mask=rows[:, None] < S, other=0.0)
    if not TENSOR_CORES:
        q = q.to(tl.float32)
    m = tl.full((BLOCK_M,), float("-inf"), tl.float32)
    l = tl.zeros((BLOCK_M,), tl.float32)
    acc = tl.zeros((BLOCK_M, HEAD_DIM), tl.float32)
    # Two passes over the keys: blocks that need no mask, then the rest with masks (key_passes)
    unmasked_end, end = key_passes(start_m, S, BLOCK_M, BLOCK_N, CAUSAL)
    k_head, v_head = k_ptr + b * stride_kb + h * stride_kh, v_ptr + b * stride_vb + h * stride_vh
    m, l, acc = attend(q, m, l, acc, k_head, v_head, b, h, stride_ks, stride_kd, stride_vs, stride_vd, rows, S,
                       qk_scale, 0, unmasked_end, HEAD_DIM, BLOCK_N, False, CAUSAL, TENSOR_CORES)
    m, l, acc = attend(q, m, l, acc, k_head, v_head, b, h, stride_ks, stride_kd, stride_vs, stride_vd, rows, S,
                       qk_scale, unmasked_end, end, HEAD_DIM, BLOCK_N, True, CAUSAL, TENSOR_CORES)
    o = acc / l[:, None]
    tl.store(o_ptr + b * stride_ob + h * stride_oh + rows[:, None] * stride_os + dims[None, :] * stride_od,
             o.to(o_ptr.dtype.element_ty), mask=rows[:, None] < S)
    if STORE_LSE:  # l = Σ exp2(score·qk_scale - m), m in base 2: ln Σ exp(score·scale) = m · ln 2 + ln l
        tl.store(lse_ptr + bh.to(tl.int64) * S + rows, m * 0.6931471805599453 + tl.log(l), mask=rows < S)


# ------------------------------------------------------------- launchers

HEAD_DIMS = (64, 128)
GPU_TILES = {  # BLOCK_M, BLOCK_N, num_warps, num_stages
    "3_fused": dict(BLOCK_M=64, BLOCK_N=32, num_warps=4, num_stages=1),
    "4_tensor_core": dict(BLOCK_M=128, BLOCK_N=64, num_warps=8, num_stages=1),
    "5_pipelined": dict(BLOCK_M=128, BLOCK_N=64, num_warps=8, num_stages=3),
}
INTERPRETER_TILES = {rung: dict(BLOCK_M=16, BLOCK_N=16, num_warps=4, num_stages=1) for rung in GPU_TILES}
TILES = GPU_TILES if WORLD.gpu else INTERPRETER_TILES
BLOCK_N_STRIP = 128 if WORLD.gpu else 16   # rung 2's vector length along a row of S
SOFTMAX_BLOCK = 1024 if WORLD.gpu else 16


def operands(q, k, v, out):
    """Check Q, K, V (fp16, (B, H, S, D), contiguous, same shape, D 64 or 128); returns (B, H, S, D, out)."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        validate.tensor(name, t, dtype=torch.float16, ndim=4, device=device())
    validate.same_shape(q=q, k=k, v=v)
    B, H, S, D = q.shape
    if D not in HEAD_DIMS:
        raise ValueError(f"head dimension D={D} is not supported: these kernels take D in {HEAD_DIMS}")
    if out is None:
        out = torch.empty_like(q)
    validate.tensor("out", out, dtype=torch.float16, ndim=4, device=device())
    validate.same_shape(q=q, out=out)
    return B, H, S, D, out


def score_matrix_bytes(B: int, H: int, S: int) -> int:
    """Rungs 1-2 keep S = Q·Kᵀ (then P, in place) in DRAM: B·H·S² fp32."""
    return 4 * B * H * S * S


def _materialized(scores, softmax, pv):
    def run(q, k, v, causal: bool, out: torch.Tensor | None = None) -> torch.Tensor:
        B, H, S, D, out = operands(q, k, v, out)
        if out.numel():
            s = torch.empty((B, H, S, S), dtype=torch.float32, device=q.device)
            scores(q, k, s, B * H, S, D, 1 / math.sqrt(D), causal)
            softmax(s, B * H, S)
            pv(s, v, out, B * H, S, D)
        return out
    return run


# Triton's launcher multiplies the grid's three dimensions in a 32-bit int and launches nothing when the
# product is not positive: 2^31 programs or more are silently skipped (S = 4096, B·H = 128 is exactly 2^31).
MAX_PROGRAMS = 2**31 - 1


def _naive_scores(q, k, s, BH, S, D, scale, causal):
    """Rung 1's scores, a program per score: a few heads per launch, so a launch stays under 2^31 programs."""
    if S * S > MAX_PROGRAMS:
        raise ValueError(f"S={S}: S² = {S * S} programs for one head's scores, over the {MAX_PROGRAMS} of a launch")
    heads = MAX_PROGRAMS // (S * S)
    q, k, s = q.view(BH, S, D), k.view(BH, S, D), s.view(BH, S, S)
    for h in range(0, BH, heads):  # the slices start further on: same kernel, fewer programs
        naive_scores_kernel[(S * S, min(heads, BH - h))](q[h:], k[h:], s[h:], S, D, scale, causal, num_warps=1)


naive = _materialized(
    _naive_scores,
    lambda s, BH, S: naive_softmax_kernel[(S, BH)](s, S, num_warps=1),
    lambda p, v, o, BH, S, D: naive_pv_kernel[(S * D, BH)](p, v, o, S, D, num_warps=1))
naive.__name__ = "naive"

coalesced = _materialized(
    lambda q, k, s, BH, S, D, scale, causal: coalesced_scores_kernel[(triton.cdiv(S, BLOCK_N_STRIP), S, BH)](
        q, k, s, S, scale, D, BLOCK_N_STRIP, causal),
    lambda s, BH, S: coalesced_softmax_kernel[(S, BH)](s, S, SOFTMAX_BLOCK),
    lambda p, v, o, BH, S, D: coalesced_pv_kernel[(S, BH)](p, v, o, S, D, BLOCK_N_STRIP))
coalesced.__name__ = "coalesced"


def strides(*tensors: torch.Tensor) -> tuple:
    """flash_kernel's stride arguments: each (B, H, S, D) tensor's four strides, in turn."""
    return tuple(n for t in tensors for n in t.stride())


def launch_flash(kernel, q, k, v, causal: bool, out: torch.Tensor | None = None, tensor_cores: bool = True,
                 lse: torch.Tensor | None = None, **config) -> tuple:
    """flash_kernel (rungs 3-6) on the operands, checked (operands), a program per BLOCK_M queries of a head: (out,
    what Triton launched: its compiled kernel, None in the interpreter or where out is empty). `kernel` is flash_kernel with
    `config` (BLOCK_M, BLOCK_N, num_warps, num_stages), or flash_kernel under an autotuner (kernels/attention.py's
    rung 6), which picks them: the grid reads BLOCK_M from the launch's meta-parameters. lse: (B, H, S) fp32,
    contiguous, to write each query's log-sum-exp into as well (STORE_LSE: what the backward takes)."""
    B, H, S, D, out = operands(q, k, v, out)
    if lse is not None:
        validate.tensor("lse", lse, dtype=torch.float32, ndim=3, device=device())
        if tuple(lse.shape) != (B, H, S):
            raise ValueError(f"lse has shape {tuple(lse.shape)}; the log-sum-exp of q {tuple(q.shape)} is {(B, H, S)}")
    compiled = None
    if out.numel():
        compiled = kernel[lambda meta: (triton.cdiv(S, meta["BLOCK_M"]), B * H)](
            q, k, v, out, lse, S, H, LOG2E / math.sqrt(D), *strides(q, k, v, out), D, CAUSAL=causal,
            TENSOR_CORES=tensor_cores, STORE_LSE=lse is not None, **config)
    return out, compiled


def _fused_launcher(rung: str, tensor_cores: bool):
    def run(q, k, v, causal: bool, out: torch.Tensor | None = None) -> torch.Tensor:
        return launch_flash(flash_kernel, q, k, v, causal, out, tensor_cores, **TILES[rung])[0]
    run.__name__ = rung.split("_", 1)[1]
    return run


fused = _fused_launcher("3_fused", tensor_cores=False)
tensor_core = _fused_launcher("4_tensor_core", tensor_cores=True)
pipelined = _fused_launcher("5_pipelined", tensor_cores=True)

# Rungs 6 and 7 are searched per shape (kernels/attention.py); run alone, this file launches them in one configuration,
# on a GPU rung 6's H100 winner at (4, 32, 4096, 64) without a mask
SELF_CHECK_CONFIG = (dict(BLOCK_M=128, BLOCK_N=64, num_warps=8, num_stages=3) if WORLD.gpu
              else dict(BLOCK_M=16, BLOCK_N=16, num_warps=4, num_stages=1))

# ------------------------------------------------------------- rung 7 (Hopper): tensor descriptors

@triton.jit
def flash_tma_kernel(q_desc, k_desc, v_desc, o_desc, S, H, qk_scale, HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr,
                     BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr, PTX_PASS: tl.constexpr = ""):
    """flash_kernel (rung 6) with Q, K, V read and O written through tensor descriptors: each of all of a tensor,
    (B, H, S, D), copied in boxes of one head's BLOCK_M (Q, O) or BLOCK_N (K, V) rows. On sm_90 a box is one TMA
    copy into shared memory, issued by one thread: the copy engine computes the addresses, reads rows past S as
    zeros (a box never crosses into the next head: it is a head's rows) and leaves them out of a store, and the
    loop's registers hold no pointers or load masks. The launcher builds the four descriptors on the host, once a
    call, and passes them by value: a program starts its first copy at once.

    PTX_PASS is never read: it is there for Triton's cache key. Rung 8 (kernels/attention.py) passes the tag of the
    PTX pass it compiles through (ladder.ptx.tag(): its name and content hash), rung 7 leaves it "": a constexpr is
    part of the key on every Triton version, so the two builds are cached apart and an edited pass compiles anew
    (Triton 3.6 asks the pass's hook for no key).
    The measurements behind this design: kernels/NOTES.md."""
    start_m, bh = tl.program_id(0) * BLOCK_M, tl.program_id(1)
    qk_scale = tl.cast(qk_scale, tl.float32)
    b, h = bh // H, bh % H   # a descriptor's coordinates (32-bit)
    q = q_desc.load([b, h, start_m, 0]).reshape(BLOCK_M, HEAD_DIM)
    rows = start_m + tl.arange(0, BLOCK_M)
    m = tl.full((BLOCK_M,), float("-inf"), tl.float32)
    l = tl.zeros((BLOCK_M,), tl.float32)
    acc = tl.zeros((BLOCK_M, HEAD_DIM), tl.float32)
    unmasked_end, end = key_passes(start_m, S, BLOCK_M, BLOCK_N, CAUSAL)   # rung 6's two passes
    m, l, acc = attend(q, m, l, acc, k_desc, v_desc, b, h, 0, 0, 0, 0, rows, S, qk_scale, 0, unmasked_end, HEAD_DIM,
                       BLOCK_N, False, CAUSAL, True, True)
    m, l, acc = attend(q, m, l, acc, k_desc, v_desc, b, h, 0, 0, 0, 0, rows, S, qk_scale, unmasked_end, end, HEAD_DIM,
                       BLOCK_N, True, CAUSAL, True, True)
    o_desc.store([b, h, start_m, 0], (acc / l[:, None]).to(tl.float16).reshape(1, 1, BLOCK_M, HEAD_DIM))


# Each descriptor's box: rows of one head, BLOCK_M of Q and O, BLOCK_N of K and V.
DESCRIPTOR_ROWS = {"q_desc": "BLOCK_M", "k_desc": "BLOCK_N", "v_desc": "BLOCK_N", "o_desc": "BLOCK_M"}


def descriptor_boxes(nargs: dict) -> None:
    """A configuration's boxes (DESCRIPTOR_ROWS; an autotuner calls this before it compiles or launches a
    configuration, launch_flash_tma before a launch in a given one: a descriptor's box is part of the kernel's
    signature)."""
    for name, rows in DESCRIPTOR_ROWS.items():
        nargs[name].block_shape = [1, 1, nargs[rows], nargs["HEAD_DIM"]]


def tma_operands(q, k, v, out) -> tuple:
    """(B, H, S, D, out, the four tensor descriptors) of a call of rung 7 or 8: a TMA copy starts on 16 bytes, so must
    every tensor; each descriptor's box is set per configuration (descriptor_boxes)."""
    B, H, S, D, out = operands(q, k, v, out)
    for name, t in (("q", q), ("k", k), ("v", v), ("out", out)):
        validate.tensor(name, t, dtype=torch.float16, ndim=4, device=device(), align_bytes=16)
    return B, H, S, D, out, [TensorDescriptor.from_tensor(t, [1, 1, 16, D]) for t in (q, k, v, out)]


def launch_flash_tma(kernel, checked: tuple, causal: bool, ptx_pass: str = "", **config) -> tuple:
    """flash_tma_kernel (rungs 7 and 8) on `checked` = tma_operands(...), a program per BLOCK_M queries of a head:
    (out, what Triton launched: its compiled kernel, None in the interpreter or where out is empty). `kernel` is
    flash_tma_kernel with `config` (BLOCK_M, BLOCK_N, num_warps, num_stages; the boxes set to match), or
    flash_tma_kernel under an autotuner whose configurations set the boxes (descriptor_boxes as their pre_hook).
    ptx_pass: the kernel's PTX_PASS (rung 8's tag of the pass it compiles through)."""
    B, H, S, D, out, descriptors = checked
    compiled = None
    if out.numel():
        if config:
            descriptor_boxes(dict(zip(DESCRIPTOR_ROWS, descriptors), HEAD_DIM=D, **config))
        compiled = kernel[lambda meta: (triton.cdiv(S, meta["BLOCK_M"]), B * H)](
            *descriptors, S, H, LOG2E / math.sqrt(D), D, CAUSAL=causal, PTX_PASS=ptx_pass, **config)
    return out, compiled


# ------------------------------------------------------------- run alone: python -m kernels.triton.attention

def _self_check(shape: tuple[int, int, int, int] = (1, 2, 37, 64), timed: tuple[int, int, int, int] = (4, 32, 4096, 64)):
    """Each rung checked against the fp32 softmax(Q·Kᵀ/√D)·V at a ragged `shape` (B, H, S, D), causal and not (on
    a GPU, or in the interpreter on a CPU, at a smaller S there), then, on a GPU, timed beside SDPA at `timed`.
    Rungs 6 and 7 run in SELF_CHECK_CONFIG; rung 8, rung 7's kernel through the harness's compile pass, is
    kernels/attention.py's."""
    if not WORLD.gpu:
        shape = (*shape[:2], 17, shape[3])   # the interpreter runs a program at a time: a 16-wide tile and a ragged row
    gen = torch.Generator(device()).manual_seed(0)
    launchers = {"1_naive": naive, "2_coalesced": coalesced, "3_fused": fused, "4_tensor_core": tensor_core,
                 "5_pipelined": pipelined,
                 "6_autotuned": lambda q, k, v, causal: launch_flash(flash_kernel, q, k, v, causal,
                                                                     **SELF_CHECK_CONFIG)[0]}
    if not WORLD.gpu or torch.cuda.get_device_capability() >= (9, 0):   # the interpreter runs descriptors too
        launchers["7_tma"] = lambda q, k, v, causal: launch_flash_tma(flash_tma_kernel, tma_operands(q, k, v, None),
                                                                      causal, **SELF_CHECK_CONFIG)[0]
    q, k, v = (torch.randn(*shape, generator=gen, device=device()).half() for _ in range(3))
    print(f"checked at (B, H, S, D) = {shape} ({'GPU' if WORLD.gpu else 'CPU: the Triton interpreter'}), max |error| "
          "against the fp32 math, without a mask / causal")
    for name, run in launchers.items():
        errors = []
        for causal in (False, True):
            scores = (q.float() @ k.float().transpose(-1, -2)) / math.sqrt(shape[3])
            if causal:   # no key after the query
                scores = scores.masked_fill(torch.ones_like(scores, dtype=torch.bool).triu(1), -math.inf)
            errors.append((run(q, k, v, causal).float() - torch.softmax(scores, -1) @ v.float()).abs().max().item())
        print(f"  {name:16s} {errors[0]:.3g} / {errors[1]:.3g}" + ("" if all(e < 0.01 for e in errors) else "   WRONG"))
    if not WORLD.gpu:
        print("timing needs a GPU")
        return
    B, H, S, D = timed
    q, k, v = (torch.randn(B, H, S, D, device="cuda").half() for _ in range(3))
    print(f"median ms at (B, H, S, D) = {timed}, without a mask (triton.testing.do_bench), TFLOP/s")
    sdpa = lambda q, k, v, causal: torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)  # noqa: E731
    timed_rungs = {n: f for n, f in launchers.items() if n not in ("1_naive", "2_coalesced")}   # S² of them: slow
    for name, run in {"SDPA": sdpa, **timed_rungs}.items():
        ms = triton.testing.do_bench(lambda: run(q, k, v, False))
        print(f"  {name:16s} {ms:8.3f} ms  {4 * B * H * S * S * D / ms / 1e9:6.1f}")


if __name__ == "__main__":
    _self_check()
