"""Attention backward in Triton: dQ, dK, dV of O = softmax(Q·Kᵀ·scale)·V, given dO.

Q, K, V, O, dO are fp16 (B, H, S, D) strided views, as ladder.ops.attention takes them; sums in fp32, gradients
in the inputs' dtype. (float64 inputs run the same kernels in float64 throughout: what gradcheck needs.)

1_materialized  autograd through the math: S = Q·Kᵀ·scale, P = softmax(S), O = P·V in fp32, and autograd saves
                P, B·H·S² fp32, for the backward: 4 GiB at B·H = 64, S = 4096 (saved_bytes says how much)
2_flash         FlashAttention-2's backward: the forward saves only each query's log-sum-exp (B, H, S); a
                preprocess computes D = rowsum(dO ∘ O); one program per K/V tile accumulates dK and dV over the
                Q tiles, one per Q tile accumulates dQ over the K/V tiles, each recomputing P tile by tile
                from Q, K and the log-sum-exp; causal blocks above the diagonal are skipped
(3_atomic_dq    to come: the K/V programs also add their share of dQ with atomics: one kernel, no dQ pass)
(4_autotuned    to come: rung 2's tiles, warps and stages searched per (S, D, causal))

The derivation. With the scaled scores S = scale·Q·Kᵀ, P = softmax(S) row by row, O = P·V:

    dV = Pᵀ·dO                  (O is linear in V)
    dP = dO·Vᵀ                  (O is linear in P)
    dS = P ∘ (dP − D)           (softmax's Jacobian, row i: dS_ij = P_ij·(dP_ij − Σ_k P_ik·dP_ik))
    dQ = scale·dS·K,  dK = scale·dSᵀ·Q

and the row sum in softmax's Jacobian needs neither P nor dP: Σ_k P_ik·dP_ik = Σ_k P_ik·(dO_i·V_k) =
dO_i·(Σ_k P_ik·V_k) = dO_i·O_i. So D = rowsum(dO ∘ O), one number per query from O and dO alone, computed
before any tile of P exists. P itself is recomputed: P_ij = exp(S_ij − LSE_i), where LSE_i = log Σ_j exp(S_ij)
is what the forward (kernels/triton/attention.py, flash_kernel with STORE_LSE) wrote. No running max, no
rescaling: one exp per score. If the log-sum-exp is itself used downstream (its gradient dLSE), then
dS_ij gains P_ij·dLSE_i, the same as D_i − dLSE_i in place of D_i: the preprocess subtracts it.

Rung 2's two kernels split the work by what each program owns. dK and dV rows belong to keys: a program holds
BLOCK_N keys (K, V and their dK, dV accumulators on chip) and walks the queries in BLOCK_M steps. dQ rows belong
to queries: a program holds BLOCK_M queries (Q, dO, dQ) and walks the keys in BLOCK_N steps. Each computes
P tile by tile, twice over in all (the price of writing every gradient once, with no atomics). Under a causal
mask a key j is seen only by queries i ≥ j: the K/V program starts its walk at its own first key, the Q
program stops its walk at its last query. As in the forward, blocks wholly inside the mask and inside S run
without compares; only the diagonal blocks and S's ragged last block are masked.
"""
from __future__ import annotations

import math

import torch
import triton
import triton.language as tl
from torch.library import wrap_triton

from ladder.world import WORLD

# exp(x) = exp2(x · log2 e), exp2 is one instruction; a global the kernels read, so a constexpr
LOG2E = tl.constexpr(1.4426950408889634)


# ------------------------------------------------------------- rung 1: autograd through the materialized math

def materialized(q, k, v, causal: bool, scale: float | None = None) -> torch.Tensor:
    """O in the inputs' dtype, computed in fp32 by torch ops that autograd records: backward() gives dQ, dK, dV
    and autograd keeps the probabilities P (B, H, S, S) fp32 alive from the forward to the backward."""
    D, S = q.shape[-1], q.shape[-2]
    s = q.float() @ k.float().transpose(-1, -2) * (1 / math.sqrt(D) if scale is None else scale)
    if causal:
        s = s.masked_fill(torch.ones(S, S, dtype=torch.bool, device=q.device).triu(1), float("-inf"))
    return (torch.softmax(s, dim=-1) @ v.float()).to(q.dtype)


