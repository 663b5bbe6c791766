"""Lessons 04a-04c, attention in CUDA C++ and Triton: the score matrix in DRAM (rungs 1-2), a fused sweep over the key
blocks and the causal blocks skipped (rung 3 on), a tensor-core tile (rung 4), the ring of K and V buffers (rung
5) and rung 6's search.
"""
from __future__ import annotations

import re

import numpy as np
from matplotlib.patches import Rectangle

from kernels import attention as at
from kernels.cuda import attention as cuda_attention
from kernels.triton import attention as ta
from kernels.triton.attention import causal_key_range
from ladder.diagrams.matmul import cp_async_ring, mma_shape
from ladder.exercises.a12_mma_fragments import REFERENCE as MMA_FRAGMENTS
from ladder.runtime import cuda
from ladder.diagrams.style import (CUDA, CUDA_CORES, FP16_BYTES, LIGHT, MEMORY, TENSOR_CORES, TRITON, PruneReasons,
                                   _arrow, _bare, _box, _cdiv, _cells, _count, _figure, _fill, _key, _reasons_key,
                                   _rings, _search_panel, _search_report, _shade)


# ------------------------------------------------------------- rungs 1-3: the score matrix, materialized or swept

def attention_scores_in_dram():
    """Attention rungs 1-2: Q·Kᵀ written out as S×S fp32 scores in DRAM, read back by the softmax and P·V,
    drawn to scale against Q, K, V and O (S×D each) at the lesson's first headline shape."""
    B, H, S, D, _ = at.HEADLINE[0]
    fig = _figure(10, 5.6)
    ax = fig.add_axes((0.02, 0.02, 0.96, 0.84))
    gap = 0.08 * S
    s0 = (gap + D, gap + D)
    inputs = {"Q": ((0, s0[1]), D, S), "Kᵀ": ((s0[0], 0), S, D), "V": ((s0[0] + S + gap, s0[1]), D, S),
              "O": ((s0[0] + S + 2 * gap + D, s0[1]), D, S)}
    for name, ((x, y), w, h) in inputs.items():
        _box(ax, x, y, w, h, TRITON, fill=True, lw=0)   # no edge: a 1.5-point edge would widen a D-wide bar by half
        ax.text(x + w / 2 if name != "Kᵀ" else x - 0.01 * S, y - 0.01 * S if name != "Kᵀ" else y + h / 2, name,
                ha="center" if name != "Kᵀ" else "right", va="bottom" if name != "Kᵀ" else "center", fontsize=10,
                fontweight="bold")
    ax.text(s0[0] + S + gap / 2, s0[1] + S / 2, "·", ha="center", va="center", fontsize=16)
    ax.text(s0[0] + S + 1.5 * gap + D, s0[1] + S / 2, "=", ha="center", va="center", fontsize=14)
    _box(ax, *s0, S, S, MEMORY, fill=True, alpha=0.5)
    ax.text(s0[0] + S / 2, s0[1] + S / 2, f"scores S×S, fp32, in DRAM\n{ta.score_matrix_bytes(B, H, S) / 1e9:.1f} GB "
            f"for B·H = {B * H} heads\n\nwritten by Q·Kᵀ,\nread and rewritten by the softmax,\nread by P·V",
            ha="center", va="center", fontsize=11)
    qkv = 4 * B * H * S * D * FP16_BYTES
    _bare(ax, -0.02 * S, s0[0] + S + 2 * gap + 2 * D + 0.02 * S, -0.04 * S, s0[1] + S + 0.01 * S)
    fig.suptitle(f"Attention rungs 1–2 (B{B} H{H} S{S} D{D}, to scale): the S×S matrix holds {S // D}× "
                 f"Q's elements\n({2 * S // D}× its bytes: fp32 against fp16); Q, K, V, O together: "
                 f"{qkv / 1e9:.2f} GB (fp16)", fontsize=11)
    return fig


