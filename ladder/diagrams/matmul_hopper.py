"""Lessons 02b and 02c, the CUDA matmul rungs on Hopper: a warpgroup's wgmma (rung 7), a TMA copy and the ring its
producer and consumer warpgroups share (rung 8), a cluster's multicast (rung 10), the epilogue by TMA (rung 11) and
rung 12's search.
"""
from __future__ import annotations

import re

import numpy as np
from matplotlib.patches import FancyArrowPatch

from kernels import matmul as mm
from kernels.cuda import matmul as cm
from kernels.triton import matmul as tm
from ladder.runtime import cuda
from ladder.diagrams.matmul import PERSISTENT_RUNG
from ladder.diagrams.style import (CUDA, FP16_BYTES, IN_FLIGHT, MEMORY, TENSOR_CORES, PruneReasons, _arrow, _bare,
                                   _box, _cells, _count, _figure, _fill, _key, _reasons_key, _rings, _schedule,
                                   _search_panel, _search_report, _shade)
from ladder.lessons.source import cu_define


# ------------------------------------------------------------- rung 7: wgmma

def wgmma_shape(path: str = "matmul/7_wgmma.cu") -> tuple[int, int, int]:
    """(m, n, k) of the wgmma instruction a .cu file issues: m and k from tensor_core.cuh's instruction text, n its
    width (BN: one wgmma spans the block's columns)."""
    m = re.search(r'wgmma\.mma_async\.sync\.aligned\.m(\d+)n" #N "k(\d+)', cuda.source(path))
    if not m:
        raise KeyError(f"{path} issues no wgmma.mma_async")
    return int(m.group(1)), cu_define(path, "BN"), int(m.group(2))