def saved_bytes(B: int, H: int, S: int, D: int, rung: str) -> int:
    """What each rung keeps from the forward for the backward, beyond the fp16 inputs it already holds: rung 1
    P (fp32, B·H·S²) and the fp32 copies of Q, K, V its matmuls read (causal: also the S×S bool mask, not
    counted); rung 2 O (fp16) and the log-sum-exp (fp32, B·H·S)."""
    if rung == "1_materialized":
        return 4 * B * H * S * S + 3 * 4 * B * H * S * D
    if rung == "2_flash":
        return 2 * B * H * S * D + 4 * B * H * S
    raise ValueError(f"no rung {rung!r}: the backward has 1_materialized and 2_flash")


# ------------------------------------------------------------- rung 2: the preprocess, D = rowsum(dO ∘ O)

@triton.jit
def delta_kernel(o_ptr, do_ptr, dlse_ptr, delta_ptr, S, H,
                 stride_ob, stride_oh, stride_os, stride_od, stride_dob, stride_doh, stride_dos, stride_dod,
                 HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr):
    """D for queries BLOCK_M·program_id(0).. of head program_id(1) = b·H + h, in delta's dtype (the sums'),
    (B, H, S) contiguous; minus dLSE (same layout) when the log-sum-exp has a gradient (dlse_ptr not None)."""
    start_m, bh = tl.program_id(0) * BLOCK_M, tl.program_id(1)
    b, h = (bh // H).to(tl.int64), (bh % H).to(tl.int64)
    rows = start_m + tl.arange(0, BLOCK_M)
    dims = tl.arange(0, HEAD_DIM)
    acc = delta_ptr.dtype.element_ty
    o = tl.load(o_ptr + b * stride_ob + h * stride_oh + rows[:, None] * stride_os + dims[None, :] * stride_od,
                mask=rows[:, None] < S, other=0.0)
    do = tl.load(do_ptr + b * stride_dob + h * stride_doh + rows[:, None] * stride_dos + dims[None, :] * stride_dod,
                 mask=rows[:, None] < S, other=0.0)
    delta = tl.sum(o.to(acc) * do.to(acc), axis=1)
    if dlse_ptr is not None:
        delta -= tl.load(dlse_ptr + bh.to(tl.int64) * S + rows, mask=rows < S, other=0.0).to(acc)
    tl.store(delta_ptr + bh.to(tl.int64) * S + rows, delta, mask=rows < S)


# ------------------------------------------------------------- rung 2: dK and dV, a program per K/V tile

@triton.jit
def dkdv_steps(dk, dv, k, v, keys, q_ptr, do_ptr, lse_ptr, delta_ptr, stride_qs, stride_qd, stride_dos, stride_dod,
               S, qk_scale, lo, hi, HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, MASKED: tl.constexpr,
               CAUSAL: tl.constexpr):
    """Queries lo..hi (BLOCK_M at a time) into the dK and dV of the keys `keys` (K, V: their tiles). The tiles
    are transposed, Pᵀ and dPᵀ (keys down, queries across), so that each step's products land on rows that
    belong to this program's keys. MASKED: steps that may hold queries past S or (causal) before a key."""
    dims = tl.arange(0, HEAD_DIM)
    for start_m in range(lo, hi, BLOCK_M):
        rows = start_m + tl.arange(0, BLOCK_M)
        qt_ptrs = q_ptr + rows[None, :] * stride_qs + dims[:, None] * stride_qd      # Qᵀ: a D x BLOCK_M view of Q
        do_ptrs = do_ptr + rows[:, None] * stride_dos + dims[None, :] * stride_dod
        if MASKED:
            qt = tl.load(qt_ptrs, mask=rows[None, :] < S, other=0.0)
            do = tl.load(do_ptrs, mask=rows[:, None] < S, other=0.0)
            lse2 = tl.load(lse_ptr + rows, mask=rows < S, other=0.0) * LOG2E
            delta = tl.load(delta_ptr + rows, mask=rows < S, other=0.0)
        else:
            qt = tl.load(qt_ptrs)
            do = tl.load(do_ptrs)
            lse2 = tl.load(lse_ptr + rows) * LOG2E
            delta = tl.load(delta_ptr + rows)
        # Pᵀ from the forward's log-sum-exp (here in base 2, as the scale): the softmax without its max or sum
        pt = tl.exp2(tl.dot(k, qt) * qk_scale - lse2[None, :])
        if MASKED:  # a score the forward masked has P = 0; where, not a multiply: exp2 may overflow to inf there
            keep = rows[None, :] < S
            if CAUSAL:
                keep = keep & (keys[:, None] <= rows[None, :])
            pt = tl.where(keep, pt, 0.0)
        dv = tl.dot(pt.to(do.dtype), do, dv, out_dtype=dv.dtype)  # dV += Pᵀ·dO, P rounded to the inputs' type
        dpt = tl.dot(v, tl.trans(do))                          # dPᵀ = V·dOᵀ
        dst = pt * (dpt - delta[None, :])                      # dSᵀ = Pᵀ ∘ (dPᵀ − D)
        # dK += dSᵀ·Q (the scale comes once, at the end); out_dtype: the accumulator's (Triton 3.6 wants it said)
        dk = tl.dot(dst.to(qt.dtype), tl.trans(qt), dk, out_dtype=dk.dtype)
    return dk, dv


@triton.jit
def dkdv_kernel(q_ptr, k_ptr, v_ptr, do_ptr, lse_ptr, delta_ptr, dk_ptr, dv_ptr, S, H, scale,
                stride_qb, stride_qh, stride_qs, stride_qd, stride_kb, stride_kh, stride_ks, stride_kd,
                stride_vb, stride_vh, stride_vs, stride_vd, stride_dob, stride_doh, stride_dos, stride_dod,
                stride_dkb, stride_dkh, stride_dks, stride_dkd, stride_dvb, stride_dvh, stride_dvs, stride_dvd,
                HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr):
    """dK and dV of keys BLOCK_N·program_id(0).. of head program_id(1) = b·H + h. The log-sum-exp and D are
    (B, H, S) contiguous, in the sums' dtype (fp32; float64 for float64 inputs). Causal: BLOCK_N is a multiple
    of BLOCK_M, so that the diagonal is whole query steps."""
    start_n, bh = tl.program_id(0) * BLOCK_N, tl.program_id(1)
    b, h = (bh // H).to(tl.int64), (bh % H).to(tl.int64)
    acc = delta_ptr.dtype.element_ty
    scale = tl.cast(scale, acc)  # Triton's launcher passes a Python float as fp32, Inductor's as fp64
    keys = start_n + tl.arange(0, BLOCK_N)
    dims = tl.arange(0, HEAD_DIM)
    # keys past S load as zeros: their rows of dK and dV are garbage, never stored, and mix with no other row
    k = tl.load(k_ptr + b * stride_kb + h * stride_kh + keys[:, None] * stride_ks + dims[None, :] * stride_kd,
                mask=keys[:, None] < S, other=0.0)
    v = tl.load(v_ptr + b * stride_vb + h * stride_vh + keys[:, None] * stride_vs + dims[None, :] * stride_vd,
                mask=keys[:, None] < S, other=0.0)
    dk = tl.zeros((BLOCK_N, HEAD_DIM), acc)
    dv = tl.zeros((BLOCK_N, HEAD_DIM), acc)
    q_head, do_head = q_ptr + b * stride_qb + h * stride_qh, do_ptr + b * stride_dob + h * stride_doh
    lse_head, delta_head = lse_ptr + bh.to(tl.int64) * S, delta_ptr + bh.to(tl.int64) * S
    qk_scale = scale * LOG2E
    # Causal: queries before start_n see none of these keys and are skipped; queries start_n..start_n + BLOCK_N
    # see some of them (the diagonal, masked); the queries after see all of them. Then, causal or not: the
    # query steps wholly inside S without compares, S's ragged last step with them.
    if CAUSAL:
        dk, dv = dkdv_steps(dk, dv, k, v, keys, q_head, do_head, lse_head, delta_head, stride_qs, stride_qd,
                            stride_dos, stride_dod, S, qk_scale, start_n, tl.minimum(S, start_n + BLOCK_N),
                            HEAD_DIM, BLOCK_M, True, CAUSAL)
        lo = start_n + BLOCK_N
    else:
        lo = 0
    whole = (S // BLOCK_M) * BLOCK_M
    dk, dv = dkdv_steps(dk, dv, k, v, keys, q_head, do_head, lse_head, delta_head, stride_qs, stride_qd,
                        stride_dos, stride_dod, S, qk_scale, lo, whole, HEAD_DIM, BLOCK_M, False, CAUSAL)
    dk, dv = dkdv_steps(dk, dv, k, v, keys, q_head, do_head, lse_head, delta_head, stride_qs, stride_qd,
                        stride_dos, stride_dod, S, qk_scale, tl.maximum(lo, whole), S, HEAD_DIM, BLOCK_M, True,
                        CAUSAL)
    dk *= scale
    tl.store(dk_ptr + b * stride_dkb + h * stride_dkh + keys[:, None] * stride_dks + dims[None, :] * stride_dkd,
             dk.to(dk_ptr.dtype.element_ty), mask=keys[:, None] < S)
    tl.store(dv_ptr + b * stride_dvb + h * stride_dvh + keys[:, None] * stride_dvs + dims[None, :] * stride_dvd,
             dv.to(dv_ptr.dtype.element_ty), mask=keys[:, None] < S)


# ------------------------------------------------------------- rung 2: dQ, a program per Q tile

@triton.jit
def dq_steps(dq, q, do, lse2, delta, rows, k_ptr, v_ptr, stride_ks, stride_kd, stride_vs, stride_vd, S, qk_scale,
             lo, hi, HEAD_DIM: tl.constexpr, BLOCK_N: tl.constexpr, MASKED: tl.constexpr, CAUSAL: tl.constexpr):
    """Keys lo..hi (BLOCK_N at a time) into the dQ of the queries `rows` (Q, dO, their log-sum-exp in base 2
    and D: their tiles). The same P and dS as dkdv_steps, untransposed. MASKED: steps that may hold keys past S
    or (causal) after a query."""
    dims = tl.arange(0, HEAD_DIM)
    for start_n in range(lo, hi, BLOCK_N):
        keys = start_n + tl.arange(0, BLOCK_N)
        kt_ptrs = k_ptr + keys[None, :] * stride_ks + dims[:, None] * stride_kd      # Kᵀ: a D x BLOCK_N view of K
        vt_ptrs = v_ptr + keys[None, :] * stride_vs + dims[:, None] * stride_vd      # Vᵀ
        if MASKED:
            kt = tl.load(kt_ptrs, mask=keys[None, :] < S, other=0.0)
            vt = tl.load(vt_ptrs, mask=keys[None, :] < S, other=0.0)
        else:
            kt = tl.load(kt_ptrs)
            vt = tl.load(vt_ptrs)
        p = tl.exp2(tl.dot(q, kt) * qk_scale - lse2[:, None])
        if MASKED:
            keep = keys[None, :] < S
            if CAUSAL:
                keep = keep & (keys[None, :] <= rows[:, None])
            p = tl.where(keep, p, 0.0)
        dp = tl.dot(do, vt)                                    # dP = dO·Vᵀ
        ds = p * (dp - delta[:, None])                         # dS = P ∘ (dP − D)
        dq = tl.dot(ds.to(kt.dtype), tl.trans(kt), dq, out_dtype=dq.dtype)  # dQ += dS·K
    return dq


@triton.jit
def dq_kernel(q_ptr, k_ptr, v_ptr, do_ptr, lse_ptr, delta_ptr, dq_ptr, S, H, scale,
              stride_qb, stride_qh, stride_qs, stride_qd, stride_kb, stride_kh, stride_ks, stride_kd,
              stride_vb, stride_vh, stride_vs, stride_vd, stride_dob, stride_doh, stride_dos, stride_dod,
              stride_dqb, stride_dqh, stride_dqs, stride_dqd,
              HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr):
    """dQ of queries BLOCK_M·program_id(0).. of head program_id(1) = b·H + h. Causal: BLOCK_M is a multiple of
    BLOCK_N, as in the forward."""
    start_m, bh = tl.program_id(0) * BLOCK_M, tl.program_id(1)
    b, h = (bh // H).to(tl.int64), (bh % H).to(tl.int64)
    acc = delta_ptr.dtype.element_ty
    scale = tl.cast(scale, acc)
    rows = start_m + tl.arange(0, BLOCK_M)
    dims = tl.arange(0, HEAD_DIM)
    # queries past S load as zeros (and a log-sum-exp and D of 0): finite, their rows of dQ never stored
    q = tl.load(q_ptr + b * stride_qb + h * stride_qh + rows[:, None] * stride_qs + dims[None, :] * stride_qd,
                mask=rows[:, None] < S, other=0.0)
    do = tl.load(do_ptr + b * stride_dob + h * stride_doh + rows[:, None] * stride_dos + dims[None, :] * stride_dod,
                 mask=rows[:, None] < S, other=0.0)
    lse2 = tl.load(lse_ptr + bh.to(tl.int64) * S + rows, mask=rows < S, other=0.0) * LOG2E
    delta = tl.load(delta_ptr + bh.to(tl.int64) * S + rows, mask=rows < S, other=0.0)
    dq = tl.zeros((BLOCK_M, HEAD_DIM), acc)
    # the forward's two passes over the keys: causal, keys before start_m unmasked, the diagonal masked, none
    # after it; else the whole key blocks unmasked and S's ragged last block masked
    if CAUSAL:
        unmasked_end, end = start_m, tl.minimum(S, start_m + BLOCK_M)
    else:
        unmasked_end, end = (S // BLOCK_N) * BLOCK_N, S
    k_head, v_head = k_ptr + b * stride_kb + h * stride_kh, v_ptr + b * stride_vb + h * stride_vh
    qk_scale = scale * LOG2E
    dq = dq_steps(dq, q, do, lse2, delta, rows, k_head, v_head, stride_ks, stride_kd, stride_vs, stride_vd, S,
                  qk_scale, 0, unmasked_end, HEAD_DIM, BLOCK_N, False, CAUSAL)
    dq = dq_steps(dq, q, do, lse2, delta, rows, k_head, v_head, stride_ks, stride_kd, stride_vs, stride_vd, S,
                  qk_scale, unmasked_end, end, HEAD_DIM, BLOCK_N, True, CAUSAL)
    dq *= scale
    tl.store(dq_ptr + b * stride_dqb + h * stride_dqh + rows[:, None] * stride_dqs + dims[None, :] * stride_dqd,
             dq.to(dq_ptr.dtype.element_ty), mask=rows[:, None] < S)


# ------------------------------------------------------------- the launcher

# Per head dimension, each kernel's tiles, warps and stages. The K/V program's tile is its keys (dK and dV
# accumulators: 2·BLOCK_N·D fp32 across its threads), its step a few queries; the Q program the other way
# round. Rung 2's are fixed starting points (FlashAttention-2's Triton tutorial's shapes, halved where D = 128
# would hold twice the accumulators); rung 4 will search them.
GPU_TILES = {
    64: dict(delta=dict(BLOCK_M=64, num_warps=4),
             dkdv=dict(BLOCK_M=32, BLOCK_N=128, num_warps=4, num_stages=3),
             dq=dict(BLOCK_M=128, BLOCK_N=32, num_warps=4, num_stages=3)),
    128: dict(delta=dict(BLOCK_M=64, num_warps=4),
              dkdv=dict(BLOCK_M=32, BLOCK_N=64, num_warps=4, num_stages=2),
              dq=dict(BLOCK_M=64, BLOCK_N=32, num_warps=4, num_stages=2)),
}
# tl.dot's smallest tiles, the step half the tile: every pass (unmasked, diagonal, ragged) runs at small S
INTERPRETER_TILES = {d: dict(delta=dict(BLOCK_M=16, num_warps=4),
                             dkdv=dict(BLOCK_M=16, BLOCK_N=32, num_warps=4, num_stages=1),
                             dq=dict(BLOCK_M=32, BLOCK_N=16, num_warps=4, num_stages=1)) for d in (64, 128)}
TILES = GPU_TILES if WORLD.gpu else INTERPRETER_TILES
DTYPES = (torch.float16, torch.float64)


def strides(*tensors: torch.Tensor) -> tuple:
    """The kernels' stride arguments: each (B, H, S, D) tensor's four strides, in turn."""
    return tuple(n for t in tensors for n in t.stride())


def _launch(kernel, grid: tuple, args: tuple, config: dict, **constexprs) -> None:
    """kernel[grid](*args) with config's tiles, warps and stages, through wrap_triton: on a GPU ladder.ops runs
    this launcher as a triton_op (ladder::attention_backward), whose launches torch.compile sees only so;
    eagerly it just launches, and in the interpreter wrap_triton hands the kernel back as it is."""
    wrap_triton(kernel)[grid](*args, **config, **constexprs)


def backward(q, k, v, o, lse, do, causal: bool, scale: float | None = None, dlse=None, out=None) -> tuple:
    """Rung 2: (dQ, dK, dV) of attention(q, k, v, causal, scale) = o, whose log-sum-exp (natural log, (B, H, S)
    contiguous, fp32; float64 for float64 inputs) is lse, given dO = do and optionally dLSE = dlse (B, H, S).
    q, k, v, o, do: (B, H, S, D) views of one shape, any strides, all fp16 or all float64; D 64 or 128.
    out: (dq, dk, dv) to write (else new, laid out as q, k, v where they are dense)."""
    B, H, S, D = q.shape
    for name, t in (("k", k), ("v", v), ("o", o), ("do", do)):
        if t.shape != q.shape or t.dtype != q.dtype:
            raise ValueError(f"attention backward: {name} is {t.dtype} {tuple(t.shape)}, q {q.dtype} {tuple(q.shape)}")
    if q.dtype not in DTYPES or D not in TILES:
        raise ValueError(f"attention backward: q is {q.dtype} with D={D}; the kernels take {DTYPES}, D in "
                         f"{tuple(TILES)}")
    acc = torch.float64 if q.dtype == torch.float64 else torch.float32
    if lse.shape != (B, H, S) or lse.dtype != acc or not lse.is_contiguous():
        raise ValueError(f"attention backward: lse must be {acc} (B, H, S) contiguous, got {lse.dtype} "
                         f"{tuple(lse.shape)} strides {lse.stride()}")
    dq, dk, dv = out if out is not None else (torch.empty_like(q), torch.empty_like(k), torch.empty_like(v))
    if not q.numel():
        return dq, dk, dv
    scale = 1 / math.sqrt(D) if scale is None else float(scale)
    tiles = TILES[D]
    delta = torch.empty((B, H, S), dtype=acc, device=q.device)
    if dlse is not None:  # autograd may hand an expanded or strided gradient: B·H·S numbers, copied if so
        dlse = dlse.to(acc).contiguous()
    _launch(delta_kernel, (triton.cdiv(S, tiles["delta"]["BLOCK_M"]), B * H),
            (o, do, dlse, delta, S, H, *strides(o, do), D), tiles["delta"])
    _launch(dkdv_kernel, (triton.cdiv(S, tiles["dkdv"]["BLOCK_N"]), B * H),
            (q, k, v, do, lse, delta, dk, dv, S, H, scale, *strides(q, k, v, do, dk, dv), D), tiles["dkdv"],
            CAUSAL=causal)
    _launch(dq_kernel, (triton.cdiv(S, tiles["dq"]["BLOCK_M"]), B * H),
            (q, k, v, do, lse, delta, dq, S, H, scale, *strides(q, k, v, do, dq), D), tiles["dq"], CAUSAL=causal)
    return dq, dk, dv


# ------------------------------------------------------------- compiling ahead of time (ladder.sass)

def sass_case(kernel: str, head_dim: int = 64, causal: bool = True) -> dict:
    """ladder.sass.triton_sass's arguments for "dkdv" or "dq" as rung 2 launches it on a GPU from ladder.ops:
    fp16 operands (16-byte aligned), fp32 sums, the scale as Inductor passes it (fp64), each row's elements
    adjacent (stride 1 along D, the others multiples of 16)."""
    fn = {"dkdv": dkdv_kernel, "dq": dq_kernel}[kernel]
    config = GPU_TILES[head_dim][kernel]
    names = fn.arg_names[:fn.arg_names.index("HEAD_DIM")]
    types = {n: "*fp32" if n in ("lse_ptr", "delta_ptr") else "*fp16" if n.endswith("_ptr") else
             "fp64" if n == "scale" else "i32" for n in names}
    return dict(kernel=fn, signature={**types, "HEAD_DIM": "constexpr", "BLOCK_M": "constexpr",
                                      "BLOCK_N": "constexpr", "CAUSAL": "constexpr"},
                constexprs=dict(HEAD_DIM=head_dim, BLOCK_M=config["BLOCK_M"], BLOCK_N=config["BLOCK_N"],
                                CAUSAL=causal, **{n: 1 for n in names if n.startswith("stride") and n.endswith("d")}),
                divisible_by_16=tuple(n for n in names if n.endswith("_ptr")
                                      or (n.startswith("stride") and not n.endswith("d"))),
                num_warps=config["num_warps"], num_stages=config["num_stages"])
