"""Attention backward in Triton: dQ, dK, dV of O = softmax(Q·Kᵀ·scale)·V, given dO.

Q, K, V, O, dO are fp16 (B, H, S, D) strided views, as ladder.ops.attention takes them; sums in fp32, gradients
in the inputs' dtype. (float64 inputs run the same kernels in float64 throughout: what gradcheck needs.)

1_materialized  autograd through the math: S = Q·Kᵀ·scale, P = softmax(S), O = P·V in fp32, and autograd saves
                P, B·H·S² fp32, for the backward: 4 GiB at B·H = 64, S = 4096 (saved_bytes says how much)
2_flash         FlashAttention-2's backward: the forward saves only each query's log-sum-exp (B, H, S); a
                preprocess computes Δ = rowsum(dO ∘ O); one program per K/V tile accumulates dK and dV over the
                Q tiles, one per Q tile accumulates dQ over the K/V tiles, each recomputing P tile by tile
                from Q, K and the log-sum-exp; causal blocks above the diagonal are skipped
3_atomic_dq     one kernel: rung 2's K/V programs also add their share of dQ, scale·dS·K, into an fp32 buffer
                (then cast to the inputs' dtype): P computed once instead of twice, no dQ pass; the price is the
                adds (S / BLOCK_N programs add into each dQ row: element atomics, or on a GPU with the TMA one bulk
                reduction a tile) and a run-to-run varying sum order
4_autotuned     rung 2's two kernels and rung 3's one, each with its tiles, warps and stages searched on this GPU
                per (S-bucket, D, causal), cached per GPU by ladder.autotune; per shape the faster way runs (rung 2
                where deterministic algorithms are asked for), rung 2's without the preprocess: its Q kernel,
                launched first, computes Δ of its own queries (delta_in_dq_backward). The interpreter: rung 2's
                fixed small tiles

This file holds the kernels and their launchers: rungs 1-3, and run_config, one kernel in a given configuration;
and a self-check: `python -m kernels.triton.attention_backward` checks rungs 1-3 against autograd through the fp32
math and, on a GPU, times them beside SDPA's backward. Rung 4's search, its choice per shape (autotuned_backward)
and the SASS builds live with the problem definition, kernels/attention_backward.py.

The derivation. With the scaled scores S = scale·Q·Kᵀ, P = softmax(S) row by row, O = P·V:

    dV = Pᵀ·dO                  (O is linear in V)
    dP = dO·Vᵀ                  (O is linear in P)
    dS = P ∘ (dP − Δ)           (softmax's Jacobian, row i: dS_ij = P_ij·(dP_ij − Σ_k P_ik·dP_ik))
    dQ = scale·dS·K,  dK = scale·dSᵀ·Q

and the row sum in softmax's Jacobian needs neither P nor dP: Σ_k P_ik·dP_ik = Σ_k P_ik·(dO_i·V_k) =
dO_i·(Σ_k P_ik·V_k) = dO_i·O_i. So Δ = rowsum(dO ∘ O), one number per query from O and dO alone, computed
before any tile of P exists. P itself is recomputed: P_ij = exp(S_ij − LSE_i), where LSE_i = log Σ_j exp(S_ij)
is what the forward (kernels/triton/attention.py, flash_kernel with STORE_LSE) wrote. No running max, no
rescaling: one exp per score. If the log-sum-exp is itself used downstream (its gradient dLSE), then
dS_ij gains P_ij·dLSE_i, the same as D_i − dLSE_i in place of D_i: the preprocess subtracts it.

Rung 2's two kernels split the work by what each program owns (rung 3 merges them: see there). dK and dV rows belong to keys: a program holds
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
from triton.tools.tensor_descriptor import TensorDescriptor

from kernels.triton.attention import TILES as FORWARD_TILES, flash_kernel, key_passes, launch_flash
from ladder.runtime import validate
from ladder.runtime.direct_launch import DirectLaunches
from ladder.runtime.hardware import detect
from ladder.runtime.world import WORLD, device

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
    if rung in ("2_flash", "3_atomic_dq", "4_autotuned"):   # rungs 3 and 4 take what rung 2 takes
        return 2 * B * H * S * D + 4 * B * H * S
    raise ValueError(f"no rung {rung!r}: the backward has 1_materialized, 2_flash, 3_atomic_dq and 4_autotuned")


# ------------------------------------------------------------- rung 2: the preprocess, Δ = rowsum(dO ∘ O)

@triton.jit
def delta_kernel(o_ptr, do_ptr, dlse_ptr, delta_ptr, S, H,
                 stride_ob, stride_oh, stride_os, stride_od, stride_dob, stride_doh, stride_dos, stride_dod,
                 HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr):
    """Δ for queries BLOCK_M·program_id(0).. of head program_id(1) = b·H + h, in delta's dtype (the sums'),
    (B, H, S) contiguous; minus dLSE (same layout) when the log-sum-exp has a gradient (dlse_ptr not None)."""
    start_m, bh = tl.program_id(0) * BLOCK_M, tl.program_id(1)
    b, h = (bh // H).to(tl.int64), (bh % H).to(tl.int64)
    rows = start_m + tl.arange(0, BLOCK_M)
    dims = tl.arange(0, HEAD_DIM)
    o = tl.load(o_ptr + b * stride_ob + h * stride_oh + rows[:, None] * stride_os + dims[None, :] * stride_od,
                mask=rows[:, None] < S, other=0.0)
    do = tl.load(do_ptr + b * stride_dob + h * stride_doh + rows[:, None] * stride_dos + dims[None, :] * stride_dod,
                 mask=rows[:, None] < S, other=0.0)
    store_delta(o, do, dlse_ptr, delta_ptr, rows, bh, S)


@triton.jit
def store_delta(o, do, dlse_ptr, delta_ptr, rows, bh, S):
    """Δ of the queries `rows` of head bh (O, dO: their tiles), minus their dLSE where dlse_ptr is not None, in
    delta's dtype: stored at their places in delta ((B, H, S) contiguous, as dLSE) and returned."""
    acc = delta_ptr.dtype.element_ty
    delta = tl.sum(o.to(acc) * do.to(acc), axis=1)
    if dlse_ptr is not None:
        delta -= tl.load(dlse_ptr + bh.to(tl.int64) * S + rows, mask=rows < S, other=0.0).to(acc)
    tl.store(delta_ptr + bh.to(tl.int64) * S + rows, delta, mask=rows < S)
    return delta


