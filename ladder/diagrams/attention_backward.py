"""Lesson 04d, attention's backward in Triton: what one program of rung 2's two kernels walks, and rung 3's K/V
programs adding into dQ by atomics.
"""
from __future__ import annotations

import numpy as np

from kernels.triton import attention_backward as tab
from ladder.diagrams.attention import attention_grid
from ladder.diagrams.style import CUDA, LIGHT, TRITON, _arrow, _bare, _box, _cells, _figure, _fill, _key, _shade


def attention_backward_programs(head_dim: int = 64, key_block: int = 1, query_block: int = 2):
    """Rung 2 of the attention backward, causal, with its own tiles (kernels/triton/attention_backward.GPU_TILES):
    left, what one dkdv_kernel program walks (its BLOCK_N keys, the queries in BLOCK_M steps); right, one
    dq_kernel program (its BLOCK_M queries, the keys in BLOCK_N steps). Masked: the diagonal steps; skipped:
    the steps above the diagonal, never loaded."""
    tiles = tab.GPU_TILES[head_dim]
    kv, q = tiles["dkdv"], tiles["dq"]
    S = 4 * max(kv["BLOCK_N"], q["BLOCK_M"])
    fig = _figure(12, 6.6)
    panels = ((0.07, kv["BLOCK_M"], kv["BLOCK_N"], "dkdv_kernel: one program's keys"),
              (0.56, q["BLOCK_M"], q["BLOCK_N"], "dq_kernel: one program's queries"))
    for x0, bm, bn, title in panels:
        rows, cols = S // bm, S // bn
        colors = _fill((rows, cols))
        steps = 0
        for i in range(rows):
            for j in range(cols):
                mine = (j * bn // kv["BLOCK_N"] == key_block) if bn == kv["BLOCK_N"] and bm == kv["BLOCK_M"] \
                    else (i * bm // q["BLOCK_M"] == query_block)
                above = j * bn > i * bm + bm - 1          # every key after every query of the block
                crosses = not above and (j + 1) * bn - 1 > i * bm
                if mine:
                    colors[i, j] = "white" if above else _shade(TRITON, 0.4) if crosses else TRITON
                    steps += not above
                elif above:
                    colors[i, j] = "white"
        ax = fig.add_axes((x0, 0.14, 0.38, 0.68))
        attention_grid(ax, S, bm, bn, colors)
        ax.plot([0, S], [0, S], color="k", lw=0.8, ls="--")
        _box(ax, 0, 0, S, S, "k", lw=1)
        _bare(ax, -0.1 * S, S + 0.02 * S, -0.07 * S, S + 0.02 * S)
        ax.set_title(f"{title}\nsteps of {bm} x {bn}, {steps} computed", fontsize=10, pad=22)
    fig.suptitle(f"Rung 2, causal, D = {head_dim}, S = {S}: each gradient row written once, by the program that "
                 f"owns it;\nP and dP computed in both kernels (dashed: the diagonal)", fontsize=11)
    _key(fig, [("this program, no mask", TRITON), ("this program, masked (diagonal)", _shade(TRITON, 0.4)),
               ("other programs", LIGHT), ("skipped: above the diagonal", "white")], y=0.0)
    return fig


def attention_backward_atomics(head_dim: int = 128, key_block: int = 1):
    """Rung 3 of the attention backward, causal, with its own tiles (GPU_TILES[head_dim]["dkdv_atomic"]): one K/V
    program walks its queries as in rung 2 and, at each step, adds its share of dQ into those queries' rows of one
    fp32 buffer; right, how many programs add into each dQ row (causal: every program whose keys come at or before
    the row's query), which is what its atomics cost."""
    t = tab.GPU_TILES[head_dim]["dkdv_atomic"]
    bm, bn = t["BLOCK_M"], t["BLOCK_N"]
    S = 4 * bn
    rows, cols = S // bm, S // bn
    colors = _fill((rows, cols))
    for i in range(rows):
        for j in range(cols):
            above = j * bn > i * bm + bm - 1
            crosses = not above and (j + 1) * bn - 1 > i * bm
            colors[i, j] = "white" if above else (_shade(TRITON, 0.4) if crosses else TRITON) if j == key_block \
                else colors[i, j]
    fig = _figure(11.5, 6.6)
    ax = fig.add_axes((0.1, 0.14, 0.8, 0.68))
    attention_grid(ax, S, bm, bn, colors)
    ax.plot([0, S], [0, S], color="k", lw=0.8, ls="--")
    _box(ax, 0, 0, S, S, "k", lw=1)
    # the dQ buffer beside the scores: one row per query, shaded by how many programs add into it
    adders = [min(cols, q // bn + 1) for q in range(0, S, bm)]
    strip = np.array([[_shade(CUDA, 0.15 + 0.85 * n / cols)] for n in adders], dtype=object)
    x = S + 0.12 * S
    _cells(ax, strip, x0=x, w=0.12 * S, h=bm)
    _box(ax, x, 0, 0.12 * S, S, "k", lw=1)
    for i, n in enumerate(adders):
        ax.text(x + 0.06 * S, (i + 0.5) * bm, str(n), ha="center", va="center", fontsize=10)
    for i in [i for i in range(rows) if key_block * bn <= i * bm + bm - 1]:   # the query steps it computes
        _arrow(ax, ((key_block + 1) * bn, (i + 0.5) * bm), (x, (i + 0.5) * bm), color=CUDA)
    ax.text(x + 0.06 * S, -0.02 * S, "dQ (fp32)", ha="center", va="bottom", fontsize=9)
    _bare(ax, -0.1 * S, x + 0.14 * S, -0.07 * S, S + 0.02 * S)
    ax.set_title(f"one dkdv program: steps of {bm} x {bn}, dQ added by atomics at each", fontsize=10, pad=22)
    fig.suptitle(f"Rung 3, causal, D = {head_dim}, S = {S}: no dQ kernel; every K/V program adds into the dQ rows "
                 f"of its queries\n(the number in each dQ row: how many programs add into it, up to {cols} here, "
                 f"S / {bn} at any S)", fontsize=11)
    _key(fig, [("this program, no mask", TRITON), ("this program, masked (diagonal)", _shade(TRITON, 0.4)),
               ("other programs", LIGHT), ("dQ rows: more programs adding, darker", CUDA),
               ("skipped: above the diagonal", "white")], y=0.0, ncol=3)
    return fig
