"""Lessons 02a and 03, the matmul ladders on any GPU: what a warp touches (CUDA rungs 1-2, Triton rungs 1-2), the
tiles in shared memory and registers (rungs 3 and 3b), the tensor cores' warp tiles (rung 4, and Triton's tl.dot),
the ring of pipeline stages (rung 5) and the order tiles are handed out (rung 6; 02b's rung 9).
"""
from __future__ import annotations

import re

import numpy as np

from kernels import matmul_triton_search as triton_search
from kernels.cuda import matmul as cm
from kernels.triton import matmul as tm
from ladder.runtime import cuda, hardware
from ladder.diagrams.style import (CUDA, CUDA_CORES, FP16_BYTES, LIGHT, MEMORY, SECTOR_BYTES, TENSOR_CORES, TRITON,
                                   _arrow, _bare, _box, _cdiv, _cells, _count, _figure, _fill, _key, _rings, _sectors,
                                   _shade)
from ladder.lessons.source import cu_define, cu_expression


# ------------------------------------------------------------- CUDA rungs 1-3b: accesses, shared and register tiles

class _Dim3:
    def __init__(self, x, y=0, z=0):
        self.x, self.y, self.z = x, y, z


def warp_elements(path: str, block: tuple[int, int], warp: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(row, col) of C for each lane of warp `warp` of block (0, 0), from the kernel's own `row` and `col`
    expressions, with blockDim = `block` (threadIdx.x varies fastest within a warp)."""
    lane = np.arange(32) + 32 * warp
    names = {"threadIdx": _Dim3(lane % block[0], lane // block[0]), "blockIdx": _Dim3(0, 0),
             "blockDim": _Dim3(*block), "__builtins__": {}}
    # C's integer division; the expressions come from this repository's kernels
    return tuple(np.broadcast_to(eval(cu_expression(path, v).replace("/", "//"), names), (32,))  # noqa: S307
                 for v in ("row", "col"))


MATMUL_WARP_RUNGS = ("1_naive", "2_coalesced")


def matmul_warp_sectors(*rungs: str, K: int = 4096, N: int = 4096):
    """Matmul rungs 1-2: the elements of A, B and C that warp 0 touches in one load (k = 0) and the store,
    read from the rung's own `row` / `col` expressions, with the 32-byte sectors they fall in."""
    rungs = rungs or MATMUL_WARP_RUNGS
    block = (cm.SCALAR_TILE, cm.SCALAR_TILE)
    sector = SECTOR_BYTES // FP16_BYTES
    window = (34, 3 * sector)   # rows x columns of each matrix shown
    fig = _figure(11, 0.6 + 3.3 * len(rungs))
    axes = fig.subplots(len(rungs), 3, squeeze=False)
    for row_axes, rung in zip(axes, rungs):
        rows, cols = warp_elements(f"matmul/{rung}.cu", block)
        accesses = {"A": (rows, np.zeros(32, int), K), "B": (np.zeros(32, int), cols, N), "C": (rows, cols, N)}
        for ax, (name, (r, c, stride)) in zip(row_axes, accesses.items()):
            colors = _fill(window)
            sectors = _sectors(FP16_BYTES * (r * stride + c))
            for s in sectors:  # the whole sector is fetched, used or not
                first = s * sector
                if first // stride < window[0] and first % stride < window[1]:
                    colors[first // stride, first % stride: first % stride + sector] = _shade(CUDA, 0.3)
            colors[r, c] = CUDA
            _cells(ax, colors, grid="white", lw=0.3)
            ax.vlines(np.arange(0, window[1] + 1, sector), 0, window[0], color="k", lw=0.8, zorder=2)
            _bare(ax, -0.5, window[1] + 0.5, -0.5, window[0] + 0.5)
            verb = "store" if name == "C" else "load"
            ax.set_title(f"{name}: {verb} touches {_count(len(set(zip(r.tolist(), c.tolist()))), 'element')}, "
                         f"{_count(len(sectors), 'sector')}", fontsize=9)
        row_axes[0].text(-3, window[0] / 2, rung, rotation=90, ha="right", va="center", fontsize=11,
                         fontweight="bold")
    fig.suptitle(f"Matmul: warp 0's first loads (k = 0) and its store; rows {K * FP16_BYTES // 1024} KB apart "
                 f"(K = N = {K}); black lines: 32-byte sectors", fontsize=11)
    _key(fig, [("element a lane touches", CUDA), ("rest of a sector fetched", _shade(CUDA, 0.3)),
               ("not fetched", LIGHT)], y=0.0)
    fig.tight_layout(rect=(0.02, 0.05, 1, 1))
    return fig


def _tile_layout(ax, tiles: tuple[int, int, int], block: tuple[int, int, int], at: tuple[int, int], step: int,
                 color: str):
    """The A (M x K), B (K x N), C (M x N) arrangement of one block's work, in elements: C's block `at`
    (tile row, tile column) outlined, A's row strip and B's column strip shaded, the k-tile `step` of each
    filled (what sits in fast memory now). Returns the corners of A, B and C."""
    (tm, tn, tk), (bm, bn, bk) = tiles, block
    M, N, K = tm * bm, tn * bn, tk * bk
    gap = 0.12 * max(M, N)
    a0, b0, c0 = (0, K + gap), (K + gap, 0), (K + gap, K + gap)  # (x, y) of A, B, C
    for (x, y), w, h, tw, th, name in ((a0, K, M, bk, bm, "A"), (b0, N, K, bn, bk, "B"), (c0, N, M, bn, bm, "C")):
        _cells(ax, _fill((h // th, w // tw)), x, y, tw, th, grid="white", lw=1)
        ax.text(x - 0.03 * gap if name != "B" else x + w / 2, y + h / 2 if name != "B" else y - 0.1 * gap,
                name, ha="right" if name != "B" else "center", va="center" if name != "B" else "bottom",
                fontsize=12, fontweight="bold")
    i, j = at
    _box(ax, a0[0], a0[1] + i * bm, K, bm, color, fill=True, alpha=0.25, lw=0)
    _box(ax, b0[0] + j * bn, b0[1], bn, K, color, fill=True, alpha=0.25, lw=0)
    _box(ax, a0[0] + step * bk, a0[1] + i * bm, bk, bm, color, fill=True)
    _box(ax, b0[0] + j * bn, b0[1] + step * bk, bn, bk, color, fill=True)
    _box(ax, c0[0] + j * bn, c0[1] + i * bm, bn, bm, color, fill=True, alpha=0.6)
    _arrow(ax, (a0[0] + (step + 1) * bk + 0.1 * bk, a0[1] + i * bm + bm / 2),
           (a0[0] + (step + 2) * bk, a0[1] + i * bm + bm / 2))
    _arrow(ax, (b0[0] + j * bn + bn / 2, b0[1] + (step + 1) * bk + 0.1 * bk),
           (b0[0] + j * bn + bn / 2, b0[1] + (step + 2) * bk))
    _bare(ax, -0.15 * gap, K + gap + N + 0.05 * gap, -0.6 * gap, K + gap + M + 0.05 * gap)
    return a0, b0, c0


def matmul_shared_tile(backend: str = "cuda"):
    """Rung 3 (CUDA: TILE of 3_smem_tiled.cu; Triton: rung 3's BLOCK_M x BLOCK_N x BLOCK_K): one block's
    tile of C, and the k-tiles of A and B it holds in shared memory while every thread reuses them."""
    if backend == "cuda":
        bm = bn = bk = cu_define("matmul/3_smem_tiled.cu", "TILE")
        who, color = f"CUDA rung 3 (TILE = {bm}): a block of {bm}×{bm} threads", CUDA
    else:
        t = tm.GPU_TILES["3_tiled"]
        bm, bn, bk = t["BLOCK_M"], t["BLOCK_N"], t["BLOCK_K"]
        who, color = "Triton rung 3: one program", TRITON
    fig = _figure(7.5, 7.2)
    ax = fig.add_axes((0.02, 0.1, 0.96, 0.8))
    step = 1
    _tile_layout(ax, (4, 4, _cdiv(4 * max(bm, bn), bk)), (bm, bn, bk), (1, 2), step, color)
    fig.suptitle(f"{who} computes a {bm}×{bn} tile of C", fontsize=12)
    fig.text(0.5, 0.035, f"k step {step} (counting from 0): A's {bm}×{bk} and B's {bk}×{bn} tiles (dark) sit in shared memory;\n"
             f"each A element is used {bn} times, each B element {bm} times, then the next k step (→)",
             ha="center", fontsize=10)
    return fig


def matmul_register_block():
    """Rung 3b (3b_register_blocked.cu's BM, BN, BK, TM, TN): the block tile split into one TM x TN block of C
    per thread; for one k, a thread reads TM values of A's tile and TN of B's into registers and does all
    TM x TN products."""
    path = "matmul/3b_register_blocked.cu"
    bm, bn, bk, tm_, tn_ = (cu_define(path, n) for n in ("BM", "BN", "BK", "TM", "TN"))
    across = bn // tn_
    tid = across + 1                                        # a thread off the corner, so all edges show
    row0, col0 = (tid // across) * tm_, (tid % across) * tn_  # the kernel's tm, tn
    k = bk // 2
    gap = bm / 8
    fig = _figure(7, 7)
    ax = fig.add_axes((0.02, 0.08, 0.96, 0.84))
    a0, b0, c0 = (0, bk + gap), (bk + gap, 0), (bk + gap, bk + gap)
    _cells(ax, _fill((bm, bk)), *a0, grid="white", lw=0.3)
    _cells(ax, _fill((bk, bn)), *b0, grid="white", lw=0.3)
    threads = _fill((bm // tm_, across))
    threads[(np.add.outer(np.arange(bm // tm_), np.arange(across)) % 2) == 1] = "0.86"
    _cells(ax, threads, *c0, w=tn_, h=tm_, grid=None)
    _box(ax, a0[0] + k, a0[1], 1, bm, CUDA_CORES, fill=True, alpha=0.2, lw=0)   # this k, for every thread
    _box(ax, b0[0], b0[1] + k, bn, 1, CUDA_CORES, fill=True, alpha=0.2, lw=0)
    _box(ax, a0[0] + k, a0[1] + row0, 1, tm_, CUDA_CORES, fill=True, lw=0.5)
    _box(ax, b0[0] + col0, b0[1] + k, tn_, 1, CUDA_CORES, fill=True, lw=0.5)
    _box(ax, c0[0] + col0, c0[1] + row0, tn_, tm_, CUDA_CORES, fill=True, lw=1)
    ax.plot([a0[0] + k + 1, c0[0] + col0], [a0[1] + row0 + tm_ / 2] * 2, color=CUDA_CORES, lw=0.8, ls=":")
    ax.plot([b0[0] + col0 + tn_ / 2] * 2, [b0[1] + k + 1, c0[1] + row0], color=CUDA_CORES, lw=0.8, ls=":")
    for (x, y), text, where in ((a0, f"A tile {bm}×{bk}\n(shared)", (-1, bm / 2)),
                                (b0, f"B tile {bk}×{bn} (shared)", (bn / 2, -1)),
                                (c0, f"C block tile {bm}×{bn}:\n{bm // tm_}×{across} threads,\n"
                                     f"{tm_}×{tn_} outputs each", (bn / 2, bm + 1))):
        ax.text(x + where[0], y + where[1], text, fontsize=10,
                ha="right" if where[0] < 0 else "center", va="top" if where[1] > 0 and x == c0[0] else
                ("bottom" if where[1] < 0 else "center"))
    _bare(ax, -bk * 2.6, bk + gap + bn + 1, -gap * 0.6, bk + gap + bm + gap * 1.4)
    fig.suptitle(f"CUDA rung 3b: thread {tid} keeps {tm_}×{tn_} values of C in registers", fontsize=12)
    fig.text(0.5, 0.03, f"per k: {tm_} values of A + {tn_} of B from shared memory → {tm_ * tn_} FMAs (orange)",
             ha="center", fontsize=10)
    return fig


# ------------------------------------------------------------- CUDA rung 4: tensor cores

def mma_shape() -> tuple[int, int, int]:
    """(m, n, k) of the mma.sync instruction tensor_core.cuh issues (sm_80 and newer)."""
    m = re.search(r"mma\.sync\.aligned\.m(\d+)n(\d+)k(\d+)", cuda.source("matmul/tensor_core.cuh"))
    return tuple(int(x) for x in m.groups())


def matmul_warp_tiles():
    """Rung 4 (kernels/cuda/matmul.py TENSOR_CORE): the block tile split into WARPS_M x WARPS_N warp tiles, each a
    grid of mma.sync m16n8k16 results, and which lane holds which accumulator of one of them."""
    c = cm.TENSOR_CORE
    bm, bn, wm_count, wn_count = c["BM"], c["BN"], c["WARPS_M"], c["WARPS_N"]
    wm, wn = bm // wm_count, bn // wn_count
    fm, fn, fk = mma_shape()
    fig = _figure(12, 7.5)
    left, right = fig.add_axes((0.02, 0.04, 0.44, 0.82)), fig.add_axes((0.5, 0.02, 0.48, 0.86))
    frags = _fill((bm // fm, bn // fn))
    frags[: wm // fm, : wn // fn] = _shade(TENSOR_CORES, 0.3)
    frags[0, 0] = TENSOR_CORES
    _cells(left, frags, w=fn, h=fm, grid="white", lw=0.4)
    for w in range(wm_count * wn_count):
        i, j = w // wn_count, w % wn_count   # the kernel's wm = warp / WARPS_N, wn = warp % WARPS_N
        _box(left, j * wn, i * wm, wn, wm, "k", lw=1.5)
        left.text(j * wn + wn / 2, i * wm + wm / 2 + (fm if w == 0 else 0), f"warp {w}", ha="center",
                  va="center", fontsize=10, bbox=dict(facecolor="white", edgecolor="none", pad=1))
    _bare(left, -1, bn + 1, -1, bm + 1)
    left.set_title(f"block tile {bm}×{bn}: {wm_count}×{wn_count} warps of {wm}×{wn},\n"
                   f"each {wm // fm}×{wn // fn} results of m{fm}n{fn}k{fk}", fontsize=10)
    # One mma: A (fm x fk) left of C, B (fk x fn) above it; in C, the lane holding each fp32 sum: lane l holds
    # row l/4 (+8) and columns 2(l%4), +1 (tensor_core.cuh's epilogue).
    gap = 2
    a0, b0, c0 = (0, fk + gap), (fk + gap, 0), (fk + gap, fk + gap)
    operand = _shade(TENSOR_CORES, 0.3)
    _cells(right, _fill((fm, fk), operand), *a0, grid="white", lw=1)
    _cells(right, _fill((fk, fn), operand), *b0, grid="white", lw=1)
    _cells(right, _fill((fm, fn), operand), *c0, grid="white", lw=1)
    for r in range(fm):
        for col in range(fn):
            right.text(c0[0] + col + 0.5, c0[1] + r + 0.5, str((r % 8) * 4 + col // 2), ha="center", va="center",
                       fontsize=6.5)
    _box(right, *c0, fn, fm, TENSOR_CORES, lw=2)
    right.text(a0[0] + fk / 2, a0[1] - 0.4, f"A {fm}×{fk}", ha="center", va="bottom", fontsize=9)
    right.text(b0[0] + fn + 0.4, b0[1] + fk / 2, f"B {fk}×{fn}", ha="left", va="center", fontsize=9)
    right.text(c0[0] + fn + 0.4, c0[1] + fm / 2, "C: the lane\nholding each\nfp32 sum", ha="left", va="center",
               fontsize=9)
    _bare(right, -0.5, fk + gap + fn + 7, -0.5, fk + gap + fm + 0.5)
    right.set_title(f"one mma.sync m{fm}n{fn}k{fk} (dark in warp 0);\nA and B fragments come from ldmatrix",
                    fontsize=10)
    fig.suptitle("CUDA rung 4: warp tiles and one mma.sync fragment", fontsize=12, y=0.985)
    return fig


# ------------------------------------------------------------- rung 5: the stage ring (CUDA and Triton)

def cp_async_ring(stages: int, tiles: int) -> list[dict[str, tuple[int, str]]]:
    """5_pipelined.cu's loop played step by step (sm_80+): per step t, "buffer b" -> (k-tile, "math" or "copy").
    Prologue: tiles 0..STAGES-2 fetched; step t waits for tile t, fetches tile t+STAGES-1 into the buffer
    tile t-1 used (t+STAGES-1 mod STAGES), then computes on buffer t mod STAGES."""
    held: dict[int, int] = {}
    for t in range(min(stages - 1, tiles)):
        held[t % stages] = t
    steps = []
    for t in range(tiles):
        if t + stages - 1 < tiles:
            held[(t + stages - 1) % stages] = t + stages - 1
        steps.append({f"buffer {b}": (tile, "math" if tile == t else "copy") for b, tile in held.items() if tile >= t})
    return steps


def register_double_buffer(tiles: int) -> list[dict[str, tuple[int, str]]]:
    """5_pipelined.cu's sm_75 loop: per step t, tile t in buffer t mod 2 under the math while tile t+1 loads
    into registers (stored to the other buffer after the math)."""
    return [{f"buffer {t % 2}": (t, "math"), **({"registers": (t + 1, "copy")} if t + 1 < tiles else {})}
            for t in range(tiles)]


def register_operand_ring(buffers: int, tiles: int) -> list[dict[str, tuple[int, str]]]:
    """Triton's pipelined K loop before Hopper (mma.sync reads registers): per step t, tile t's operands are in
    registers under the math, and `buffers` copies are in flight, tiles t+1..t+buffers; the newest went into
    the buffer tile t was just read from (t mod buffers)."""
    return [{"registers": (t, "math"), **{f"buffer {j % buffers}": (j, "copy") for j in range(t + 1, min(tiles, t + 1 + buffers))}}
            for t in range(tiles)]


def triton_ring(config: dict, capability: tuple[int, int]) -> tuple[int, int]:
    """(buffers, k-tiles in flight ahead of the math) of Triton's pipeliner for a tile `config` with num_stages,
    on `capability`: the buffers as kernels/matmul_triton_search.py's shared_bytes counts them (num_stages on Hopper,
    where wgmma reads its operands from shared memory while the next copies land; one fewer before), and
    the copies always num_stages - 1 tiles ahead (tests/test_diagrams.py checks both against the compiler)."""
    per_buffer = 2 * config["BLOCK_K"] * (config["BLOCK_M"] + config["BLOCK_N"])
    return triton_search.shared_bytes(config, capability) // per_buffer, config["num_stages"] - 1


def matmul_stage_ring(backend: str = "cuda", tiles: int = 8):
    """Rung 5: which k-tile each shared-memory buffer holds at each step of the K loop, and whether the math
    reads it or its copy is still in flight. CUDA: kernels/cuda/matmul.py PIPELINED and TWO_STAGES (5_pipelined.cu's
    loop); Triton: rung 5's tiles and num_stages (LAUNCH), the ring its compiler writes on sm_90 and on sm_80."""
    if backend == "cuda":
        stages, bk = cm.PIPELINED["STAGES"], cm.PIPELINED["BK"]
        return _rings([([f"buffer {b}" for b in range(stages)], cp_async_ring(stages, tiles),
                        f"sm_80+: a ring of STAGES = {stages} buffers, cp.async {stages - 1} k-tiles ahead"),
                       ([f"buffer {b}" for b in range(cm.TWO_STAGES["STAGES"])] + ["registers"],
                        register_double_buffer(tiles), "sm_75 (no cp.async): two buffers, the next tile waits in registers")],
                      f"CUDA rung 5: the buffers at each step t of the K loop (k3: A's and B's 4th slice of BK = {bk})")
    c = dict(tm.GPU_TILES["5_pipelined"], **tm.LAUNCH["5_pipelined"])
    hopper, ampere = triton_ring(c, (9, 0)), triton_ring(c, (8, 0))
    return _rings([([f"buffer {b}" for b in range(hopper[0])], cp_async_ring(hopper[0], tiles),
                    f"sm_90 (wgmma reads shared memory): {hopper[0]} buffers, copies {hopper[1]} k-tiles ahead"),
                   ([f"buffer {b}" for b in range(ampere[0])] + ["registers"], register_operand_ring(ampere[0], tiles),
                    f"sm_80 (mma.sync reads registers): {ampere[0]} buffers, copies {ampere[1]} k-tiles ahead; "
                    f"a buffer is refilled once its tile is in registers")],
                  f"Triton rung 5, num_stages = {c['num_stages']}: the compiler's ring of cp.async buffers "
                  f"(k3: the 4th BLOCK_K = {c['BLOCK_K']} slice)")


# ------------------------------------------------------------- rungs 6 and 9 (02b): the order tiles are handed out

def _sm_count() -> int:
    """SMs of this GPU, else of the H100 the lessons were recorded on."""
    gpu = hardware.detect()
    return gpu.sm_count if gpu else hardware.datasheet_for("H100").sm_count


def tile_order(tiles_m: int, tiles_n: int, group_m: int) -> list[tuple[int, int]]:
    """(tile row, tile column) of each tile number, by Triton's own `tile_coords` (its Python body): group_m = 1
    is row-major."""
    coords = tm.tile_coords.fn
    return [coords(t, tiles_m, tiles_n, 1, 1, group_m) for t in range(tiles_m * tiles_n)]


def _order_panel(ax, tiles_m: int, tiles_n: int, group_m: int, in_flight: int, color: str, walk: int | None,
                 bm: int, bn: int, line: bool = True, outlines: bool = True, who: str = ""):
    """One order's panel; `line`: the order drawn through the tiles in flight, `outlines`: the walked tiles boxed,
    `who`: the rung that takes tiles in this order, named in the title."""
    order = tile_order(tiles_m, tiles_n, group_m)
    w = bn / bm   # a tile's width in tile heights: C keeps its shape
    cells = _fill((tiles_m, tiles_n))
    for r, c in order[:in_flight]:
        cells[r, c] = _shade(color, 0.55)
    a_rows = {r for r, _ in order[:in_flight]}
    b_cols = {c for _, c in order[:in_flight]}
    _cells(ax, cells, w=w, grid="white", lw=0.5)
    strip_a, strip_b = _fill((tiles_m, 1)), _fill((1, tiles_n))
    strip_a[sorted(a_rows), 0] = MEMORY
    strip_b[0, sorted(b_cols)] = MEMORY
    _cells(ax, strip_a, -1.6, 0, grid="white")
    _cells(ax, strip_b, 0, -1.6, w=w, grid="white")
    ax.text(-1.1, tiles_m + 0.3, "A", ha="center", va="top", fontsize=10, fontweight="bold")
    ax.text(tiles_n * w + 0.3, -1.1, "B", ha="left", va="center", fontsize=10, fontweight="bold")
    if line:
        path = np.array(order[:in_flight], dtype=float) + 0.5
        ax.plot(path[:, 1] * w, path[:, 0], color="k", lw=0.6, alpha=0.6, zorder=3)
    if walk is not None:  # the persistent walk of program 0: tiles 0, P, 2P, ...
        for i, (r, c) in enumerate(order[::walk]):
            if outlines:
                _box(ax, c * w, r, w, 1, "k", lw=1.5, z=4)
            ax.text((c + 0.5) * w, r + 0.5, str(i + 1), ha="center", va="center", fontsize=8, fontweight="bold",
                    zorder=5, bbox=dict(facecolor="white", edgecolor="none", pad=0.5))
    _bare(ax, -1.8, tiles_n * w + 1.4, -1.8, tiles_m + 1.4)
    name = (who + ", " if who else "") + ("row-major" if group_m == 1 else f"GROUP_M = {group_m}")
    ax.set_title(f"{name}: the first {in_flight} tiles read {len(a_rows)}×{bm} rows of A\n"
                 f"+ {len(b_cols)}×{bn} columns of B = {len(a_rows) * bm + len(b_cols) * bn} elements per k", fontsize=10)


PERSISTENT_RUNG = "matmul/9_persistent.cu"


def matmul_tile_order(backend: str = "triton", shape: tuple[int, int, int] = (4096, 4096, 4096),
                      rung: str | None = None):
    """Rung 6: the order C's tiles are handed out, row-major vs grouped, with the tiles in flight at once and
    the A rows and B columns they read. Triton: GROUP_M by `group_rows` on a persistent grid of `programs`
    (one program's walk numbered); CUDA: 6_autotuned.cu's GROUP_M, one block per tile, one per SM at a time.
    CUDA rung="9_persistent": 9_persistent.cu's BM x BN tiles, the launcher's GROUP_M (kernels/cuda/matmul.py
    PERSISTENT, passed as -D over the .cu's default) on min(SMs, tiles) persistent blocks, block 0's tiles
    (blockIdx.x, + gridDim.x, ...) numbered."""
    M, N, _ = shape
    sms = _sm_count()
    if backend == "triton":
        bm, bn = tm.AUTOTUNED_EXAMPLE["BLOCK_M"], tm.AUTOTUNED_EXAMPLE["BLOCK_N"]
        tiles_m, tiles_n = _cdiv(M, bm), _cdiv(N, bn)
        in_flight = tm.programs(tiles_m * tiles_n, sms)
        group_m, walk, color = tm.group_rows(M, N, bm, bn, sms), in_flight, TRITON
        who = f"Triton rung 6: {in_flight} persistent programs, program 0's tiles numbered"
    elif rung == "9_persistent":
        bm, bn = cu_define(PERSISTENT_RUNG, "BM"), cu_define(PERSISTENT_RUNG, "BN")
        tiles_m, tiles_n = _cdiv(M, bm), _cdiv(N, bn)
        in_flight = min(sms, tiles_m * tiles_n)   # kernels/cuda/matmul.py persistent_grid, with this drawing's BM x BN
        group_m, walk, color = cm.PERSISTENT["GROUP_M"], in_flight, CUDA
        who = (f"CUDA rung 8: one block per tile, {in_flight} running (one per SM); rung 9: {in_flight} persistent "
               f"blocks, block 0's tiles numbered")
    elif rung in (None, "6_autotuned"):
        c = cm.default_config(None)
        bm, bn = c["BM"], c["BN"]
        tiles_m, tiles_n = _cdiv(M, bm), _cdiv(N, bn)
        in_flight = min(sms, tiles_m * tiles_n)
        group_m, walk, color = cu_define("matmul/6_autotuned.cu", "GROUP_M"), None, CUDA
        who = f"CUDA rung 6: one block per tile, the first {in_flight} running (one per SM)"
    else:
        raise ValueError(f"no tile-order picture for CUDA rung {rung!r} (6_autotuned or 9_persistent)")
    fig = _figure(11, 1.5 + 5 * (M / N))
    axes = fig.subplots(1, 2)
    bare = rung == "9_persistent"   # 02b: no zigzag over the thin row-major strip, and numbers without outlines
    # 02b's left panel is rung 8, one block per tile in row-major order: no block walks there, so none is numbered
    panels = (("rung 8", 1, None), ("rung 9", group_m, walk)) if bare else (("", 1, walk), ("", group_m, walk))
    for ax, (name, g, walked) in zip(axes, panels):
        _order_panel(ax, tiles_m, tiles_n, g, in_flight, color, walked, bm, bn, line=not (bare and g == 1),
                     outlines=not bare, who=name)
    line = ("right, " if bare else "") + "line: the order tiles are taken"
    fig.suptitle(f"{who}\nC {M}×{N} in {bm}×{bn} tiles; {line}", fontsize=11)
    _key(fig, [("tiles in flight", _shade(color, 0.55)), ("A rows / B columns they read", MEMORY)], y=0.0)
    fig.tight_layout(rect=(0, 0.05, 1, 0.92))
    return fig


# ------------------------------------------------------------- Triton rungs 1-2 and 4: lanes and tl.dot

def triton_lane_elements(block: int, num_warps: int, element_bytes: int = FP16_BYTES) -> int:
    """Consecutive elements one lane loads from a 1-D block of `block` elements: Triton's default layout for an
    aligned, contiguous load gives each lane up to 16 bytes, no more than its share of the block (block /
    threads), at least one; lane l of warp w then holds elements (32w + l)·e .. +e-1 (tests/test_diagrams.py
    checks the compiler's sizePerThread)."""
    return max(1, min(16 // element_bytes, block // (32 * num_warps)))


def _lanes_to_memory(ax, lane_elements: list[np.ndarray], window: int, title: str, color: str):
    """32 lanes on top, `window` fp16 elements of one row of B below (32-byte sectors boxed), a line from each
    lane to every element it loads, and the sectors those loads fetch shaded."""
    sector = SECTOR_BYTES // FP16_BYTES
    lane_w = window / 32
    for lane in range(32):
        _box(ax, lane * lane_w + 0.1 * lane_w, 0, 0.8 * lane_w, 1, _shade(color, 0.55 if lane % 2 else 1.0),
             fill=True, lw=0)
    mem = _fill((1, window))
    touched = sorted({int(e) for es in lane_elements for e in es})
    for s in _sectors(FP16_BYTES * np.array(touched)):
        mem[0, s * sector: (s + 1) * sector] = _shade(color, 0.3)
    mem[0, [e for e in touched if e < window]] = color
    _cells(ax, mem, 0, 4, 1, 1, grid=None)
    ax.vlines(np.arange(0, window + 1, sector), 4, 5, color="k", lw=0.8, zorder=2)
    ax.hlines([4, 5], 0, window, color="k", lw=0.8, zorder=2)
    for lane, es in enumerate(lane_elements):
        for e in es:
            ax.plot([(lane + 0.5) * lane_w, e + 0.5], [1, 4], color=color, lw=0.5, alpha=0.7, zorder=1)
    n = len(_sectors(FP16_BYTES * np.array(touched)))
    ax.text(-0.01 * window, 0.5, "lanes 0–31", ha="right", va="center", fontsize=9)
    ax.text(-0.01 * window, 4.5, "B, row k", ha="right", va="center", fontsize=9)
    _bare(ax, -0.12 * window, window + 0.01 * window, -0.4, 5.3)
    ax.set_aspect("auto")
    ax.set_title(f"{title}: {len(touched) * FP16_BYTES} useful bytes, {_count(n, 'sector')} "
                 f"({n * SECTOR_BYTES} B) fetched", fontsize=10, loc="left")


def matmul_triton_lanes(rung: str = "2_coalesced"):
    """Triton rungs 1-2 (kernels/triton/matmul.py LAUNCH and GPU_TILES): which addresses of B the lanes of one
    warp load at one k step. Rung 1: a program per C element on num_warps = 1 warp, all 32 lanes on one scalar;
    neighbouring programs (neighbouring columns) are other warps. Rung 2: a program per strip of BLOCK_N columns,
    the strip spread over num_warps warps, each lane a few neighbouring elements."""
    warps = tm.LAUNCH[rung]["num_warps"]
    if rung == "1_naive":
        programs = 4
        fig = _figure(11, 1.0 + 1.6 * programs)
        axes = fig.subplots(programs, 1)
        for pid, ax in enumerate(axes):
            _lanes_to_memory(ax, [np.array([pid])] * 32, 3 * SECTOR_BYTES // FP16_BYTES,
                             f"program {pid} (C[0, {pid}], {_count(warps, 'warp')}), its one load of B[k, {pid}]", TRITON)
        fig.suptitle(f"Triton rung 1: a program per element of C, {_count(warps, 'warp')} each; every lane of "
                     f"the warp loads the same 2 bytes.\nPrograms 0–{programs - 1} (neighbours in C) are "
                     f"{programs} warps and {programs} loads, each fetching a whole sector", fontsize=11)
        fig.tight_layout(rect=(0, 0, 1, 0.98))
        return fig
    block = tm.GPU_TILES[rung]["BLOCK_N"]
    per_lane = triton_lane_elements(block, warps)
    span = 32 * per_lane                                   # elements one warp covers
    shown = min(warps, 2)
    fig = _figure(11, 1.2 + 1.9 * shown)
    axes = fig.subplots(shown, 1, squeeze=False)[:, 0]
    for w, ax in enumerate(axes):
        lanes = [w * span + l * per_lane + np.arange(per_lane) for l in range(32)]
        lanes = [es[es < block] for es in lanes]
        _lanes_to_memory(ax, [es - 0 for es in lanes], min(block, shown * span), f"warp {w}, lanes 0–31, "
                         f"{per_lane} neighbouring elements each ({per_lane * FP16_BYTES} B)", TRITON)
    rounds = _cdiv(block, 32 * warps * per_lane)
    fig.suptitle(f"Triton rung 2: a program per strip of BLOCK_N = {block} columns on {_count(warps, 'warp')}: "
                 f"one vector load of B's row k\n= {warps} warps × 32 lanes × {per_lane} elements"
                 + (f" × {rounds} rounds" if rounds > 1 else "") + f"; warp w covers elements {span}w … {span}w + "
                 f"{span - 1}" + (f"\ndrawn: warps 0–{shown - 1}, the strip's first {shown * span} elements"
                                  if shown < warps else ""), fontsize=11)
    fig.tight_layout(rect=(0, 0, 1, 0.97))
    return fig


def triton_mma(block_m: int, block_n: int, num_warps: int, capability: tuple[int, int]) -> dict:
    """The tensor-core instruction Triton's tl.dot becomes for a BLOCK_M x BLOCK_N tile on `num_warps` warps,
    and how the warps split C: on sm_90 a warpgroup's wgmma m64nNk16 (N = BLOCK_N up to 256), each warp 16
    rows of its 64; before, mma.sync m16n8k16, warps placed by Triton's rule for one dot (double the warps
    along M while M has more 16-row pieces per warp than N has 16-column ones). Checked against the compiler's
    layout in tests/test_diagrams.py."""
    if capability >= (9, 0) and num_warps % 4 == 0:
        along_m = min(num_warps, max(1, block_m // 16))
        return dict(name="wgmma", shape=(64, min(block_n, 256), 16), warps=(along_m, num_warps // along_m))
    warps = [1, 1]
    while warps[0] * warps[1] < num_warps:
        if block_m // 16 // warps[0] >= block_n // 16 // warps[1] and warps[0] < block_m // 16:
            warps[0] *= 2
        else:
            warps[1] *= 2
    return dict(name="mma.sync", shape=(16, 8, 16), warps=tuple(warps))


def _dot_panel(ax, bm: int, bn: int, bk: int, mma: dict, color: str):
    """A (bm x bk) left of C (bm x bn), B (bk x bn) above it. C in the pieces one warp computes per instruction
    (16 x 8 for mma.sync, 16 x N for a warp's quarter of a wgmma), the pieces of warp 0 shaded: the warps'
    pattern repeats every WARPS_M x 16 rows and WARPS_N x 8 columns. The first instruction's A, B, C filled."""
    im, in_, ik = mma["shape"]
    wm, wn = mma["warps"]
    pm, pn = 16, in_                                       # one warp's piece of one instruction
    gap = 0.15 * max(bm, bn)
    a0, b0, c0 = (0, bk + gap), (bk + gap, 0), (bk + gap, bk + gap)
    light = _shade(color, 0.2)
    _cells(ax, _fill((bm // im, bk // ik), light), *a0, ik, im, grid="white", lw=1)
    _cells(ax, _fill((bk // ik, bn // in_), light), *b0, in_, ik, grid="white", lw=1)
    pieces = _fill((bm // pm, bn // pn), light)
    pieces[::wm, ::wn] = _shade(color, 0.5)
    _cells(ax, pieces, *c0, pn, pm, grid="white", lw=0.5)
    _box(ax, a0[0], a0[1], ik, im, color, fill=True)
    _box(ax, b0[0], b0[1], in_, ik, color, fill=True)
    _box(ax, c0[0], c0[1], in_, im, "k", lw=1.5)
    ax.text(a0[0] + bk / 2, a0[1] + bm + 0.03 * gap, f"A {bm}×{bk}", ha="center", va="top", fontsize=9)
    ax.text(b0[0] - 0.05 * gap, b0[1] + bk / 2, f"B {bk}×{bn}", ha="right", va="center", fontsize=9)
    ax.text(c0[0] + bn / 2, c0[1] + bm + 0.03 * gap, f"C {bm}×{bn}: warps {wm}×{wn}", ha="center", va="top",
            fontsize=9)
    _bare(ax, -0.05 * gap, bk + gap + bn + 0.05 * gap, -0.1 * gap, bk + gap + bm + 0.5 * gap)


def matmul_triton_dot(rung: str = "4_tensor_core"):
    """Triton rung 4 (GPU_TILES and LAUNCH of the rung): one tl.dot of a BLOCK_M x BLOCK_K tile of A by a
    BLOCK_K x BLOCK_N tile of B, as the tensor-core instructions it becomes: on sm_90 wgmma (a warpgroup, from
    shared memory), on sm_80 mma.sync (a warp, from registers); one instruction's pieces filled."""
    t, warps = tm.GPU_TILES[rung], tm.LAUNCH[rung]["num_warps"]
    bm, bn, bk = t["BLOCK_M"], t["BLOCK_N"], t["BLOCK_K"]
    fig = _figure(12, 6.6)
    for k, (capability, where) in enumerate((((9, 0), "sm_90"), ((8, 0), "sm_80"))):
        mma = triton_mma(bm, bn, warps, capability)
        im, in_, ik = mma["shape"]
        count = (bm // im) * (bn // in_) * (bk // ik)
        ax = fig.add_axes((0.02 + 0.5 * k, 0.02, 0.46, 0.78))
        _dot_panel(ax, bm, bn, bk, mma, TENSOR_CORES)
        unit = "a warpgroup (4 warps)" if mma["name"] == "wgmma" else "a warp"
        operands = "A, B from shared memory" if mma["name"] == "wgmma" else "A, B fragments in registers"
        ax.set_title(f"{where}: {count} × {mma['name']} m{im}n{in_}k{ik} per tl.dot,\neach by {unit}; "
                     f"{operands}; C in registers", fontsize=10)
    fig.suptitle(f"Triton rung 4: one tl.dot of A's {bm}×{bk} tile by B's {bk}×{bn} on {warps} warps "
                 f"\n(filled: one instruction's A and B, C outlined; shaded: the parts of C warp 0 holds)", fontsize=11)
    return fig