# ------------------------------------------------------------- rungs 2-4: dK and dV, a program per K/V tile (rung 3: dQ too)

@triton.jit
def dkdv_steps(dk, dv, k, v, keys, q_ptr, do_ptr, lse_ptr, delta_ptr, dq_ptr, b, h, stride_qs, stride_qd,
               stride_dos, stride_dod, S, scale, qk_scale, lo, hi, HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr,
               MASKED: tl.constexpr, CAUSAL: tl.constexpr, ATOMIC_DQ: tl.constexpr, QDO_BY_TMA: tl.constexpr,
               DQ_BY_TMA: tl.constexpr):
    """Queries lo..hi (BLOCK_M at a time) into the dK and dV of the keys `keys` (K, V: their tiles). The tiles
    are transposed, Pᵀ and dPᵀ (keys down, queries across), so that each step's products land on rows of this
    program's keys. MASKED: steps that may hold queries past S or (causal) before a key. ATOMIC_DQ (rung 3): each
    step also adds this program's share of dQ, scale·dS·K, into dq_ptr (the head's fp32 (S, D) rows), where the
    head's other K/V programs add theirs; DQ_BY_TMA: dq_ptr is a tensor descriptor of all the sums, (B, H, S, D)
    in boxes of BLOCK_M rows, and the TMA adds each step's tile in one bulk reduction. QDO_BY_TMA: q_ptr and
    do_ptr are tensor descriptors of Q and dO (same boxes), and the TMA brings each step's two tiles (rows past S
    as zeros); else they point at the head's rows."""
    dims = tl.arange(0, HEAD_DIM)
    for start_m in range(lo, hi, BLOCK_M):
        rows = start_m + tl.arange(0, BLOCK_M)
        if QDO_BY_TMA:
            q = q_ptr.load([b, h, start_m, 0]).reshape(BLOCK_M, HEAD_DIM)
            do = do_ptr.load([b, h, start_m, 0]).reshape(BLOCK_M, HEAD_DIM)
        elif MASKED:
            q = tl.load(q_ptr + rows[:, None] * stride_qs + dims[None, :] * stride_qd, mask=rows[:, None] < S,
                        other=0.0)
            do = tl.load(do_ptr + rows[:, None] * stride_dos + dims[None, :] * stride_dod, mask=rows[:, None] < S,
                         other=0.0)
        else:
            q = tl.load(q_ptr + rows[:, None] * stride_qs + dims[None, :] * stride_qd)
            do = tl.load(do_ptr + rows[:, None] * stride_dos + dims[None, :] * stride_dod)
        if MASKED:
            lse2 = tl.load(lse_ptr + rows, mask=rows < S, other=0.0) * LOG2E
            delta = tl.load(delta_ptr + rows, mask=rows < S, other=0.0)
        else:
            lse2 = tl.load(lse_ptr + rows) * LOG2E
            delta = tl.load(delta_ptr + rows)
        # Pᵀ from the forward's log-sum-exp (here in base 2, as the scale): the softmax without its max or sum.
        # Both score products first, then the exponentials: the tensor cores may run dPᵀ's product while the
        # threads exponentiate
        st = tl.dot(k, tl.trans(q))                            # Sᵀ = K·Qᵀ
        dpt = tl.dot(v, tl.trans(do))                          # dPᵀ = V·dOᵀ
        pt = tl.exp2(st * qk_scale - lse2[None, :])
        if MASKED:  # a score the forward masked has P = 0; where, not a multiply: exp2 may overflow to inf there
            keep = rows[None, :] < S
            if CAUSAL:
                keep = keep & (keys[:, None] <= rows[None, :])
            pt = tl.where(keep, pt, 0.0)
        dv = tl.dot(pt.to(do.dtype), do, dv, out_dtype=dv.dtype)  # dV += Pᵀ·dO, P rounded to the inputs' type
        dst = (pt * (dpt - delta[None, :])).to(q.dtype)       # dSᵀ = Pᵀ ∘ (dPᵀ − Δ), rounded as P is
        # dK += dSᵀ·Q (the scale comes once, at the end); out_dtype: the accumulator's, said explicitly
        dk = tl.dot(dst, q, dk, out_dtype=dk.dtype)
        if ATOMIC_DQ:  # dQ's rows belong to no K/V program: S / BLOCK_N of them add into each, in any order
            dq = tl.dot(tl.trans(dst), k, out_dtype=dk.dtype) * scale     # scaled here: the sum is then final
            if DQ_BY_TMA:
                dq_ptr.atomic_add([b, h, start_m, 0], dq.reshape(1, 1, BLOCK_M, HEAD_DIM))
            else:  # an atomic per element; relaxed: a sum, no ordering with other memory
                dq_ptrs = dq_ptr + rows[:, None] * HEAD_DIM + dims[None, :]
                tl.atomic_add(dq_ptrs, dq, mask=(rows[:, None] < S) if MASKED else None, sem="relaxed")
    return dk, dv