def matmul_wgmma(path: str = "matmul/7_wgmma.cu"):
    """CUDA rung 7 (7_wgmma.cu's BM, BN, BK, THREADS and its wgmma shape; STAGES from kernels/cuda/matmul.py WGMMA):
    the block tile split into warpgroups of 4 warps, each issuing one asynchronous m64nNk16 per k16 step with
    A's and B's slices read from shared memory; each warp holds 16 rows of its group's accumulators."""
    bm, bn, bk, threads = (cu_define(path, n) for n in ("BM", "BN", "BK", "THREADS"))
    im, in_, ik = wgmma_shape(path)
    groups = threads // 128
    stages = cm.WGMMA["STAGES"]
    k = 1                                                   # the k16 step drawn
    fig = _figure(11, 6.8)
    ax = fig.add_axes((0.02, 0.1, 0.96, 0.76))
    gap = 0.12 * max(bm, bn)
    a0, b0, c0 = (0, bk + gap), (bk + gap, 0), (bk + gap, bk + gap)
    smem = _shade(TENSOR_CORES, 0.2)
    _cells(ax, _fill((bm // 8, bk // ik), smem), *a0, ik, 8, grid="white", lw=0.4)
    _cells(ax, _fill((bk // ik, bn // 8), smem), *b0, 8, ik, grid="white", lw=0.4)
    warps = _fill((bm // 16, 1))
    for r in range(bm // 16):
        warps[r, 0] = _shade(TENSOR_CORES, 0.55 if (r // 4) % 2 == 0 else 0.35)
    _cells(ax, warps, *c0, bn, 16, grid="white", lw=1)
    for g in range(groups):                                 # warpgroup g: rows 64g .. 64g + 63
        _box(ax, a0[0] + k * ik, a0[1] + g * im, ik, im, TENSOR_CORES, fill=g == 0, lw=1.5)
        _box(ax, c0[0], c0[1] + g * im, in_, im, "k", lw=2)
        ax.text(c0[0] + in_ / 2, c0[1] + g * im + 8, f"warpgroup {g}: one m{im}n{in_}k{ik} per k16 step",
                ha="center", va="center", fontsize=9, bbox=dict(facecolor="white", edgecolor="none", pad=1))
        for w in range(4):
            ax.text(c0[0] + in_ + 0.01 * bn, c0[1] + g * im + 16 * w + 8, f"warp {4 * g + w}", ha="left",
                    va="center", fontsize=8)
    _box(ax, b0[0], b0[1] + k * ik, in_, ik, TENSOR_CORES, fill=True)
    ax.text(a0[0] + bk / 2, a0[1] - 0.02 * gap, f"A {bm}×{bk}\n(shared)", ha="center", va="bottom", fontsize=9)
    ax.text(b0[0] - 0.03 * gap, b0[1] + bk / 2, f"B {bk}×{bn}\n(shared)", ha="right", va="center", fontsize=9)
    _bare(ax, -0.02 * gap, bk + gap + bn + 0.16 * bn, -0.2 * gap, bk + gap + bm + 0.05 * gap)
    fig.suptitle(f"CUDA rung 7: a {bm}×{bn} block tile, {threads} threads = {groups} warpgroups of 4 warps; "
                 f"k16 step {k + 1} of {bk // ik} in a BK = {bk} tile", fontsize=11)
    fig.text(0.5, 0.02, f"filled: the slices one wgmma reads from shared memory through descriptors (no ldmatrix, "
             f"no operand registers);\nits {im}×{in_} fp32 sums stay in the group's registers, 16 rows per warp. "
             f"Asynchronous: a tile's {bk // ik} wgmmas are committed as a group and waited on one tile later; "
             f"{stages} stages", ha="center", fontsize=9)
    return fig


# ------------------------------------------------------------- rung 8: the TMA, producer and consumer warpgroups

def swizzled_chunk(row: int, chunk: int, row_bytes: int, swizzle_bytes: int = 128) -> int:
    """The 16-byte chunk position where chunk `chunk` of row `row` lands in shared memory under the TMA's (and
    wgmma's) `swizzle_bytes` swizzle: byte offset bits 4.. are XORed with bits 7.. (as many bits as the swizzle
    has 16-byte chunks, log2(swizzle/16)); 128 B rows: chunk ^ (row mod 8), as 7_wgmma.cu's copy_swizzled."""
    offset = row * row_bytes + chunk * 16
    mask = swizzle_bytes // 16 - 1
    return ((offset ^ (((offset >> 7) & mask) << 4)) % row_bytes) // 16


TMA_RUNG = "matmul/8_tma_warp_specialized.cu"


def tma_tile_copy(backend: str = "cuda", element_bytes: int = FP16_BYTES, swizzle_bytes: int = 128):
    """A TMA copy (Hopper): one thread hands the copy engine a tensor map (the matrix's address, sizes, strides
    and box) and the box's coordinates; the engine copies the whole box into shared memory in the swizzled
    layout wgmma reads, fills what lies outside the matrix with zeros, and counts the bytes landed on an
    mbarrier, whose phase flips when all arrived. The box: A's k-tile, BM x BK of CUDA rung 8 (its #defines),
    or BLOCK_M x BLOCK_K of Triton rung 7 (TMA_PERSISTENT)."""
    if backend == "cuda":
        rows, cols, width = cu_define(TMA_RUNG, "BM"), cu_define(TMA_RUNG, "BK"), cu_define(TMA_RUNG, "BN")
    else:
        rows, cols = tm.TMA_PERSISTENT["BLOCK_M"], tm.TMA_PERSISTENT["BLOCK_K"]
        width = tm.TMA_PERSISTENT["BLOCK_N"]
    row_bytes = cols * element_bytes
    chunks = row_bytes // 16
    nbytes = rows * row_bytes
    stage_bytes = nbytes + cols * width * element_bytes   # what full[s] expects: this A box and B's k-tile
    fig = _figure(12, 6.2)
    left, right = fig.add_axes((0.02, 0.1, 0.42, 0.72)), fig.add_axes((0.52, 0.1, 0.46, 0.72))
    # global memory: a matrix of 3.5 x 3 boxes, the box at (2, 1) crosses the bottom edge (rows past M)
    M, K = int(2.6 * rows), 3 * cols
    grid = _fill((3, 3))
    _cells(left, grid, 0, 0, cols, rows, grid="white", lw=1)
    _box(left, 0, 0, K, M, MEMORY, lw=1)
    _box(left, cols, 2 * rows, cols, rows, TENSOR_CORES, fill=True, alpha=0.5)
    _box(left, cols, 2 * rows, cols, M - 2 * rows, TENSOR_CORES, fill=True)
    left.plot([0, K], [M, M], color="k", lw=1.2, ls="--")
    left.text(K + 0.03 * K, M, "row M: A ends", ha="left", va="center", fontsize=8)
    left.text(1.265 * K, 2.2 * rows - 0.08 * rows, "cp.async.bulk\n.tensor, box at\nx = k0, y = m0", ha="center",
              va="bottom", fontsize=8)   # the map's coordinates, innermost first: tma_load(..., k0, m0, ...)
    left.text(cols * 1.5, M + (3 * rows - M) / 2, "zero-filled", ha="center", va="center", fontsize=8)
    _bare(left, -0.05 * K, 1.5 * K, -0.05 * rows, 3 * rows + 0.05 * rows)
    left.set_title(f"global memory: the tensor map holds A's address, sizes and row stride,\n"
                   f"and the box {rows}×{cols}; one thread issues the copy of one box", fontsize=10)
    # shared memory: the first 8 rows, chunk numbers after the swizzle
    show = min(rows, 8)
    cells = _fill((show, chunks), _shade(TENSOR_CORES, 0.25))
    _cells(right, cells, 0, 0, 1, 1, grid="white", lw=1.5)
    for r in range(show):
        for c in range(chunks):
            right.text(swizzled_chunk(r, c, row_bytes, swizzle_bytes) + 0.5, r + 0.5, str(c), ha="center",
                       va="center", fontsize=9)
        right.text(-0.15, r + 0.5, f"row {r}", ha="right", va="center", fontsize=8)
    bar_y = show + 1.2
    _box(right, -1.5, bar_y, chunks + 1.6, 2.6, "0.3", lw=1.2)
    right.text((chunks - 1.4) / 2, bar_y + 1.3, f"mbarrier full[s] expects {nbytes} bytes from this box\nand {stage_bytes - nbytes} "
               f"from B's: {stage_bytes} a stage. It counts them\nas they land; then its phase completes "
               f"\nand the waiting warps run", ha="center", va="center", fontsize=9)
    _bare(right, -1.6, chunks + 0.2, -0.2, bar_y + 2.8)
    right.set_title(f"shared memory, rows 0–{show - 1} of {rows}: which 16-byte chunk of the row lands where\n"
                    f"({swizzle_bytes}-byte swizzle: chunk c of row r at c XOR r mod 8; the banks spread)", fontsize=10)
    who = "CUDA rung 8" if backend == "cuda" else "Triton rung 7"
    fig.suptitle(f"TMA ({who}'s A tile): one instruction copies a {rows}×{cols} box ({nbytes // 1024} KiB), "
                 f"swizzled, and signals its arrival on an mbarrier", fontsize=12)
    _arrow(left, (1.08 * K, 2.2 * rows), (1.45 * K, 2.2 * rows))
    return fig


def warp_specialized_ring(stages: int = 4, producers: int = 1, consumers: int = 2, tiles: int = 8,
                          title: str = "Producer and consumer warpgroups around a ring of stages",
                          producer: str = "producer warpgroup", tile: str = "k-tile"):
    """The Hopper pipeline with specialized warpgroups: `producers` warpgroup(s) (one thread issuing TMA copies)
    fill a ring of `stages` shared-memory buffers, each with a `full` and an `empty` mbarrier; `consumers`
    warpgroups wait on full[s], run their wgmmas on it and arrive on empty[s], which lets the producer refill it.
    Drawn generically: point the parameters at a kernel's constants (e.g. a rung's STAGES and warpgroups);
    `producer` and `tile` name the producer (a warpgroup, or a warp) and what a stage holds."""
    steps = []
    for t in range(tiles):
        held = {f"stage {j % stages}": (j, "copy") for j in range(t + 1, min(tiles, t + stages))}
        held[f"stage {t % stages}"] = (t, "math")
        if t + stages - 1 < tiles:
            held["producer" + (f" ×{producers}" if producers > 1 else "")] = (t + stages - 1, "copy")
        for c in range(consumers):
            held[f"consumer {c}"] = (t, "math")
        steps.append(held)
    rows = (["producer" + (f" ×{producers}" if producers > 1 else "")] + [f"stage {s}" for s in range(stages)]
            + [f"consumer {c}" for c in range(consumers)])
    fig = _rings([(rows, steps, f"{stages} stages, {_count(producers, producer)} issuing TMA {_count(stages - 1, tile)} "
                                f"ahead, {_count(consumers, 'consumer warpgroup')} on wgmma")],
                 title, math="read by the consumers' wgmma")
    fig.text(0.5, 0.09, "stage s: the producer waits on empty[s], issues the TMA copy (full[s] expects its bytes); "
             "the consumers wait on full[s],\nrun their wgmmas on it, then arrive on empty[s]. "
             "No __syncthreads in the loop: the two mbarriers per stage are the only handshake.", ha="center", fontsize=9)
    fig.tight_layout(rect=(0, 0.16, 1, 1))
    return fig


def matmul_tma_ring(tiles: int = 8):
    """CUDA rung 8 (8_tma_warp_specialized.cu's THREADS and CONSUMERS, kernels/cuda/matmul.py TMA_WS's STAGES): the
    producer/consumer ring of warp_specialized_ring with the rung's own stages and warpgroups."""
    consumers = cu_define(TMA_RUNG, "CONSUMERS")
    producers = cu_define(TMA_RUNG, "THREADS") // 128 - consumers
    return warp_specialized_ring(cm.TMA_WS["STAGES"], producers, consumers, tiles,
                                 "CUDA rung 8: a producer warpgroup and consumer warpgroups around a ring of TMA stages")


# ------------------------------------------------------------- rung 10: clusters and multicast

CLUSTER_RUNG = "matmul/10_cluster_multicast.cu"


def cluster_bytes_per_k_step() -> dict[str, int]:
    """Bytes each block reads from L2 per k-step: rung 9 copies its A k-tile (BM x BK) and the whole B k-tile
    (BK x BN); rung 10 its A k-tile and 1/CLUSTER of B's (B_BOXES_PER_BLOCK boxes of BK x 64), multicast. Both
    from the .cu files' #defines."""
    a9 = cu_define(PERSISTENT_RUNG, "BM") * cu_define(PERSISTENT_RUNG, "BK") * FP16_BYTES
    b9 = cu_define(PERSISTENT_RUNG, "BK") * cu_define(PERSISTENT_RUNG, "BN") * FP16_BYTES
    bm, bn, bk, cluster = (cu_define(CLUSTER_RUNG, n) for n in ("BM", "BN", "BK", "CLUSTER"))
    return dict(rung9_a=a9, rung9_b=b9, rung10_a=bm * bk * FP16_BYTES,
                rung10_b=bn // 64 // cluster * 64 * bk * FP16_BYTES)


def _kib(n: int) -> str:
    return f"{n / 1024:g} KiB"


def matmul_cluster_multicast():
    """CUDA rung 10 (10_cluster_multicast.cu's BM, BN, BK, CLUSTER, CONSUMERS): a cluster of CLUSTER blocks on
    as many SMs computes a CLUSTER*BM x BN block of C, its blocks' tiles stacked. Per k-step each block's producer
    copies its own A k-tile and 1/CLUSTER of B's k-tile, multicast to the same offset in every block's shared
    memory; every consumer warpgroup of the cluster arrives on empty[s] in every block. With the bytes a block's
    producer asks of the L2 per k-step, rung 9 (9_persistent.cu) against rung 10 (each SM still receives all of B)."""
    bm, bn, bk, cluster, consumers = (cu_define(CLUSTER_RUNG, n) for n in ("BM", "BN", "BK", "CLUSTER", "CONSUMERS"))
    part = bn // cluster                                   # columns of B one producer copies
    u = 32                                                 # elements per drawing unit
    h_a, w_a, h_b, w_b, part_w = bm / u, bk / u, bk / u, bn / u, part / u
    shades = [_shade(CUDA, a) for a in np.linspace(0.85, 0.4, cluster)]
    width = 4 + 4.5 * cluster                              # inches: 13 for a pair, wider for larger clusters
    fig = _figure(width, 7.4)
    geo = fig.add_axes((0.01, 0.12, 3.5 / width, 0.7))
    sm = fig.add_axes((3.9 / width, 0.12, 1 - 4.0 / width, 0.74))
    # ---- the cluster's block of C: A k-tiles down the left, B's k-tile across the top, C's tiles stacked
    gap = 0.6
    cx, cy = w_a + gap, h_b + gap
    for r in range(cluster):
        _box(geo, 0, cy + r * h_a, w_a, h_a, shades[r], fill=True, lw=1)
        _box(geo, cx + r * part_w, 0, part_w, h_b, shades[r], fill=True, lw=1)
        _box(geo, cx, cy + r * h_a, w_b, h_a, _shade(shades[r], 0.45), fill=True, lw=1)
        _box(geo, cx, cy + r * h_a, w_b, h_a, "k", lw=1.2, z=4)
        geo.text(cx + w_b / 2, cy + (r + 0.5) * h_a, f"block {r}:\nC rows m0+{r * bm} …\nm0+{(r + 1) * bm - 1}",
                 ha="center", va="center", fontsize=9)
        geo.text(cx + (r + 0.5) * part_w, h_b / 2, f"part {r}", ha="center", va="center", fontsize=8)
    geo.text(w_a / 2, cy + cluster * h_a + 0.2, f"A\n{bm}×{bk}\neach", ha="center", va="top", fontsize=8)
    _bare(geo, -0.3, cx + w_b + 0.3, -0.3, cy + cluster * h_a + 1.9)
    geo.set_title(f"the cluster's {cluster * bm}×{bn} block of C,\none k-step: B's {bk}×{bn} k-tile "
                  f"in {cluster} parts", fontsize=10)
    # ---- the SMs: L2 on top, one box per block below
    box_w, box_gap = w_a + w_b + 2.0, 1.2
    l2_y, box_y, box_h = 0.0, h_a + 2.6, h_a + 3.9
    stage_y = box_y + 1.2
    b_stage_x = [r * (box_w + box_gap) + w_a + 1.0 for r in range(cluster)]
    for r in range(cluster):
        x0 = r * (box_w + box_gap)
        # L2: block r's A k-tile above its A stage, part r of B above the slot it lands in, in block r
        _box(sm, x0 + 0.5, l2_y, w_a, h_a, shades[r], fill=True, lw=1)
        sm.text(x0 + 0.5 + w_a + 0.15, l2_y + 0.1, f"A {bm}×{bk}", ha="left", va="top", fontsize=8)
        bx = b_stage_x[r] + r * part_w
        _box(sm, bx, l2_y + h_a - h_b, part_w, h_b, shades[r], fill=True, lw=1)
        sm.text(bx + part_w / 2, l2_y + h_a - h_b - 0.1, f"B part {r}: {bk}×{part}", ha="center", va="bottom",
                fontsize=8)
        _arrow(sm, (x0 + 0.5 + w_a / 2, l2_y + h_a), (x0 + 0.5 + w_a / 2, stage_y))
        for t in range(cluster):                            # multicast: to the same slot in every block
            _arrow(sm, (bx + part_w / 2, l2_y + h_a), (b_stage_x[t] + (r + 0.5) * part_w, stage_y), shades[r])
        # block r: its stage s of the ring
        _box(sm, x0, box_y, box_w, box_h, "0.3", lw=1.2)
        sm.text(x0 + 0.2, box_y + box_h - 0.15, f"block {r}, on its own SM: stage s of its ring", ha="left",
                va="bottom", fontsize=9)
        _box(sm, x0 + 0.5, stage_y, w_a, h_a, shades[r], fill=True, lw=1)
        for t in range(cluster):
            _box(sm, b_stage_x[r] + t * part_w, stage_y, part_w, h_b, shades[t], fill=True, lw=1)
        bar_y = stage_y + h_b + 0.6
        _box(sm, b_stage_x[r], bar_y, w_b / 2 - 0.2, 1.1, "0.3", lw=1)
        sm.text(b_stage_x[r] + w_b / 4 - 0.1, bar_y + 0.55, f"empty[s]: {consumers * cluster} arrivals",
                ha="center", va="center", fontsize=8)
        _box(sm, b_stage_x[r] + w_b / 2 + 0.2, bar_y, w_b / 2 - 0.2, 1.1, "0.3", lw=1)
        sm.text(b_stage_x[r] + 3 * w_b / 4 + 0.1, bar_y + 0.55, "full[s]: the bytes", ha="center", va="center",
                fontsize=8)
        cons_y = bar_y + 2.0
        _box(sm, b_stage_x[r], cons_y, w_b, 1.1, TENSOR_CORES, lw=1)
        sm.text(b_stage_x[r] + w_b / 2, cons_y + 0.55, f"{consumers} consumer warpgroups (wgmma)", ha="center",
                va="center", fontsize=8)
    for r in range(cluster):                                # each block's consumers release s in every block
        for t in range(cluster):
            start = (b_stage_x[r] + w_b * (0.25 if t == r else 0.5 + 0.4 * (t - r) / cluster), cons_y)
            end = (b_stage_x[t] + w_b / 4 + (0.4 * (r - t) / cluster) * w_b / 2, bar_y + 1.1)
            sm.add_patch(FancyArrowPatch(start, end, arrowstyle="-|>", mutation_scale=10, color=TENSOR_CORES,
                                         lw=1, ls="-" if t == r else "--", zorder=4))
    right = cluster * (box_w + box_gap) - box_gap
    _bare(sm, -0.3, right + 0.3, -1.2, box_y + box_h + 0.3)
    sm.set_title("L2: each producer copies its block's A k-tile and one part of B, multicast into every block",
                 fontsize=10)
    b = cluster_bytes_per_k_step()
    r9, r10 = b["rung9_a"] + b["rung9_b"], b["rung10_a"] + b["rung10_b"]
    fig.suptitle(f"CUDA rung 10: a cluster of {cluster} blocks on {cluster} SMs computes a {cluster * bm}×{bn} block "
                 f"of C; B's k-tile is read from L2 once per cluster\n"
                 f"asked of the L2 per k-step by a block's producer: rung 9 {_kib(b['rung9_a'])} A + {_kib(b['rung9_b'])} B "
                 f"= {_kib(r9)};  rung 10 {_kib(b['rung10_a'])} A + {_kib(b['rung10_b'])} B = {_kib(r10)} "
                 f"({r10 / r9:.2f}×)", fontsize=11)
    fig.text(0.5, 0.075, "dashed: a consumer warpgroup's arrive on the partner's empty[s] (mapa + remote "
             "mbarrier arrive); a producer refills stage s once all consumers of the cluster are done with it",
             ha="center", fontsize=9)
    _key(fig, [(f"copied by block {r}'s producer", shades[r]) for r in range(cluster)], y=0.0)
    return fig


# ------------------------------------------------------------- rung 11: the epilogue by TMA; rung 12: the search

def epilogue_schedule(k_tiles: int, store_steps: int, by_tma: bool, tiles: int = 2) -> list[dict]:
    """One consumer warpgroup over `tiles` tiles of C: k_tiles steps of wgmma each, then its epilogue. Rungs 8-10
    store from registers for `store_steps` steps and issue no wgmma meanwhile; rung 11 (`by_tma`) writes the tile
    into shared memory in one step, and the TMA's store of it runs during the next tile's first steps."""
    steps, in_flight = [], []
    for tile in range(tiles):
        for k in range(k_tiles):
            step = {"wgmma": (f"{tile}.{k}", "math")}
            if in_flight:
                step["stores"] = (in_flight.pop(0), "copy")
            steps.append(step)
        if by_tma:
            steps.append({"wgmma": (f"C{tile}", "store")})
            in_flight = [f"C{tile}"] * store_steps
        else:
            steps += [{"stores": (f"C{tile}", "store")} for _ in range(store_steps)]
    return steps


def matmul_tma_store_epilogue(k_tiles: int = 5, store_steps: int = 2):
    """Rung 11: a consumer warpgroup's wgmma and C's stores over two tiles, rung 10 (stores from registers: no
    wgmma meanwhile) against rung 11 (C into shared memory, then TMA stores that overlap the next tile)."""
    rows = ["wgmma", "stores"]
    fig = _figure(10, 3.6)
    axes = fig.subplots(2, 1)
    registers, by_tma = (epilogue_schedule(k_tiles, store_steps, tma) for tma in (False, True))
    _schedule(axes[0], rows, registers,
              "rung 10: the warpgroup stores C from its registers, and issues no wgmma meanwhile", prefix="")
    _schedule(axes[1], rows, by_tma,
              "rung 11: it writes C into shared memory; the TMA stores it while the next tile computes", prefix="")
    axes[1].set_xlim(0, len(registers))   # one time scale: rung 11 ends the steps it saves earlier
    fig.suptitle("One consumer warpgroup over two tiles of C (t.k: tile t's k-tile k; Ct: tile t's C)", fontsize=12)
    _key(fig, [("tensor cores compute", TENSOR_CORES), ("the warpgroup writes C", CUDA),
               ("the TMA stores C", IN_FLIGHT), ("idle", "white")], y=0.0)
    fig.tight_layout(rect=(0, 0.09, 1, 1))
    return fig


def matmul_hopper_search(shapes: tuple = ((4096, 4096, 4096), (8192, 8192, 8192), (8192, 768, 3072))):
    """CUDA matmul rung 12 (HOPPER_SEARCH_SPACE of kernels/matmul.py, and the recorded searches at `shapes`): a row
    per block of C (BM x BN), a column per ring depth and cluster size, each cell the best of its tile orders
    (GROUP_M) and epilogues (BOX_BY_BOX): pruned (why) or timed against the winner, the winner starred."""
    fig = _figure(9, 3.4 * len(shapes) + 1.2)   # one shape under another: readable at a notebook's width
    axes = fig.subplots(len(shapes), 1, squeeze=False)[:, 0]
    reasons = PruneReasons()
    for ax, shape in zip(axes, shapes):
        report = _search_report(mm.HOPPER_TUNER.name, shape)
        _search_panel(ax, report, mm.HOPPER_SEARCH_SPACE, ["BM", "BN"], ["STAGES", "CLUSTER"], CUDA, reasons)
        best = " ".join(f"{k}={v}" for k, v in report.best.items()) if report else "no recorded search"
        ax.set_title(f"{'x'.join(map(str, shape))}\n★ {best}", fontsize=9)
    fig.suptitle("CUDA matmul rung 12: the search (recorded); % = the best time / this one's", fontsize=11)
    _reasons_key(fig, reasons)
    return fig
