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

from ladder.runtime import validate
from ladder.runtime.world import device


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


# ------------------------------------------------------------- assignment 05: the online softmax

# Assignment 05's kernel: fused attention whose online-softmax update is the student's.
#
# O = softmax(Q·Kᵀ/√D)·V for Q, K, V fp16 (B, H, S, D), D a power of two >= 16; one program per
# BLOCK_M queries of one head walks the keys in BLOCK_N blocks, as flash_kernel (kernels/triton/
# attention.py, rung 3) does, but the update of the softmax statistics is a @triton.jit function passed
# in as a constexpr:
#
#     update(m, l, acc, s, v) -> (m, l, acc)
#
# m [BLOCK_M] is the running max of the scores, l [BLOCK_M] the sum of exp2(score - m) so far, acc
# [BLOCK_M, D] the unnormalized output so far (fp32, starting at -inf, 0, 0); s [BLOCK_M, BLOCK_N] is
# this block's scores in base 2 (Q·Kᵀ · log2(e)/√D, fp32), -inf where a key is masked; v [BLOCK_N, D]
# this block's values in fp32. The kernel divides acc by l once, at the end.
#
# Keys are masked past S, after the query when causal, and outside a sliding window of WINDOW keys
# (query i sees key j when i - WINDOW < j, as in sliding-window attention). The loop stops at the
# diagonal when causal but, unlike a real kernel, does not start at the window: the key blocks wholly
# before it come through as all -inf, so the update must survive a block with no key at all.


@triton.jit
def online_attention_kernel(q_ptr, k_ptr, v_ptr, o_ptr, S, qk_scale, WINDOW, update: tl.constexpr,
                            HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                            CAUSAL: tl.constexpr):
    start_m, bh = tl.program_id(0) * BLOCK_M, tl.program_id(1)
    head = bh.to(tl.int64) * S * HEAD_DIM
    rows = start_m + tl.arange(0, BLOCK_M)
    # rows past S (a ragged last block) compute copies of row S - 1, whose keys exist; their store is masked
    rows = tl.minimum(rows, S - 1)
    dims = tl.arange(0, HEAD_DIM)
    q = tl.load(q_ptr + head + rows[:, None] * HEAD_DIM + dims[None, :]).to(tl.float32)
    m = tl.full((BLOCK_M,), float("-inf"), tl.float32)
    l = tl.zeros((BLOCK_M,), tl.float32)
    acc = tl.zeros((BLOCK_M, HEAD_DIM), tl.float32)
    end = tl.minimum(S, start_m + BLOCK_M) if CAUSAL else S   # causal: no key after the last query
    for start_n in range(0, end, BLOCK_N):
        keys = start_n + tl.arange(0, BLOCK_N)
        kt = tl.load(k_ptr + head + keys[None, :] * HEAD_DIM + dims[:, None], mask=keys[None, :] < S, other=0.0)
        v = tl.load(v_ptr + head + keys[:, None] * HEAD_DIM + dims[None, :], mask=keys[:, None] < S, other=0.0)
        s = tl.dot(q, kt.to(tl.float32), input_precision="ieee") * qk_scale
        keep = (keys[None, :] < S) & (rows[:, None] - keys[None, :] < WINDOW)
        if CAUSAL:
            keep = keep & (keys[None, :] <= rows[:, None])
        s = tl.where(keep, s, float("-inf"))
        m, l, acc = update(m, l, acc, s, v.to(tl.float32))   # the student's function, inlined
    o = acc / l[:, None]
    out_rows = start_m + tl.arange(0, BLOCK_M)
    tl.store(o_ptr + head + out_rows[:, None] * HEAD_DIM + dims[None, :], o.to(tl.float16),
             mask=out_rows[:, None] < S)


@triton.jit
def online_update_probe_kernel(m_ptr, l_ptr, acc_ptr, s_ptr, v_ptr, update: tl.constexpr,
                               BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr):
    """For the checker: one call of `update` on given fp32 tiles, the new m, l, acc stored in place."""
    i = tl.arange(0, BLOCK_M)
    j = tl.arange(0, BLOCK_N)
    d = tl.arange(0, HEAD_DIM)
    m = tl.load(m_ptr + i)
    l = tl.load(l_ptr + i)
    acc = tl.load(acc_ptr + i[:, None] * HEAD_DIM + d[None, :])
    s = tl.load(s_ptr + i[:, None] * BLOCK_N + j[None, :])
    v = tl.load(v_ptr + j[:, None] * HEAD_DIM + d[None, :])
    m, l, acc = update(m, l, acc, s, v)
    tl.store(m_ptr + i, m)
    tl.store(l_ptr + i, l)
    tl.store(acc_ptr + i[:, None] * HEAD_DIM + d[None, :], acc)