@triton.jit
def dkdv_kernel(q_ptr, k_ptr, v_ptr, do_ptr, lse_ptr, delta_ptr, dk_ptr, dv_ptr, dq_ptr, S, H, scale,
                stride_qb, stride_qh, stride_qs, stride_qd, stride_kb, stride_kh, stride_ks, stride_kd,
                stride_vb, stride_vh, stride_vs, stride_vd, stride_dob, stride_doh, stride_dos, stride_dod,
                stride_dkb, stride_dkh, stride_dks, stride_dkd, stride_dvb, stride_dvh, stride_dvs, stride_dvd,
                HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr,
                ATOMIC_DQ: tl.constexpr, QDO_BY_TMA: tl.constexpr = False, DQ_BY_TMA: tl.constexpr = False):
    """dK and dV of keys BLOCK_N·program_id(0).. of head program_id(1) = b·H + h. The log-sum-exp and Δ are
    (B, H, S) contiguous, in the sums' dtype (fp32; float64 for float64 inputs). Causal: BLOCK_N is a multiple
    of BLOCK_M, so that the diagonal is whole query steps. ATOMIC_DQ (rung 3): dQ too, added into dq_ptr,
    (B, H, S, D) contiguous in the sums' dtype and zeroed (rung 2 passes None). QDO_BY_TMA: q_ptr and do_ptr
    are tensor descriptors of Q and dO; DQ_BY_TMA: dq_ptr is one of the sums (dkdv_steps)."""
    start_n, bh = tl.program_id(0) * BLOCK_N, tl.program_id(1)
    b32, h32 = bh // H, bh % H   # a descriptor's coordinates (32-bit)
    b, h = b32.to(tl.int64), h32.to(tl.int64)
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
    if QDO_BY_TMA:
        q_head, do_head = q_ptr, do_ptr
    else:
        q_head, do_head = q_ptr + b * stride_qb + h * stride_qh, do_ptr + b * stride_dob + h * stride_doh
    lse_head, delta_head = lse_ptr + bh.to(tl.int64) * S, delta_ptr + bh.to(tl.int64) * S
    dq_head = dq_ptr  # rung 2: None; rung 3 with DQ_BY_TMA: a tensor descriptor of all of the sums
    if ATOMIC_DQ and not DQ_BY_TMA:
        dq_head += bh.to(tl.int64) * S * HEAD_DIM
    qk_scale = scale * LOG2E
    # Causal: queries before start_n see none of these keys and are skipped; queries start_n..start_n + BLOCK_N
    # see some of them (the diagonal, masked); the queries after see all of them. Then, causal or not: the
    # query steps wholly inside S without compares, S's ragged last step with them.
    if CAUSAL:
        dk, dv = dkdv_steps(dk, dv, k, v, keys, q_head, do_head, lse_head, delta_head, dq_head, b32, h32,
                            stride_qs, stride_qd, stride_dos, stride_dod, S, scale, qk_scale, start_n,
                            tl.minimum(S, start_n + BLOCK_N), HEAD_DIM, BLOCK_M, True, CAUSAL, ATOMIC_DQ,
                            QDO_BY_TMA, DQ_BY_TMA)
        lo = start_n + BLOCK_N
    else:
        lo = 0
    whole = (S // BLOCK_M) * BLOCK_M
    dk, dv = dkdv_steps(dk, dv, k, v, keys, q_head, do_head, lse_head, delta_head, dq_head, b32, h32, stride_qs,
                        stride_qd, stride_dos, stride_dod, S, scale, qk_scale, lo, whole, HEAD_DIM, BLOCK_M, False,
                        CAUSAL, ATOMIC_DQ, QDO_BY_TMA, DQ_BY_TMA)
    dk, dv = dkdv_steps(dk, dv, k, v, keys, q_head, do_head, lse_head, delta_head, dq_head, b32, h32, stride_qs,
                        stride_qd, stride_dos, stride_dod, S, scale, qk_scale, tl.maximum(lo, whole), S, HEAD_DIM,
                        BLOCK_M, True, CAUSAL, ATOMIC_DQ, QDO_BY_TMA, DQ_BY_TMA)
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
    and Δ: their tiles). The same P and dS as dkdv_steps, untransposed. MASKED: steps that may hold keys past S
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
        s = tl.dot(q, kt)
        dp = tl.dot(do, vt)                                    # dP = dO·Vᵀ, before the exponentials (as above)
        p = tl.exp2(s * qk_scale - lse2[:, None])
        if MASKED:
            keep = keys[None, :] < S
            if CAUSAL:
                keep = keep & (keys[None, :] <= rows[:, None])
            p = tl.where(keep, p, 0.0)
        ds = p * (dp - delta[:, None])                         # dS = P ∘ (dP − Δ)
        dq = tl.dot(ds.to(kt.dtype), tl.trans(kt), dq, out_dtype=dq.dtype)  # dQ += dS·K
    return dq