def attention_grid(ax, S: int, block_m: int, block_n: int, colors: np.ndarray, numbered: bool = False):
    """The S×S score matrix in BLOCK_M×BLOCK_N blocks (queries down, keys across), drawn in elements; `numbered`:
    the query blocks numbered down the left edge."""
    _cells(ax, colors, w=block_n, h=block_m, grid="white", lw=1)
    ax.text(S / 2, -0.02 * S, f"keys, in blocks of BLOCK_N = {block_n}", ha="center", va="bottom", fontsize=9)
    for i in range(_cdiv(S, block_m) if numbered else 0):
        ax.text(-0.015 * S, (i + 0.5) * block_m, str(i + 1), ha="right", va="center", fontsize=9)
    ax.text(-(0.05 if numbered else 0.02) * S, S / 2, f"queries, in blocks of BLOCK_M = {block_m}", ha="right",
            va="center", rotation=90, fontsize=9)


def _tiles(rung: str) -> tuple[int, int]:
    return ta.GPU_TILES[rung]["BLOCK_M"], ta.GPU_TILES[rung]["BLOCK_N"]


def attention_flash_sweep(rung: str = "3_fused", blocks_m: int = 6, step: int = 3):
    """Fused attention (Triton rung `rung`'s BLOCK_M, BLOCK_N): one program's query block sweeps the key blocks
    in order; only the current block of scores exists (on chip), folded into the running max m, sum ℓ and
    acc of its BLOCK_M queries."""
    bm, bn = _tiles(rung)
    S = blocks_m * bm
    row = blocks_m // 2
    colors = _fill((blocks_m, _cdiv(S, bn)))
    colors[row, :step] = _shade(TRITON, 0.35)
    colors[row, step] = TRITON
    fig = _figure(10, 6.2)
    ax = fig.add_axes((0.06, 0.1, 0.9, 0.76))
    attention_grid(ax, S, bm, bn, colors, numbered=True)
    for j in range(_cdiv(S, bn)):
        ax.text(j * bn + bn / 2, row * bm + bm / 2, str(j + 1), ha="center", va="center", fontsize=9,
                color="white" if j == step else "k")
    _box(ax, 0, row * bm, S, bm, "k", lw=1.5)
    state = S + 0.04 * S
    width = 0.05 * S
    for i, (name, w) in enumerate((("m", width), ("ℓ", width), ("acc", 2.5 * width))):
        x = state + sum((width, width)[:i]) + 0.02 * S * i
        _box(ax, x, row * bm, w, bm, _shade(TRITON, 0.6), fill=True)
        ax.text(x + w / 2, row * bm - 0.01 * S, name, ha="center", va="bottom", fontsize=10)
    ax.text(state, row * bm + bm + 0.02 * S, f"on chip, for the block's\nBLOCK_M queries: m and ℓ\n(one each), "
            f"acc (BLOCK_M × D)", va="top", fontsize=9)
    _bare(ax, -0.1 * S, S + 0.3 * S, -0.08 * S, S + 0.02 * S)
    fig.suptitle(f"Fused attention (rung {rung.split('_')[0]}): query block {row + 1} sweeps the key blocks 1, 2, …;"
                 f"\nkey block {step + 1}'s scores are on chip now; no block of scores is ever stored", fontsize=11)
    _key(fig, [("folded into m, ℓ, acc", _shade(TRITON, 0.35)), ("scores on chip now", TRITON),
               ("not reached yet; other rows: other blocks, running at the same time", LIGHT)], y=0.0)
    return fig


PAST_S = "0.75"   # rows and keys past the sequence's end, in a ragged last block