LOG2E = 1.4426950408889634  # exp(x) = exp2(x · log2 e): folded into the scale of the scores


def online_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, update_fn, causal: bool = False,
                     window: int | None = None, out: torch.Tensor | None = None, block=(16, 16)) -> torch.Tensor:
    """Attention with online_attention_kernel, its softmax update from `update_fn` (a @triton.jit function).
    `window`: query i sees keys j > i - window (None: every key, or every earlier key when causal)."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        validate.tensor(name, t, dtype=torch.float16, ndim=4, device=device())
    validate.same_shape(q=q, k=k, v=v)
    B, H, S, D = q.shape
    if D < 16 or D & (D - 1):
        raise ValueError(f"head dimension D={D}: this kernel takes a power of two >= 16")
    if window is not None and window < 1:
        raise ValueError(f"window={window}: a query must see at least itself (window >= 1)")
    out = torch.empty_like(q) if out is None else out
    validate.tensor("out", out, dtype=torch.float16, ndim=4, device=device())
    validate.same_shape(q=q, out=out)
    if out.numel():
        grid = (triton.cdiv(S, block[0]), B * H)
        online_attention_kernel[grid](q, k, v, out, S, LOG2E / D ** 0.5, 2 ** 30 if window is None else window,
                                      update_fn, D, block[0], block[1], causal)
    return out


def online_update_step(update_fn, m: torch.Tensor, l: torch.Tensor, acc: torch.Tensor, s: torch.Tensor,
                       v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """One call of `update_fn` on fp32 tiles m [BM], l [BM], acc [BM, D], s [BM, BN], v [BN, D]:
    the new (m, l, acc), as new tensors (the inputs are left as they are)."""
    m, l, acc = (t.to(device=device(), dtype=torch.float32).contiguous().clone() for t in (m, l, acc))
    s, v = (t.to(device=device(), dtype=torch.float32).contiguous() for t in (s, v))
    (BM, BN), D = s.shape, v.shape[1]
    if m.shape != (BM,) or l.shape != (BM,) or acc.shape != (BM, D) or v.shape[0] != BN:
        raise ValueError(f"tiles do not agree: m {tuple(m.shape)}, l {tuple(l.shape)}, acc {tuple(acc.shape)}, "
                         f"s {tuple(s.shape)}, v {tuple(v.shape)}")
    online_update_probe_kernel[(1,)](m, l, acc, s, v, update_fn, BM, BN, D)
    return m, l, acc


# ------------------------------------------------------------- assignment 15: attention backward, D and dS

# Assignment 15's kernels: a small FlashAttention-2-style backward whose two formulas are the student's.
#
# For O = softmax(scale·Q·Kᵀ)·V (masked above the diagonal when causal) and the loss's gradient dO, all
# fp32 (B, H, S, D) contiguous, D a power of two >= 16: a preprocess computes one number per query,
#
#     delta(o, do) -> D          o, do [BLOCK_M, HEAD_DIM] (rows of O and dO), D [BLOCK_M]
#
# and both backward kernels (one program per BLOCK_N keys for dK, dV; one per BLOCK_M queries for dQ)
# recompute each tile of the probabilities from the forward's log-sum-exp and form its dS with
#
#     p_and_ds(qk, lse, dp, delta, keep, scale) -> (p, ds)
#
# qk [BLOCK_M, BLOCK_N] is the tile's Q·Kᵀ as it comes out of tl.dot (not scaled), lse [BLOCK_M] each query's
# log Σ_j exp(scale·q·k_j) over the keys it sees (natural log), dp [BLOCK_M, BLOCK_N] the tile's dO·Vᵀ, delta
# [BLOCK_M] the preprocess's D, keep [BLOCK_M, BLOCK_N] True where query i sees key j (inside S, and j <= i
# when causal). The kernels go on with dV += pᵀ·dO, dK += dsᵀ·Q, dQ += ds·K, and multiply dK and dQ by scale
# once at the end. Unlike rung 2 of kernels/triton/attention_backward.py, nothing is skipped under the causal
# mask (every tile comes through; keep says which scores count), exp is base e, and everything is fp32.


@triton.jit
def ds_delta_kernel(o_ptr, do_ptr, delta_ptr, S, delta: tl.constexpr, HEAD_DIM: tl.constexpr,
                    BLOCK_M: tl.constexpr):
    bh = tl.program_id(1)
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    at = bh.to(tl.int64) * S * HEAD_DIM + rows[:, None] * HEAD_DIM + tl.arange(0, HEAD_DIM)[None, :]
    o = tl.load(o_ptr + at, mask=rows[:, None] < S, other=0.0)
    do = tl.load(do_ptr + at, mask=rows[:, None] < S, other=0.0)
    d = delta(o, do)   # the student's function, inlined
    tl.store(delta_ptr + bh.to(tl.int64) * S + rows, d, mask=rows < S)


@triton.jit
def _ds_tile(q, kt, vt, do, lse, dl, rows, keys, S, scale, p_and_ds: tl.constexpr, CAUSAL: tl.constexpr):
    """One tile of P and dS: what both backward kernels share."""
    qk = tl.dot(q, kt, input_precision="ieee")     # [BLOCK_M, BLOCK_N]: Q·Kᵀ, not yet scaled
    dp = tl.dot(do, vt, input_precision="ieee")    # [BLOCK_M, BLOCK_N]: dO·Vᵀ
    keep = (rows[:, None] < S) & (keys[None, :] < S)
    if CAUSAL:
        keep = keep & (keys[None, :] <= rows[:, None])
    return p_and_ds(qk, lse, dp, dl, keep, scale)   # the student's function, inlined


@triton.jit
def ds_dkdv_kernel(q_ptr, k_ptr, v_ptr, do_ptr, lse_ptr, delta_ptr, dk_ptr, dv_ptr, S, scale,
                   p_and_ds: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                   CAUSAL: tl.constexpr):
    bh = tl.program_id(1)
    head, stat = bh.to(tl.int64) * S * HEAD_DIM, bh.to(tl.int64) * S
    keys = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    dims = tl.arange(0, HEAD_DIM)
    kt = tl.load(k_ptr + head + keys[None, :] * HEAD_DIM + dims[:, None], mask=keys[None, :] < S, other=0.0)
    vt = tl.load(v_ptr + head + keys[None, :] * HEAD_DIM + dims[:, None], mask=keys[None, :] < S, other=0.0)
    dk = tl.zeros((BLOCK_N, HEAD_DIM), tl.float32)
    dv = tl.zeros((BLOCK_N, HEAD_DIM), tl.float32)
    for start_m in range(0, S, BLOCK_M):
        rows = start_m + tl.arange(0, BLOCK_M)
        at = head + rows[:, None] * HEAD_DIM + dims[None, :]
        q = tl.load(q_ptr + at, mask=rows[:, None] < S, other=0.0)
        do = tl.load(do_ptr + at, mask=rows[:, None] < S, other=0.0)
        lse = tl.load(lse_ptr + stat + rows, mask=rows < S, other=0.0)
        dl = tl.load(delta_ptr + stat + rows, mask=rows < S, other=0.0)
        p, ds = _ds_tile(q, kt, vt, do, lse, dl, rows, keys, S, scale, p_and_ds, CAUSAL)
        dv += tl.dot(tl.trans(p), do, input_precision="ieee")
        dk += tl.dot(tl.trans(ds), q, input_precision="ieee")
    out = head + keys[:, None] * HEAD_DIM + dims[None, :]
    tl.store(dk_ptr + out, dk * scale, mask=keys[:, None] < S)
    tl.store(dv_ptr + out, dv, mask=keys[:, None] < S)


@triton.jit
def ds_dq_kernel(q_ptr, k_ptr, v_ptr, do_ptr, lse_ptr, delta_ptr, dq_ptr, S, scale,
                 p_and_ds: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                 CAUSAL: tl.constexpr):
    bh = tl.program_id(1)
    head, stat = bh.to(tl.int64) * S * HEAD_DIM, bh.to(tl.int64) * S
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    dims = tl.arange(0, HEAD_DIM)
    at = head + rows[:, None] * HEAD_DIM + dims[None, :]
    q = tl.load(q_ptr + at, mask=rows[:, None] < S, other=0.0)
    do = tl.load(do_ptr + at, mask=rows[:, None] < S, other=0.0)
    lse = tl.load(lse_ptr + stat + rows, mask=rows < S, other=0.0)
    dl = tl.load(delta_ptr + stat + rows, mask=rows < S, other=0.0)
    dq = tl.zeros((BLOCK_M, HEAD_DIM), tl.float32)
    for start_n in range(0, S, BLOCK_N):
        keys = start_n + tl.arange(0, BLOCK_N)
        kt = tl.load(k_ptr + head + keys[None, :] * HEAD_DIM + dims[:, None], mask=keys[None, :] < S, other=0.0)
        vt = tl.load(v_ptr + head + keys[None, :] * HEAD_DIM + dims[:, None], mask=keys[None, :] < S, other=0.0)
        p, ds = _ds_tile(q, kt, vt, do, lse, dl, rows, keys, S, scale, p_and_ds, CAUSAL)
        dq += tl.dot(ds, tl.trans(kt), input_precision="ieee")
    tl.store(dq_ptr + at, dq * scale, mask=rows[:, None] < S)


@triton.jit
def ds_probe_kernel(qk_ptr, lse_ptr, dp_ptr, delta_ptr, keep_ptr, p_ptr, ds_ptr, scale, p_and_ds: tl.constexpr,
                    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """For the checker: one call of `p_and_ds` on given fp32 tiles (keep as int8), p and ds stored."""
    i = tl.arange(0, BLOCK_M)
    tile = i[:, None] * BLOCK_N + tl.arange(0, BLOCK_N)[None, :]
    keep = tl.load(keep_ptr + tile) != 0
    p, ds = p_and_ds(tl.load(qk_ptr + tile), tl.load(lse_ptr + i), tl.load(dp_ptr + tile), tl.load(delta_ptr + i),
                     keep, scale)
    tl.store(p_ptr + tile, p)
    tl.store(ds_ptr + tile, ds)


def attention_ds_backward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, do: torch.Tensor, delta_fn,
                          p_and_ds_fn, causal: bool = False, scale: float | None = None,
                          block=(16, 16)) -> tuple[torch.Tensor, ...]:
    """(D, dQ, dK, dV) of attention with ds_delta_kernel, ds_dkdv_kernel and ds_dq_kernel, their formulas from
    `delta_fn` and `p_and_ds_fn` (@triton.jit functions); fp32 (B, H, S, D) inputs, moved to this world's device.
    The forward (O and the log-sum-exp) is computed here in float64 by torch: it is not the exercise."""
    q, k, v, do = (t.to(device=device(), dtype=torch.float32).contiguous() for t in (q, k, v, do))
    validate.same_shape(q=q, k=k, v=v, do=do)
    B, H, S, D = q.shape
    if D < 16 or D & (D - 1):
        raise ValueError(f"head dimension D={D}: this kernel takes a power of two >= 16")
    scale = 1 / D ** 0.5 if scale is None else scale
    s = q.double() @ k.double().transpose(-1, -2) * scale
    if causal:
        s = s.masked_fill(torch.ones(S, S, dtype=torch.bool, device=s.device).triu(1), float("-inf"))
    lse = torch.logsumexp(s, dim=-1)
    o = (torch.exp(s - lse[..., None]) @ v.double()).float().contiguous()
    lse = lse.float().contiguous()
    delta, dq, dk, dv = (torch.full_like(t, float("nan")) for t in (lse, q, k, v))
    BM, BN = block
    ds_delta_kernel[(triton.cdiv(S, BM), B * H)](o, do, delta, S, delta_fn, D, BM)
    args = (q, k, v, do, lse, delta)
    ds_dkdv_kernel[(triton.cdiv(S, BN), B * H)](*args, dk, dv, S, scale, p_and_ds_fn, D, BM, BN, causal)
    ds_dq_kernel[(triton.cdiv(S, BM), B * H)](*args, dq, S, scale, p_and_ds_fn, D, BM, BN, causal)
    return delta, dq, dk, dv


def p_and_ds_step(p_and_ds_fn, qk: torch.Tensor, lse: torch.Tensor, dp: torch.Tensor, delta: torch.Tensor,
                  keep: torch.Tensor, scale: float) -> tuple[torch.Tensor, torch.Tensor]:
    """One call of `p_and_ds_fn` on tiles qk, dp [BM, BN], lse, delta [BM], keep [BM, BN] (bool): (p, ds)."""
    qk, lse, dp, delta = (t.to(device=device(), dtype=torch.float32).contiguous() for t in (qk, lse, dp, delta))
    keep = keep.to(device=device(), dtype=torch.int8).contiguous()
    BM, BN = qk.shape
    p, ds = (torch.full_like(qk, float("nan")) for _ in range(2))
    ds_probe_kernel[(1,)](qk, lse, dp, delta, keep, p, ds, scale, p_and_ds_fn, BM, BN)
    return p, ds