@triton.jit
def dq_kernel(q_ptr, k_ptr, v_ptr, do_ptr, lse_ptr, delta_ptr, dq_ptr, o_ptr, dlse_ptr, S, H, scale,
              stride_qb, stride_qh, stride_qs, stride_qd, stride_kb, stride_kh, stride_ks, stride_kd,
              stride_vb, stride_vh, stride_vs, stride_vd, stride_dob, stride_doh, stride_dos, stride_dod,
              stride_dqb, stride_dqh, stride_dqs, stride_dqd, stride_ob, stride_oh, stride_os, stride_od,
              HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr):
    """dQ of queries BLOCK_M·program_id(0).. of head program_id(1) = b·H + h. Causal: BLOCK_M is a multiple of
    BLOCK_N, as in the forward. Δ is read from delta_ptr; or, where o_ptr is given (rung 4), computed here from
    the program's own rows of O and dO (minus dLSE, where dlse_ptr is given) and stored there for the K/V kernel,
    launched after this one: no preprocess."""
    start_m, bh = tl.program_id(0) * BLOCK_M, tl.program_id(1)
    b, h = (bh // H).to(tl.int64), (bh % H).to(tl.int64)
    acc = delta_ptr.dtype.element_ty
    scale = tl.cast(scale, acc)
    rows = start_m + tl.arange(0, BLOCK_M)
    dims = tl.arange(0, HEAD_DIM)
    # queries past S load as zeros (and a log-sum-exp and Δ of 0): finite, their rows of dQ never stored
    q = tl.load(q_ptr + b * stride_qb + h * stride_qh + rows[:, None] * stride_qs + dims[None, :] * stride_qd,
                mask=rows[:, None] < S, other=0.0)
    do = tl.load(do_ptr + b * stride_dob + h * stride_doh + rows[:, None] * stride_dos + dims[None, :] * stride_dod,
                 mask=rows[:, None] < S, other=0.0)
    lse2 = tl.load(lse_ptr + bh.to(tl.int64) * S + rows, mask=rows < S, other=0.0) * LOG2E
    if o_ptr is not None:
        o = tl.load(o_ptr + b * stride_ob + h * stride_oh + rows[:, None] * stride_os + dims[None, :] * stride_od,
                    mask=rows[:, None] < S, other=0.0)
        delta = store_delta(o, do, dlse_ptr, delta_ptr, rows, bh, S)
    else:
        delta = tl.load(delta_ptr + bh.to(tl.int64) * S + rows, mask=rows < S, other=0.0)
    dq = tl.zeros((BLOCK_M, HEAD_DIM), acc)
    unmasked_end, end = key_passes(start_m, S, BLOCK_M, BLOCK_N, CAUSAL)   # the forward's two passes over the keys
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
# would hold twice the accumulators); rung 4 searches them.
GPU_TILES = {
    64: dict(delta=dict(BLOCK_M=64, num_warps=4),
             dkdv=dict(BLOCK_M=32, BLOCK_N=128, num_warps=4, num_stages=3),
             dq=dict(BLOCK_M=128, BLOCK_N=32, num_warps=4, num_stages=3),
             # rung 3: its step's dQ tile (BLOCK_M x D fp32) on top of dK and dV. With dQ added by the TMA's
             # bulk reductions, the fastest of nine tiles timed on the H100 at B4 H32, S 4096 and 16384, causal
             # and not: 0.86-0.91x cuDNN's backward, where the element atomics in their best tile (64 x 128, 8
             # warps) ran 0.76-0.80x. No spills (sm_90 SASS)
             dkdv_atomic=dict(BLOCK_M=64, BLOCK_N=64, num_warps=4, num_stages=3, DQ_BY_TMA=True)),
    128: dict(delta=dict(BLOCK_M=64, num_warps=4),
              dkdv=dict(BLOCK_M=32, BLOCK_N=64, num_warps=4, num_stages=2),
              dq=dict(BLOCK_M=64, BLOCK_N=32, num_warps=4, num_stages=2),
              # rung 3 at D 128: the fastest of six tiles timed on the H100 (B4 H32 S4096, Q and dO by pointer
              # loads), though it spills (how much depends on Triton's version, and grows several times with the
              # TMA's loads of Q and dO); the 32 x 64 tile that does not ran 2.2-2.4x slower. dQ by element
              # atomics: the bulk reductions ran 0.61-0.65x cuDNN's backward against their 0.77x (S 4096 and
              # 16384, causal)
              dkdv_atomic=dict(BLOCK_M=64, BLOCK_N=128, num_warps=8, num_stages=2)),
}
# tl.dot's smallest tiles, the step half the tile: every pass (unmasked, diagonal, ragged) runs at small S
INTERPRETER_TILES = {d: dict(delta=dict(BLOCK_M=16, num_warps=4),
                             dkdv=dict(BLOCK_M=16, BLOCK_N=32, num_warps=4, num_stages=1),
                             dq=dict(BLOCK_M=32, BLOCK_N=16, num_warps=4, num_stages=1),
                             dkdv_atomic=dict(BLOCK_M=16, BLOCK_N=32, num_warps=4, num_stages=1)) for d in (64, 128)}
TILES = GPU_TILES if WORLD.gpu else INTERPRETER_TILES
# float64 operands (gradcheck's) on a GPU: the tiles asked for are fp16's, fixed or searched, and at 8 bytes an
# element some outgrow shared memory (H100, D64 without the mask: rungs 3 and 4 stopped with OutOfResources,
# 237,568 bytes asked for, 232,448 there). These ran gradcheck on the H100 at D64 (tests/gpu): rung 2's own, and
# the interpreter's for rung 3
FLOAT64_TILES = ({d: dict(dkdv=GPU_TILES[d]["dkdv"], dq=GPU_TILES[d]["dq"], dkdv_atomic=INTERPRETER_TILES[d]["dkdv_atomic"])
                  for d in GPU_TILES} if WORLD.gpu else INTERPRETER_TILES)
DTYPES = (torch.float16, torch.bfloat16, torch.float64)   # bf16 on a GPU only: the interpreter's bf16 dots are wrong


def strides(*tensors: torch.Tensor) -> tuple:
    """The kernels' stride arguments: each (B, H, S, D) tensor's four strides, in turn."""
    return tuple(n for t in tensors for n in t.stride())


_DIRECT = DirectLaunches()


def _launch(kernel, grid: tuple, args: tuple, config: dict, **constexprs) -> None:
    """kernel[grid](*args) with config's tiles, warps and stages. On a GPU ladder.ops runs this launcher as a
    triton_op (ladder::attention_backward): traced (validate.traced), the launch goes through wrap_triton, the
    only way torch.compile sees it. Eagerly on a GPU the compiled kernel's own launcher runs it after the first
    launch of each specialization (ladder.runtime.direct_launch: Triton's binding costs tens of µs a launch); an
    eager launch through wrap_triton would keep its non-tensor arguments in torch's kernel side table, an entry per
    launch for the life of the process (128 MiB a call with a tensor descriptor among them)."""
    if validate.traced(*args):
        wrap_triton(kernel)[grid](*args, **config, **constexprs)
    elif WORLD.gpu:
        _DIRECT(kernel, grid, args, {**config, **constexprs})
    else:
        kernel[grid](*args, **config, **constexprs)


def launches_directly(*tensors) -> bool:
    """Whether _launch runs kernels on these operands through the compiled launchers (eager, on a GPU), whose
    launches DirectLaunches can record for a Replay (recording())."""
    return WORLD.gpu and not validate.traced(*tensors)


def recording():
    """The launches _launch makes inside (`with recording() as log:`), as ladder.runtime.direct_launch.Replay
    takes them."""
    return _DIRECT.recording()


def prepare(q, k, v, o, lse, do, causal, scale, dlse, out, tiles: dict | None, delta=None,
            preprocess: bool = True) -> tuple:
    """What every rung from 2 on does first: check the operands, make (or take) dQ, dK, dV and Δ's buffer, and
    launch the preprocess, Δ = rowsum(dO ∘ O) − dLSE (not where `preprocess` is False: rung 4's Q kernel computes
    Δ). Returns (dq, dk, dv, delta, scale, tiles), delta None if q is empty."""
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
    scale = 1 / math.sqrt(D) if scale is None else float(scale)
    tiles = TILES[D] if tiles is None else tiles
    if not q.numel():
        return dq, dk, dv, None, scale, tiles
    delta = torch.empty((B, H, S), dtype=acc, device=q.device) if delta is None else delta
    if preprocess:
        _launch(delta_kernel, (triton.cdiv(S, tiles["delta"]["BLOCK_M"]), B * H),
                (o, do, dlse_as_read(dlse, acc), delta, S, H, *strides(o, do), D), tiles["delta"])
    return dq, dk, dv, delta, scale, tiles


def dlse_as_read(dlse, acc: torch.dtype):
    """dLSE as the kernels read it: autograd may hand an expanded or strided gradient, B·H·S numbers, copied if so."""
    return None if dlse is None else dlse.to(acc).contiguous()


def qdo_by_tma(q: torch.Tensor, do: torch.Tensor) -> bool:
    """Whether the K/V kernel has the TMA bring its Q and dO tiles: an eager launch (a traced one, under
    torch.compile, keeps the pointer loads) on a GPU with the TMA (sm_90 on, as KERNEL_LADDER_EMULATE answers),
    fp16 or bf16 operands whose rows' elements are adjacent, other strides and base 16-byte aligned (what a
    tensor map takes)."""
    if validate.traced(q, do) or not q.is_cuda or q.dtype == torch.float64:
        return False
    gpu = detect()
    return gpu is not None and gpu.has("tma") and all(
        t.stride(-1) == 1 and t.data_ptr() % 16 == 0 and all(n * t.element_size() % 16 == 0 for n in t.stride()[:-1])
        for t in (q, do))


# Q and dO through the TMA in big calls only: there it ran the backward up to 3% faster, in GPT-2's and smaller ones
# no faster (kernels/NOTES.md), while a launch with tensor maps goes through Triton's launcher, whose host cost torch's
# launcher saves a small call (ladder.runtime.direct_launch). Rung 3's tiles with DQ_BY_TMA take it in any call.
TMA_LOADS_MIN_FLOP = 1e12   # the backward's FLOPs without the mask, 10·B·H·S²·D: a millisecond or more of kernels


def qdo_tma_pays(q: torch.Tensor) -> bool:
    """Whether the K/V kernel's Q and dO tiles come through the TMA at q's shape, where qdo_by_tma allows it."""
    B, H, S, D = q.shape
    return 10 * B * H * S * S * D >= TMA_LOADS_MIN_FLOP


def _q_do(q, do, config: dict, by_tma: bool) -> tuple:
    """The K/V kernel's q_ptr and do_ptr: the tensors, or their tensor descriptors (boxes of BLOCK_M rows)."""
    if not by_tma:
        return q, do
    box = [1, 1, config["BLOCK_M"], q.shape[-1]]
    return TensorDescriptor.from_tensor(q, box), TensorDescriptor.from_tensor(do, box)


def _fitted(config: dict, q: torch.Tensor, kernel: str) -> dict:
    """`kernel`'s launch configuration for q's dtype: float64 operands (gradcheck's) take FLOAT64_TILES."""
    return FLOAT64_TILES[q.shape[-1]][kernel] if q.dtype == torch.float64 else config


def _dkdv_args(q, k, v, do, lse, delta, dk, dv, dq_sums, scale, config: dict, by_tma=None) -> tuple:
    """dkdv_kernel's grid, arguments, launch configuration and constexprs (all but CAUSAL): a program per BLOCK_N
    keys of each head. dq_sums: rung 3's fp32 dQ (else None), added through the TMA where config asks for it
    (DQ_BY_TMA) and Q and dO come that way. by_tma: Q and dO through the TMA (None: where qdo_by_tma allows it, in
    a big call, qdo_tma_pays, or where the tiles add dQ by it)."""
    B, H, S, D = q.shape
    config = dict(_fitted(config, q, "dkdv" if dq_sums is None else "dkdv_atomic"))
    dq_tma_asked = bool(config.pop("DQ_BY_TMA", False)) and dq_sums is not None
    if by_tma is None:
        by_tma = qdo_by_tma(q, do) and (qdo_tma_pays(q) or dq_tma_asked)
    q_arg, do_arg = _q_do(q, do, config, by_tma)
    dq_by_tma = dq_tma_asked and by_tma
    if dq_by_tma:
        dq_sums = TensorDescriptor.from_tensor(dq_sums, [1, 1, config["BLOCK_M"], D])
    return ((triton.cdiv(S, config["BLOCK_N"]), B * H),
            (q_arg, k, v, do_arg, lse, delta, dk, dv, dq_sums, S, H, scale, *strides(q, k, v, do, dk, dv), D), config,
            dict(ATOMIC_DQ=dq_sums is not None, QDO_BY_TMA=by_tma, DQ_BY_TMA=dq_by_tma))


def _launch_dkdv(q, k, v, do, lse, delta, dk, dv, dq_sums, scale, causal, config, by_tma=None) -> None:
    """dkdv_kernel (_dkdv_args)."""
    grid, args, config, constexprs = _dkdv_args(q, k, v, do, lse, delta, dk, dv, dq_sums, scale, config, by_tma)
    _launch(dkdv_kernel, grid, args, config, CAUSAL=causal, **constexprs)


def _dq_args(q, k, v, do, lse, delta, dq, scale, o=None, dlse=None) -> tuple:
    """dq_kernel's arguments; o (and dlse) given: the kernel computes Δ into delta."""
    B, H, S, D = q.shape
    return (q, k, v, do, lse, delta, dq, o, dlse, S, H, scale, *strides(q, k, v, do, dq),
            *(o.stride() if o is not None else (0, 0, 0, 0)), D)


def _launch_dq(q, k, v, do, lse, delta, dq, scale, causal, config, o=None, dlse=None) -> None:
    """dq_kernel, a program per BLOCK_M queries of each head (_dq_args)."""
    B, H, S, D = q.shape
    config = _fitted(config, q, "dq")
    _launch(dq_kernel, (triton.cdiv(S, config["BLOCK_M"]), B * H),
            _dq_args(q, k, v, do, lse, delta, dq, scale, o, dlse), config, CAUSAL=causal)


def backward(q, k, v, o, lse, do, causal: bool, scale: float | None = None, dlse=None, out=None,
             tiles: dict | None = None, delta=None) -> tuple:
    """Rung 2: (dQ, dK, dV) of attention(q, k, v, causal, scale) = o, whose log-sum-exp (natural log, (B, H, S)
    contiguous, fp32; float64 for float64 inputs) is lse, given dO = do and optionally dLSE = dlse (B, H, S).
    q, k, v, o, do: (B, H, S, D) views of one shape, any strides, all fp16 or all float64; D 64 or 128.
    out: (dq, dk, dv) to write (else new, laid out as q, k, v where they are dense). tiles: TILES[D]'s form
    (rung 4 passes its searched ones). delta: a (B, H, S) buffer for Δ (else new)."""
    dq, dk, dv, delta, scale, tiles = prepare(q, k, v, o, lse, do, causal, scale, dlse, out, tiles, delta)
    if delta is not None:
        _launch_dkdv(q, k, v, do, lse, delta, dk, dv, None, scale, causal, tiles["dkdv"])
        _launch_dq(q, k, v, do, lse, delta, dq, scale, causal, tiles["dq"])
    return dq, dk, dv


# ------------------------------------------------------------- rung 3: one kernel, dQ by atomics

def atomic_dq_backward(q, k, v, o, lse, do, causal: bool, scale: float | None = None, dlse=None,
                       out=None, config: dict | None = None, delta=None, sums=None) -> tuple:
    """Rung 3: rung 2's arguments and results, from one kernel: the K/V programs (rung 2's kernel with its own
    tiles, TILES[D]["dkdv_atomic"], or config: rung 4's searched ones) add dQ into a zeroed fp32 buffer, cast to
    q's dtype at the end. P is computed once, not twice; the price is B·H·S·D fp32 additions from each of
    S / BLOCK_N programs, the buffer's zeroing and cast (4 + 4 + 2 bytes an element), and a dQ whose sums come in a
    different order from run to run (not bit-reproducible). Where the tiles say DQ_BY_TMA and the launch has the
    TMA (qdo_by_tma), each step's dQ tile goes as one bulk reduction, not an atomic per element. delta, sums:
    buffers for Δ and the dQ sums, zeroed (else new)."""
    dq, dk, dv, delta, scale, tiles = prepare(q, k, v, o, lse, do, causal, scale, dlse, out, None, delta)
    if delta is not None:
        _atomic_dq(q, k, v, do, lse, delta, dq, dk, dv, scale, causal, config or tiles["dkdv_atomic"], sums)
    return dq, dk, dv


def _atomic_dq(q, k, v, do, lse, delta, dq, dk, dv, scale, causal, config, sums=None) -> None:
    """Rung 3's kernel with what it needs around it: the zeroed fp32 dQ buffer before (sums, if given zeroed, or
    new), its cast into dq after."""
    sums = torch.zeros(q.shape, dtype=delta.dtype, device=q.device) if sums is None else sums
    _launch_dkdv(q, k, v, do, lse, delta, dk, dv, sums, scale, causal, config)
    dq.copy_(sums)


# ------------------------------------------------------------- rung 4: rungs 2 and 3 in a given configuration

def delta_in_dq_backward(q, k, v, o, lse, do, causal: bool, scale: float | None = None, dlse=None, out=None,
                         tiles: dict | None = None, delta=None) -> tuple:
    """Rung 2's kernels as rung 4 launches them (rung 2's arguments and results): no preprocess; the Q kernel,
    launched first, computes Δ of its own queries from their O and dO tiles (dO it loads anyway) and stores it for
    the K/V kernel. One launch fewer, and dO read once less."""
    dq, dk, dv, delta, scale, tiles = prepare(q, k, v, o, lse, do, causal, scale, dlse, out, tiles, delta,
                                              preprocess=False)
    if delta is not None:
        _launch_dq(q, k, v, do, lse, delta, dq, scale, causal, tiles["dq"], o, dlse_as_read(dlse, delta.dtype))
        _launch_dkdv(q, k, v, do, lse, delta, dk, dv, None, scale, causal, tiles["dkdv"])
    return dq, dk, dv


def search_args(kernel: str, c: dict, q, k, v, do, lse, delta, out, scale: float) -> tuple:
    """The kernel's positional arguments for a search's inputs and configuration c (the K/V kernel: out ends with
    (dK, dV); Q, dO and rung 3's dQ sums, new zeros, as _launch_dkdv passes them), its launch configuration and
    its constexprs besides those."""
    B, H, S, D = q.shape
    if kernel == "dq":
        return _dq_args(q, k, v, do, lse, delta, out, scale), c, {}
    sums = torch.zeros(q.shape, dtype=delta.dtype, device=q.device) if kernel == "dkdv_atomic" else None
    _, args, config, constexprs = _dkdv_args(q, k, v, do, lse, delta, out[-2], out[-1], sums, scale, c)
    return args, config, constexprs


def run_config(kernel: str, c: dict, q, k, v, do, lse, delta, causal: bool, scale: float, out=None):
    """One configuration of rung 4's `kernel` (out: "dkdv" (dK, dV) stacked, "dq" dQ, "dkdv_atomic" (dQ, dK, dV)
    stacked): what the search times."""
    planes = {"dkdv": 2, "dkdv_atomic": 3}
    out = out if out is not None else torch.empty((planes[kernel], *q.shape) if kernel in planes else q.shape,
                                                  dtype=q.dtype, device=q.device)
    if kernel == "dkdv_atomic":
        _atomic_dq(q, k, v, do, lse, delta, *out, scale, causal, c)
        return out
    B, H, S, D = q.shape
    fn, own = (dkdv_kernel, c["BLOCK_N"]) if kernel == "dkdv" else (dq_kernel, c["BLOCK_M"])
    args, config, constexprs = search_args(kernel, c, q, k, v, do, lse, delta, out, scale)
    _launch(fn, (triton.cdiv(S, own), B * H), args, config, CAUSAL=causal, **constexprs)
    return out


# ------------------------------------------------------------- run alone: python -m kernels.triton.attention_backward

def forward(q, k, v, causal: bool) -> tuple:
    """(O, log-sum-exp) of the forward's fused kernel (kernels/triton/attention.py, rung 5's tiles): what rungs 2
    and 3 take, as ladder.ops.attention hands them over."""
    lse = torch.empty(q.shape[:3], dtype=torch.float32, device=q.device)
    return launch_flash(flash_kernel, q, k, v, causal, lse=lse, **FORWARD_TILES["5_pipelined"])[0], lse


def _graph_backward(forward, q, k, v, do, causal: bool):
    """A backward through autograd: the graph of forward(q, k, v, causal) on new leaves, built once; each call of
    the returned function runs its backward again (retain_graph), as an anchor's timing does."""
    leaves = tuple(t.detach().requires_grad_() for t in (q, k, v))
    with torch.enable_grad():
        out = forward(*leaves, causal)
    return lambda: torch.autograd.grad(out, leaves, do, retain_graph=True)


def _sdpa(q, k, v, causal: bool) -> torch.Tensor:
    return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)