def attention_causal_skip(rung: str = "5_pipelined", S: int | None = None):
    """Causal attention (Triton rung `rung`'s BLOCK_M, BLOCK_N): which key blocks each query block computes
    without a mask, with the mask (on the diagonal), and skips (never loaded)."""
    bm, bn = _tiles(rung)
    S = S or 8 * bm - bn // 2   # a ragged last block, as real sequences have
    rows, cols = _cdiv(S, bm), _cdiv(S, bn)
    colors = _fill((rows, cols), "white")
    done = 0
    for i in range(rows):
        unmasked_end, end = causal_key_range(i * bm, bm, S)
        colors[i, : unmasked_end // bn] = TRITON
        colors[i, unmasked_end // bn: _cdiv(end, bn)] = _shade(TRITON, 0.4)
        done += _cdiv(end, bn)
    fig = _figure(8, 8.2)
    ax = fig.add_axes((0.08, 0.1, 0.88, 0.76))
    attention_grid(ax, cols * bn, bm, bn, colors)
    ax.plot([0, S], [0, S], color="k", lw=0.8, ls="--")
    # a computed block reaching past S: the rows and keys there do not exist, and the kernel masks them too
    past = dict(facecolor=PAST_S, edgecolor="0.35", hatch="///", lw=0, zorder=3)
    for i in range(rows):
        reach = _cdiv(causal_key_range(i * bm, bm, S)[1], bn) * bn
        if reach > S:
            ax.add_patch(Rectangle((S, i * bm), reach - S, min(bm, S - i * bm), **past))
    ax.add_patch(Rectangle((0, S), reach, rows * bm - S, **past))   # the last row block's rows past S
    _box(ax, 0, 0, S, S, "k", lw=1)
    _bare(ax, -0.08 * S, cols * bn + 0.02 * S, -0.06 * S, rows * bm + 0.02 * S)
    fig.suptitle(f"Causal attention in Triton rung {rung.split('_')[0]}'s tiles, S = {S}: {done} of {rows * cols} "
                 f"blocks computed "
                 f"({done / (rows * cols):.0%})\ndashed: the diagonal (a query sees keys up to itself)", fontsize=11)
    _key(fig, [("no mask", TRITON), ("masked (crosses the diagonal)", _shade(TRITON, 0.4)),
               ("skipped: never loaded", "white"), (f"past S = {S}: masked", dict(facecolor=PAST_S, hatch="///"))], y=0.0)
    return fig


# ------------------------------------------------------------- rungs 4-6: tensor cores, the K/V ring, the search

def _flash_constants(backend: str, rung: str) -> tuple[int, int, int]:
    """(BLOCK_M, BLOCK_N, warps) of a tensor-core attention rung: CUDA kernels/cuda/attention.py, Triton GPU_TILES."""
    if backend == "cuda":
        c = cuda_attention.PIPELINED if rung == "5_pipelined" else cuda_attention.TENSOR_CORE
        return c["BLOCK_M"], c["BLOCK_N"], c["WARPS"]
    t = ta.GPU_TILES[rung]
    return t["BLOCK_M"], t["BLOCK_N"], t["num_warps"]


def attention_tensor_core_tile(backend: str = "cuda", head_dim: int = 64):
    """Attention rung 4 (CUDA: kernels/cuda/attention.py TENSOR_CORE and the mma shape of tensor_core.cuh; Triton:
    GPU_TILES["4_tensor_core"]): one block's BLOCK_M queries of Q loaded once; per key block, S = Q·Kᵀ
    (BLOCK_M x BLOCK_N) in the tensor cores' accumulator registers, each warp 16-row slices of it; the online
    softmax updates m, ℓ in registers and P, rounded to fp16, is P·V's operand straight from registers."""
    bm, bn, warps = _flash_constants(backend, "4_tensor_core")
    D = head_dim
    rows = bm // warps
    fm, fn, fk = mma_shape()
    color = CUDA if backend == "cuda" else TRITON
    fig = _figure(12, 6.4)
    ax = fig.add_axes((0.02, 0.1, 0.96, 0.74))
    gap = 0.5 * max(bn, D)
    q0 = (0, D + gap)                        # Q: bm x D
    kt0 = (D + gap, 0)                       # Kᵀ: D x bn
    s0 = (D + gap, D + gap)                  # S: bm x bn
    v0 = (D + 2 * gap + bn, D - bn) if bn <= D else (D + 2 * gap + bn, 0)  # V: bn x D
    o0 = (D + 2 * gap + bn, D + gap)         # O acc: bm x D
    st0 = (o0[0] + D + 0.4 * gap, D + gap)   # m, ℓ
    q_color = MEMORY if backend == "cuda" else color   # CUDA keeps Q in shared memory, as K and V
    strips = _fill((warps, 1), _shade(q_color, 0.3))
    strips[0, 0] = _shade(q_color, 0.6)
    _cells(ax, strips, *q0, D, rows, grid="white", lw=1)
    frag = _fill((bm // fm, bn // fn), _shade(TENSOR_CORES, 0.3))
    frag[: rows // fm, :] = _shade(TENSOR_CORES, 0.6)
    _cells(ax, frag, *s0, fn, fm, grid="white", lw=0.5)
    _cells(ax, _fill((D // 8, bn // 8), _shade(MEMORY, 0.5)), *kt0, 8, 8, grid="white", lw=0.5)
    _cells(ax, _fill((bn // 8, D // 8), _shade(MEMORY, 0.5)), *v0, 8, 8, grid="white", lw=0.5)
    acc = _fill((warps, 1))
    acc[:, 0] = _shade(CUDA_CORES, 0.3)
    acc[0, 0] = _shade(CUDA_CORES, 0.7)
    _cells(ax, acc, *o0, D, rows, grid="white", lw=1)
    state = _fill((warps, 2), _shade(CUDA_CORES, 0.3))
    state[0, :] = CUDA_CORES
    _cells(ax, state, *st0, 0.12 * D, rows, grid="white", lw=1)
    for w in range(warps):
        ax.text(q0[0] + D / 2, q0[1] + w * rows + rows / 2, f"warp {w}", ha="center", va="center", fontsize=8)
    kept = "in shared memory" if backend == "cuda" else "on chip"
    labels = [((q0[0] + D / 2, q0[1] - 0.03 * gap), f"Q {bm}×{D}\nloaded once, kept {kept}", "bottom"),
              ((kt0[0] + bn / 2, kt0[1] - 0.03 * gap), f"Kᵀ {D}×{bn}\nkey block j, then j+1, …", "bottom"),
              ((s0[0] + bn / 2, s0[1] + bm + 0.05 * gap), f"S = Q·Kᵀ {bm}×{bn}\nin accumulators", "top"),
              ((v0[0] + D / 2, v0[1] - 0.03 * gap), f"V {bn}×{D}\nkey block j", "bottom"),
              ((o0[0] + D / 2, o0[1] + bm + 0.05 * gap), f"acc += P·V\n{bm}×{D}, fp32", "top"),
              ((st0[0] + 0.12 * D, st0[1] + bm + 0.05 * gap), "m, ℓ", "top")]
    for (x, y), text, va in labels:
        ax.text(x, y, text, ha="center", va=va, fontsize=9)
    _arrow(ax, (s0[0] + bn + 0.1 * gap, s0[1] + rows / 2), (o0[0] - 0.1 * gap, o0[1] + rows / 2), TENSOR_CORES)
    ax.text(s0[0] + bn + gap / 2, s0[1] + rows + 0.1 * gap, "P (fp16)\nstays in\nregisters", ha="center", va="top",
            fontsize=8)
    _bare(ax, -0.05 * gap, st0[0] + 0.3 * D + 0.1 * gap, -0.6 * gap, D + gap + bm + 0.6 * gap)
    who = "CUDA" if backend == "cuda" else "Triton"
    inst = (f"mma.sync m{fm}n{fn}k{fk}: warp 0's row of S is {rows // fm}×{bn // fn} of them"
            if backend == "cuda" else "tl.dot: mma.sync on sm_80, wgmma on sm_90")
    fig.suptitle(f"{who} attention rung 4 (D = {D}): BLOCK_M = {bm} queries on {warps} warps, {rows} rows each; "
                 f"K and V sweep in blocks of BLOCK_N = {bn}", fontsize=11)
    where = "grey: shared memory; " if backend == "cuda" else ""
    fig.text(0.5, 0.015, f"{where}dark: warp 0's slice of Q and what it holds in registers (its row of S, acc, m "
             f"and ℓ); white lines part the warps.\n{inst}. The scores never leave the registers: the online softmax "
             f"rescales m, ℓ and acc there,\nand P rounded to fp16 is already the A operand of P·V", ha="center",
             fontsize=9)
    return fig


def p_fragment_packing() -> list[tuple[int, int, int]]:
    """flash_mma.cuh's p_fragment, read from the file: per register p[r] of P·V's A operand, (which of the two score
    fragments, kj or kj + 1, and the two accumulator indices it packs into an fp16 pair)."""
    body = re.search(r"p_fragment\(.*?\{(.*?)\n\s*\}", cuda.source("attention/flash_mma.cuh"), re.S).group(1)
    found = re.findall(r"p\[(\d)\] = pack_half2\(s\[mi\]\[kj( \+ 1)?\]\[(\d)\], s\[mi\]\[kj(?: \+ 1)?\]\[(\d)\]\)", body)
    return [(int(bool(next_one)), int(first), int(second)) for _, next_one, first, second in sorted(found)]


def attention_p_fragment(lanes: tuple[int, ...] = (0, 5)):
    """Attention rung 4's p_fragment (kernels/cuda/attention/flash_mma.cuh): two neighbouring 16×8 score fragments,
    mma.sync's fp32 accumulators for keys kj·8 … kj·8 + 15, are lane by lane the 16×16 A operand of P·V. Left, the
    lane holding each score (PTX's accumulator layout); right, the lane holding each element of A where
    p_fragment's packing puts it; `lanes` marked with their registers. Equal grids: no value changes lane."""
    c_layout, a_layout = MMA_FRAGMENTS["C"], MMA_FRAGMENTS["A"]
    fm, fn, fk = mma_shape()
    scores, operand = np.zeros((fm, 2 * fn), int), np.full((fm, fk), -1)
    names_s, names_a = {}, {}
    for lane in range(32):
        group, pair = lane // 4, lane % 4
        for frag in range(2):
            for i in range(4):
                row, col = c_layout(group, pair, i)
                scores[row, frag * fn + col] = lane
                names_s[row, frag * fn + col] = f"c{i}"
        for r, (frag, first, second) in enumerate(p_fragment_packing()):
            for half, i in enumerate((first, second)):   # p[r] holds A's elements 2r (low half) and 2r + 1
                row, col = c_layout(group, pair, i)
                if a_layout(group, pair, 2 * r + half) != (row, frag * fn + col):
                    raise ValueError(f"p_fragment's p[{r}] is not lane {lane}'s part of the A operand")
                operand[row, frag * fn + col] = lane
                names_a[row, frag * fn + col] = f"a{2 * r + half}"
    marks = {lane: color for lane, color in zip(lanes, (TENSOR_CORES, CUDA, TRITON))}
    fig = _figure(12, 5.6)
    gap = 1.0
    for ax, grid, names, x0, title in (
            (fig.add_axes((0.02, 0.12, 0.46, 0.7)), scores, names_s, (0, fn + gap),
             f"two score fragments of S, {fm}×{fn} each: keys kj·8 … +7 | +8 … +15\n(mma.sync accumulators, fp32)"),
            (fig.add_axes((0.52, 0.12, 0.46, 0.7)), operand, names_a, (0, fn),
             f"P·V's A operand, {fm}×{fk}: p[0] … p[3] (fp16 pairs)\nafter p_fragment")):
        for frag, left in enumerate(x0):
            colors = _fill((fm, fn))
            for (row, col), lane in np.ndenumerate(grid[:, frag * fn:(frag + 1) * fn]):
                if lane in marks:
                    colors[row, col] = _shade(marks[lane], 0.7)
            _cells(ax, colors, left, 0, grid="white", lw=1)
            for (row, col), lane in np.ndenumerate(grid[:, frag * fn:(frag + 1) * fn]):
                text = names[row, frag * fn + col] if lane in marks else str(lane)
                ax.text(left + col + 0.5, row + 0.5, text, ha="center", va="center", fontsize=6.5,
                        weight="bold" if lane in marks else "normal")
        _bare(ax, -0.3, x0[1] + fn + 0.3, -0.3, fm + 0.3)
        ax.set_title(title, fontsize=10)
    fig.suptitle("CUDA attention rung 4, p_fragment: each lane's scores are already its part of P·V's A operand",
                 fontsize=12, y=0.98)
    named = " and ".join(map(str, lanes))
    fig.text(0.5, 0.02, f"A number: the lane holding that value. Lanes {named} (coloured) show their registers instead: "
             "c0 … c3, fp32 accumulators; a0 … a7, the fp16 halves of p[0] … p[3].\nSame lane, same place: packing "
             "into fp16 moves no value between lanes.", ha="center", fontsize=9)
    return fig


def attention_kv_ring(tiles: int = 6, triton: bool = False):
    """Attention rung 5 (CUDA: kernels/cuda/attention.py PIPELINED's STAGES, 5_pipelined.cu's loop): the K and V
    blocks in each shared-memory buffer at each step of the key loop, computed on or still in flight; `triton`
    (lesson 04c) adds the ring Triton's compiler builds for its rung 5 (GPU_TILES["5_pipelined"] num_stages)."""
    stages = cuda_attention.PIPELINED["STAGES"]
    bm, bn, _ = _flash_constants("cuda", "5_pipelined")
    fig = _rings([([f"buffer {b}" for b in range(stages)], cp_async_ring(stages, tiles),
                   f"CUDA: STAGES = {stages} K and V buffers, cp.async {_count(stages - 1, 'key block')} ahead; "
                   f"BLOCK_M = {bm} queries, BLOCK_N = {bn} keys a block"),
                  (["buffer 0"], [{"buffer 0": (t // 2, "math" if t % 2 else "copy")} for t in range(tiles)],
                   "rung 4 (and rung 5 on sm_75, which has no cp.async): one buffer; the math waits while each "
                   "block loads")],
                 f"Attention rung 5: the K and V blocks each buffer holds at each step of the key loop\n(kv2: the 3rd "
                 f"block of keys; the top row's t=0 follows kv0's copy, made before the loop; a copy drawn as long as the math,\nthe most "
                 f"the overlap can save)",
                 prefix="kv",
                 math="the math runs on it (tensor cores" + ("; Triton on sm_75: CUDA cores)" if triton else ")"))
    if triton:
        t = ta.GPU_TILES["5_pipelined"]
        n = t["num_stages"]
        fig.text(0.5, 0.07, f"Triton rung 5, num_stages = {n} (BLOCK_M = {t['BLOCK_M']}, BLOCK_N = {t['BLOCK_N']}): "
                 f"the compiler builds such a ring itself,\n{n} K and {n} V buffers on sm_90", ha="center", fontsize=9)
        fig.tight_layout(rect=(0, 0.12, 1, 1))
    return fig


def attention_search(backend: str = "triton", causal: int = 0):
    """Attention rung 6 (kernels/attention.py's SEARCH_SPACE for CUDA, TRITON_SEARCH_SPACE for Triton, and the
    recorded search at the headline shapes): every configuration, pruned (why) or timed (its time against the
    best), the winner starred, for D = 64 and D = 128: the best tile depends on D."""
    space = at.SEARCH_SPACE if backend == "cuda" else at.TRITON_SEARCH_SPACE
    names = list(space)
    shapes = [s for s in at.HEADLINE if s[4] == causal]
    fig = _figure(12, 1.8 + 0.5 * len(space[names[0]]) * len(space[names[1]]))
    axes = fig.subplots(1, len(shapes), squeeze=False)[0]
    reasons = PruneReasons()
    for ax, shape in zip(axes, shapes):
        report = _search_report(f"{backend}:6_autotuned", shape)
        _search_panel(ax, report, space, names[:2], names[2:], CUDA if backend == "cuda" else TRITON, reasons)
        best = (" ".join(f"{k}={v}" for k, v in report.best.items()) if report else "no recorded search")
        ax.set_title(f"D = {shape[3]}{', causal' if causal else ''}: ★ {best}", fontsize=9)
    fig.suptitle(f"{'CUDA' if backend == 'cuda' else 'Triton'} attention rung 6: the search at "
                 f"B{shapes[0][0]} H{shapes[0][1]} S{shapes[0][2]} (recorded); % = the best time / this one's",
                 fontsize=11)
    _reasons_key(fig, reasons)
    return fig