# fp16's unit roundoff: the kernels round P and dS to fp16 before their products and each gradient on its store
FP16_EPS = 2.0**-11


def _self_check(shape: tuple[int, int, int, int] = (1, 2, 333, 64),
                timed: tuple[int, int, int, int] = (4, 32, 4096, 64)):
    """Each rung's dQ, dK, dV checked against autograd through the fp32 math on the same fp16 Q, K, V and dO, at a
    ragged `shape` (B, H, S, D), causal and not (on a GPU; in the interpreter on a CPU, at S 67 there), beside SDPA's
    own fp16 backward; then, on a GPU, each timed beside SDPA's backward at `timed`, without a mask. O and the
    log-sum-exp: the forward's fused kernel (rung 5's tiles).
    An error is WRONG past 16 fp16 roundings of the largest gradient, 16·2⁻¹¹·max|reference|: a gradient rounds
    once on its store, and is a sum of up to S products whose P and dS were rounded to fp16 (half a rounding each,
    in fp32 sums); measured 0.7-1.5 of them at S 17-67, SDPA's own about as many, where a tile missed or added twice
    is off by about max|reference|."""
    if not WORLD.gpu:   # a program at a time: at the interpreter's tiles three K/V programs and three Q programs,
        shape = (*shape[:2], 67, shape[3])   # every pass of each (unmasked, diagonal, after it, ragged) runs
    gen = torch.Generator(device()).manual_seed(0)
    q, k, v, do = (torch.randn(*shape, generator=gen, device=device()).half() for _ in range(4))
    rungs = {"1_materialized": lambda q, k, v, causal: _graph_backward(materialized, q, k, v, do, causal)(),
             "2_flash": lambda q, k, v, causal: backward(q, k, v, *forward(q, k, v, causal), do, causal),
             "3_atomic_dq": lambda q, k, v, causal: atomic_dq_backward(q, k, v, *forward(q, k, v, causal), do,
                                                                       causal)}
    exact, theirs = {}, {}
    for causal in (False, True):
        exact[causal] = _graph_backward(materialized, *(t.float() for t in (q, k, v, do)), causal)()
        theirs[causal] = _graph_backward(_sdpa, q, k, v, do, causal)()
    print(f"checked at (B, H, S, D) = {shape} ({'GPU' if WORLD.gpu else 'CPU: the Triton interpreter'}), max |error| "
          "of dQ, dK, dV against autograd through the fp32 math, without a mask / causal (SDPA: PyTorch's own, fp16)")

    def errors(name: str, got: dict, judged: bool = True) -> None:
        line, wrong = [], False
        for g, grad in enumerate(("dQ", "dK", "dV")):
            pair = []
            for causal in (False, True):
                want = exact[causal][g]
                error = (got[causal][g].float() - want).abs().max().item()
                wrong |= not error <= 16 * FP16_EPS * want.abs().max().item()   # NaN is wrong too
                pair.append(f"{error:.1e}")
            line.append(f"{grad} {' / '.join(pair)}")
        print(f"  {name:16s} " + "  ".join(line) + ("   WRONG" if wrong and judged else ""))

    errors("SDPA", theirs, judged=False)
    for name, run in rungs.items():
        errors(name, {causal: run(q, k, v, causal) for causal in (False, True)})
    if not WORLD.gpu:
        print("timing needs a GPU")
        return
    B, H, S, D = timed
    q, k, v, do = (torch.randn(B, H, S, D, device="cuda").half() for _ in range(4))
    o, lse = forward(q, k, v, False)
    timed_runs = {"SDPA": _graph_backward(_sdpa, q, k, v, do, False)}
    # rung 1 holds four B·H·S² fp32 tensors at its backward's peak (kernels/attention_backward.py): where they fit
    if 4 * 4 * B * H * S * S < 0.8 * torch.cuda.mem_get_info()[0]:
        timed_runs["1_materialized"] = _graph_backward(materialized, q, k, v, do, False)
    timed_runs["2_flash"] = lambda: backward(q, k, v, o, lse, do, False)
    timed_runs["3_atomic_dq"] = lambda: atomic_dq_backward(q, k, v, o, lse, do, False)
    print(f"median ms of the backward at (B, H, S, D) = {timed}, without a mask (triton.testing.do_bench), TFLOP/s "
          "(2.5x the forward's)")
    for name, run in timed_runs.items():
        ms = triton.testing.do_bench(run)
        print(f"  {name:16s} {ms:8.3f} ms  {2.5 * 4 * B * H * S * S * D / ms / 1e9:6.1f}")


if __name__ == "__main__":
    _self_check()
