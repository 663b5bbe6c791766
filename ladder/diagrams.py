"""A picture per rung idea: which elements a warp touches, what sits in shared memory or registers, the
order tiles run in, the ring of pipeline stages, the blocks of attention's score matrix.

Every diagram is drawn from the rung's own constants (kernels/matmul.py, kernels/attention.py,
kernels/triton/*.py) or, where a number lives only in a .cu file, from that file (`cu_define`,
`cu_expression`), so a picture stays true when a constant changes. Each function returns a Figure made
without pyplot (a lesson cell shows it once; tests draw it on CPU and run ladder.figcheck on it).

Colours follow the roofline: a backend's colour (roofline.BACKEND_COLORS) for what its threads touch, the
tensor-core roof's red for tensor-core work, the fp32 roof's orange for CUDA-core registers.
"""
from __future__ import annotations

import re

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.colors import to_hex, to_rgba
from matplotlib.figure import Figure
from matplotlib.patches import FancyArrowPatch, Rectangle

from kernels.triton.attention import causal_key_range
from ladder import cuda, hardware, roofline

SECTOR_BYTES = 32     # the unit a load fetches from L2/DRAM
FP16_BYTES = 2
CUDA = roofline.BACKEND_COLORS["cuda"]
TRITON = roofline.BACKEND_COLORS["triton"]
TENSOR_CORES = roofline.ROOF_COLORS["fp16_tc_TFLOPs"]
CUDA_CORES = roofline.ROOF_COLORS["fp32_TFLOPs"]
MEMORY = "0.55"       # DRAM and L2: grey, as the torch anchors
LIGHT = "0.93"        # cells nobody touches
IN_FLIGHT = "#c8c8c8"  # a copy on its way from memory
VECTOR_BYTES = {"uint4": 16, "float4": 16, "int4": 16, "uint2": 8, "float2": 8, "int2": 8,
                "unsigned": 4, "float": 4, "int": 4, "__half2": 4, "half2": 4, "__half": 2, "half": 2}


# ------------------------------------------------------------- constants read from the .cu files

def cu_define(path: str, name: str) -> int:
    """The integer a .cu file (includes inlined) #defines `name` as, e.g. cu_define("matmul/3_smem_tiled.cu",
    "TILE") -> 32; the first definition wins, as in the preprocessor's #ifndef defaults."""
    m = re.search(rf"^\s*#\s*define\s+{name}\s+(\d+)\b", cuda.source(path), re.M)
    if not m:
        raise KeyError(f"{path} does not #define {name} as a number")
    return int(m.group(1))


def cu_expression(path: str, variable: str) -> str:
    """The right-hand side of `const int <variable> = ...;` in a .cu file."""
    m = re.search(rf"\bconst\s+int\s+{variable}\s*=\s*([^;,]+)[;,]", cuda.source(path))
    if not m:
        raise KeyError(f"{path} has no `const int {variable} = ...`")
    return m.group(1).strip()


def cu_vector_bytes(path: str) -> int:
    """Bytes per load of the type a .cu file reinterprets its input `a` as (uint4 -> 16)."""
    m = re.search(r"reinterpret_cast<const\s+(\w+)\s*\*>\s*\(\s*a\s*\)", cuda.source(path))
    return VECTOR_BYTES[m.group(1)] if m else FP16_BYTES


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


# ------------------------------------------------------------- drawing helpers

def _figure(width: float, height: float) -> Figure:
    fig = Figure(figsize=(width, height), dpi=100)
    FigureCanvasAgg(fig)
    return fig


def _bare(ax, x0: float, x1: float, y0: float, y1: float):
    """An axes without frame or ticks, in cell units with y growing downwards (row 0 on top)."""
    ax.set_xlim(x0, x1)
    ax.set_ylim(y1, y0)
    ax.set_aspect("equal")
    ax.set_xticks([])
    ax.set_yticks([])  # an axes turned off keeps its tick labels as texts (ladder.figcheck would see them)
    ax.set_axis_off()
    return ax


def _cells(ax, colors: np.ndarray, x0: float = 0, y0: float = 0, w: float = 1, h: float = 1,
           grid: str | None = "white", lw: float = 0.5):
    """A rows x cols array of colours as cells of w x h from (x0, y0), with grid lines between them."""
    rows, cols = colors.shape[:2]
    rgba = np.array([[to_rgba(c) for c in row] for row in colors]) if colors.dtype == object else colors
    ax.imshow(rgba, extent=(x0, x0 + cols * w, y0 + rows * h, y0), interpolation="nearest", zorder=1)
    if grid:
        ax.vlines(x0 + w * np.arange(cols + 1), y0, y0 + rows * h, color=grid, lw=lw, zorder=2)
        ax.hlines(y0 + h * np.arange(rows + 1), x0, x0 + cols * w, color=grid, lw=lw, zorder=2)


def _fill(shape: tuple[int, int], color: str = LIGHT) -> np.ndarray:
    out = np.empty(shape, dtype=object)
    out[...] = color
    return out


def _box(ax, x: float, y: float, w: float, h: float, color: str, fill: bool = False, lw: float = 1.5,
         alpha: float = 1.0, z: int = 3, **kw):
    ax.add_patch(Rectangle((x, y), w, h, facecolor=color if fill else "none", edgecolor=color, lw=lw,
                           alpha=alpha, zorder=z, **kw))


def _arrow(ax, start, end, color: str = "k"):
    ax.add_patch(FancyArrowPatch(start, end, arrowstyle="-|>", mutation_scale=12, color=color, lw=1.2, zorder=4))


def _shade(color: str, amount: float) -> str:
    """`color` mixed with white: 0 is white, 1 the colour itself."""
    return to_hex(np.array(to_rgba(color)[:3]) * amount + (1 - amount))


def _key(fig, entries: list[tuple[str, object]], y: float = 0.02):
    """A legend of coloured squares along the bottom of the figure, outside every axes."""
    handles = [Rectangle((0, 0), 1, 1, facecolor=color, edgecolor="0.4", lw=0.5) for _, color in entries]
    fig.legend(handles, [label for label, _ in entries], loc="lower center", bbox_to_anchor=(0.5, y),
               ncol=len(entries), frameon=False, fontsize=9, handlelength=1.2)


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'s' * (n != 1)}"


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _sectors(byte_addresses) -> set[int]:
    return {int(a) // SECTOR_BYTES for a in byte_addresses}


# ------------------------------------------------------------- vector add

def vector_add_loads():
    """Vector add rungs 1-2: the elements of A that warp 0 touches with each of its load instructions, in
    rows of THREADS elements (one row per load of the scalar rung), over A's 32-byte sectors."""
    from kernels import vector_add as va
    threads, loads = va.THREADS, va.SCALAR_ELEMS_PER_THREAD
    per_vector = cu_vector_bytes("vector_add/2_vectorized.cu") // FP16_BYTES
    width = max(threads, 32 * per_vector)
    sector = SECTOR_BYTES // FP16_BYTES
    rungs = [("1_scalar: 2-byte loads", [k * threads + np.arange(32) for k in range(loads)], 1),
             (f"2_vectorized: {per_vector * FP16_BYTES}-byte loads", [np.arange(32 * per_vector)], per_vector)]
    fig = _figure(11, 1.2 + 0.42 * (loads + 1) + 1.0)
    axes = fig.subplots(2, 1, height_ratios=[loads, 1])
    for ax, (name, instructions, per_lane) in zip(axes, rungs):
        rows = _cdiv(int(max(i.max() for i in instructions)) + 1, width)
        colors = _fill((rows, width))
        for elements in instructions:
            lane = (elements - elements[0]) // per_lane
            for e, l in zip(elements, lane):
                colors[e // width, e % width] = CUDA if l % 2 == 0 else _shade(CUDA, 0.55)
        _cells(ax, colors, w=1, h=8, grid=None)
        ax.vlines(np.arange(0, width + 1, sector), 0, rows * 8, color="0.6", lw=0.5, zorder=2)
        ax.set_xlim(0, width)
        ax.set_ylim(rows * 8, 0)
        ax.set_aspect("auto")
        for k, elements in enumerate(instructions):
            for s in sorted(_sectors(FP16_BYTES * elements)):  # sectors this instruction fetches
                x = s * sector - (elements[0] // width) * width
                _box(ax, x, (elements[0] // width) * 8, sector, 8, "k", lw=1.2)
        n_sectors = len(_sectors(FP16_BYTES * instructions[0]))
        ax.set_yticks([8 * r + 4 for r in range(rows)],
                      [f"load {k + 1}" for k in range(rows)] if len(instructions) > 1 else ["load 1"])
        ax.tick_params(length=0)
        ax.set_xticks(np.arange(0, width + 1, 4 * sector), [f"{FP16_BYTES * x} B" for x in
                                                             np.arange(0, width + 1, 4 * sector)], fontsize=8)
        for side in ax.spines.values():
            side.set_visible(False)
        ax.set_title(f"{name}: one warp load = 32 lanes × {per_lane * FP16_BYTES} B = "
                     f"{32 * per_lane * FP16_BYTES} B, {n_sectors} sectors"
                     + (f"; {len(instructions)} loads per thread, {threads} elements apart" if len(instructions) > 1
                        else ""), fontsize=10, loc="left")
    axes[-1].set_xlabel(f"offset from the block's first element of A (rows of {width} elements; "
                        f"boxes: the 32-byte sectors a load fetches)", fontsize=9)
    fig.suptitle("Vector add: what warp 0 loads (lanes in alternating shades)", fontsize=12, x=0.01, ha="left")
    fig.tight_layout()
    return fig


# ------------------------------------------------------------- matmul: CUDA rungs 1-3b

MATMUL_WARP_RUNGS = ("1_naive", "2_coalesced")


def matmul_warp_sectors(*rungs: str, K: int = 4096, N: int = 4096):
    """Matmul rungs 1-2: the elements of A, B and C that warp 0 touches in one load (k = 0) and the store,
    read from the rung's own `row` / `col` expressions, with the 32-byte sectors they fall in."""
    from kernels import matmul as mm
    rungs = rungs or MATMUL_WARP_RUNGS
    block = (mm.SCALAR_TILE, mm.SCALAR_TILE)
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
        from kernels.triton import matmul as tm
        t = tm.GPU_TILES["3_tiled"]
        bm, bn, bk = t["BLOCK_M"], t["BLOCK_N"], t["BLOCK_K"]
        who, color = "Triton rung 3: one program", TRITON
    fig = _figure(7.5, 7.2)
    ax = fig.add_axes((0.02, 0.1, 0.96, 0.8))
    step = 1
    _tile_layout(ax, (4, 4, _cdiv(4 * max(bm, bn), bk)), (bm, bn, bk), (1, 2), step, color)
    fig.suptitle(f"{who} computes a {bm}×{bn} tile of C", fontsize=12)
    fig.text(0.5, 0.035, f"k step {step + 1}: A's {bm}×{bk} and B's {bk}×{bn} tiles (dark) sit in shared memory;\n"
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
    fig.suptitle(f"CUDA rung 3b: thread {tid} keeps a {tm_}×{tn_} block of C in registers", fontsize=12)
    fig.text(0.5, 0.03, f"per k: {tm_} values of A + {tn_} of B from shared memory → {tm_ * tn_} FMAs (orange)",
             ha="center", fontsize=10)
    return fig


# ------------------------------------------------------------- matmul: CUDA rung 4, tensor cores

def mma_shape() -> tuple[int, int, int]:
    """(m, n, k) of the mma.sync instruction tensor_core.cuh issues (sm_80 and newer)."""
    m = re.search(r"mma\.sync\.aligned\.m(\d+)n(\d+)k(\d+)", cuda.source("matmul/tensor_core.cuh"))
    return tuple(int(x) for x in m.groups())


def matmul_warp_tiles():
    """Rung 4 (kernels/matmul.py TENSOR_CORE): the block tile split into WARPS_M x WARPS_N warp tiles, each a
    grid of mma.sync m16n8k16 results, and which lane holds which accumulator of one of them."""
    from kernels import matmul as mm
    c = mm.TENSOR_CORE
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


# ------------------------------------------------------------- matmul: CUDA rung 5, the stage ring

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


def _schedule(ax, rows: list[str], steps: list[dict], title: str):
    colors = {"math": TENSOR_CORES, "copy": IN_FLIGHT}
    cells = _fill((len(rows), len(steps)), "white")
    for t, held in enumerate(steps):
        for who, (tile, state) in held.items():
            cells[rows.index(who), t] = colors[state]
            ax.text(t + 0.5, rows.index(who) + 0.5, f"k{tile}", ha="center", va="center", fontsize=9,
                    color="white" if state == "math" else "k")
    _cells(ax, cells, grid="0.6", lw=0.8)
    ax.set_aspect("auto")
    ax.set_xlim(0, len(steps))
    ax.set_ylim(len(rows), 0)
    ax.set_yticks(np.arange(len(rows)) + 0.5, rows, fontsize=9)
    ax.set_xticks(np.arange(len(steps)) + 0.5, [f"t={t}" for t in range(len(steps))], fontsize=9)
    ax.tick_params(length=0)
    for side in ax.spines.values():
        side.set_visible(False)
    ax.set_title(title, fontsize=10, loc="left")


def matmul_stage_ring(tiles: int = 8):
    """Rung 5 (kernels/matmul.py PIPELINED and TWO_STAGES): which k-tile each shared-memory buffer holds at
    each step of the K loop, and whether the math reads it or its copy is still in flight."""
    from kernels import matmul as mm
    stages, bk = mm.PIPELINED["STAGES"], mm.PIPELINED["BK"]
    fig = _figure(10, 1.6 + 0.45 * (stages + 3) + 0.8)
    top, bottom = fig.subplots(2, 1, height_ratios=[stages, 3])
    _schedule(top, [f"buffer {b}" for b in range(stages)], cp_async_ring(stages, tiles),
              f"sm_80+: a ring of STAGES = {stages} buffers, cp.async {stages - 1} k-tiles ahead")
    _schedule(bottom, [f"buffer {b}" for b in range(mm.TWO_STAGES["STAGES"])] + ["registers"],
              register_double_buffer(tiles), "sm_75 (no cp.async): two buffers, the next tile waits in registers")
    fig.suptitle(f"CUDA rung 5: the buffers at each step t of the K loop (k3: A's and B's 4th slice of BK = {bk})",
                 fontsize=12)
    _key(fig, [("tensor cores compute on it", TENSOR_CORES), ("its copy is in flight", IN_FLIGHT),
               ("free", "white")], y=0.0)
    fig.tight_layout(rect=(0, 0.07, 1, 1))
    return fig


# ------------------------------------------------------------- matmul: rung 6, tile order

def _sm_count() -> int:
    """SMs of this GPU, else of the H100 the lessons were recorded on."""
    gpu = hardware.detect()
    return gpu.sm_count if gpu else hardware.datasheet_for("H100").sm_count


def tile_order(tiles_m: int, tiles_n: int, group_m: int) -> list[tuple[int, int]]:
    """(tile row, tile column) of each tile number, by Triton's own `tile_coords` (its Python body): group_m = 1
    is row-major."""
    from kernels.triton import matmul as tm
    coords = tm.tile_coords.fn
    return [coords(t, tiles_m, tiles_n, 1, 1, group_m) for t in range(tiles_m * tiles_n)]


def _order_panel(ax, tiles_m: int, tiles_n: int, group_m: int, in_flight: int, color: str, walk: int | None,
                 bm: int, bn: int):
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
    path = np.array(order[:in_flight], dtype=float) + 0.5
    ax.plot(path[:, 1] * w, path[:, 0], color="k", lw=0.6, alpha=0.6, zorder=3)
    if walk is not None:  # the persistent walk of program 0: tiles 0, P, 2P, ...
        for i, (r, c) in enumerate(order[::walk]):
            _box(ax, c * w, r, w, 1, "k", lw=1.5, z=4)
            ax.text((c + 0.5) * w, r + 0.5, str(i + 1), ha="center", va="center", fontsize=8, fontweight="bold",
                    zorder=5, bbox=dict(facecolor="white", edgecolor="none", pad=0.5))
    _bare(ax, -1.8, tiles_n * w + 1.4, -1.8, tiles_m + 1.4)
    name = "row-major" if group_m == 1 else f"GROUP_M = {group_m}"
    ax.set_title(f"{name}: the first {in_flight} tiles read {len(a_rows)}×{bm} rows of A\n"
                 f"+ {len(b_cols)}×{bn} columns of B = {len(a_rows) * bm + len(b_cols) * bn} per K step", fontsize=10)


def matmul_tile_order(backend: str = "triton", shape: tuple[int, int, int] = (4096, 4096, 4096)):
    """Rung 6: the order C's tiles are handed out, row-major vs grouped, with the tiles in flight at once and
    the A rows and B columns they read. Triton: GROUP_M by `group_rows` on a persistent grid of `programs`
    (one program's walk numbered); CUDA: 6_autotuned.cu's GROUP_M, one block per tile, one per SM at a time."""
    from kernels import matmul as mm
    from kernels.triton import matmul as tm
    M, N, _ = shape
    sms = _sm_count()
    if backend == "triton":
        bm, bn = tm.AUTOTUNED_EXAMPLE["BLOCK_M"], tm.AUTOTUNED_EXAMPLE["BLOCK_N"]
        tiles_m, tiles_n = _cdiv(M, bm), _cdiv(N, bn)
        in_flight = tm.programs(tiles_m * tiles_n, sms)
        group_m, walk, color = tm.group_rows(M, N, bm, bn, sms), in_flight, TRITON
        who = f"Triton rung 6: {in_flight} persistent programs, program 0's tiles numbered"
    else:
        c = mm.default_config(None)
        bm, bn = c["BM"], c["BN"]
        tiles_m, tiles_n = _cdiv(M, bm), _cdiv(N, bn)
        in_flight = min(sms, tiles_m * tiles_n)
        group_m, walk, color = cu_define("matmul/6_autotuned.cu", "GROUP_M"), None, CUDA
        who = f"CUDA rung 6: one block per tile, the first {in_flight} running (one per SM)"
    fig = _figure(11, 1.5 + 5 * (M / N))
    axes = fig.subplots(1, 2)
    for ax, g in zip(axes, (1, group_m)):
        _order_panel(ax, tiles_m, tiles_n, g, in_flight, color, walk, bm, bn)
    fig.suptitle(f"{who}\nC {M}×{N} in {bm}×{bn} tiles; line: the order tiles are taken", fontsize=11)
    _key(fig, [("tiles in flight", _shade(color, 0.55)), ("A rows / B columns they read", MEMORY)], y=0.0)
    fig.tight_layout(rect=(0, 0.05, 1, 0.92))
    return fig


# ------------------------------------------------------------- attention

def attention_scores_in_dram():
    """Attention rungs 1-2: Q·Kᵀ written out as S×S fp32 scores in DRAM, read back by the softmax and P·V,
    drawn to scale against Q, K, V and O (S×D each) at the lesson's first headline shape."""
    from kernels import attention as at
    from kernels.triton import attention as ta
    B, H, S, D, _ = at.HEADLINE[0]
    fig = _figure(10, 5.6)
    ax = fig.add_axes((0.02, 0.02, 0.96, 0.84))
    gap = 0.08 * S
    s0 = (gap + D, gap + D)
    inputs = {"Q": ((0, s0[1]), D, S), "Kᵀ": ((s0[0], 0), S, D), "V": ((s0[0] + S + gap, s0[1]), D, S),
              "O": ((s0[0] + S + 2 * gap + D, s0[1]), D, S)}
    for name, ((x, y), w, h) in inputs.items():
        _box(ax, x, y, w, h, TRITON, fill=True)
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
    fig.suptitle(f"Attention rungs 1–2 (B{B} H{H} S{S} D{D}, to scale): the S×S matrix is {S // D}× "
                 f"the size of Q\nQ, K, V, O together: {qkv / 1e9:.2f} GB (fp16)", fontsize=11)
    return fig


def _attention_grid(ax, S: int, block_m: int, block_n: int, colors: np.ndarray):
    """The S×S score matrix in BLOCK_M×BLOCK_N blocks (queries down, keys across), drawn in elements."""
    _cells(ax, colors, w=block_n, h=block_m, grid="white", lw=1)
    ax.text(S / 2, -0.02 * S, f"keys, in blocks of BLOCK_N = {block_n}", ha="center", va="bottom", fontsize=9)
    ax.text(-0.02 * S, S / 2, f"queries, in blocks of BLOCK_M = {block_m}", ha="right", va="center", rotation=90,
            fontsize=9)


def _tiles(rung: str) -> tuple[int, int]:
    from kernels.triton import attention as ta
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
    _attention_grid(ax, S, bm, bn, colors)
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
    ax.text(state, row * bm + bm + 0.02 * S, f"on chip, per query:\nrunning max m, sum ℓ,\nacc (BLOCK_M × D)",
            va="top", fontsize=9)
    _bare(ax, -0.08 * S, S + 0.3 * S, -0.08 * S, S + 0.02 * S)
    fig.suptitle(f"Fused attention (rung {rung.split('_')[0]}): query block {row + 1} sweeps the key blocks "
                 f"1, 2, …; block {step + 1} is on chip now", fontsize=11)
    _key(fig, [("folded into m, ℓ, acc", _shade(TRITON, 0.35)), ("scores on chip now", TRITON),
               ("never stored", LIGHT)], y=0.0)
    return fig


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
    _attention_grid(ax, cols * bn, bm, bn, colors)
    ax.plot([0, S], [0, S], color="k", lw=0.8, ls="--")
    _box(ax, 0, 0, S, S, "k", lw=1)
    _bare(ax, -0.08 * S, cols * bn + 0.02 * S, -0.06 * S, rows * bm + 0.02 * S)
    fig.suptitle(f"Causal attention (rung {rung.split('_')[0]}), S = {S}: {done} of {rows * cols} blocks computed "
                 f"({done / (rows * cols):.0%})\ndashed: the diagonal (a query sees keys up to itself)", fontsize=11)
    _key(fig, [("no mask", TRITON), ("masked (crosses the diagonal)", _shade(TRITON, 0.4)),
               ("skipped: never loaded", "white")], y=0.0)
    return fig


ALL = (vector_add_loads, matmul_warp_sectors, matmul_shared_tile, matmul_register_block, matmul_warp_tiles,
       matmul_stage_ring, matmul_tile_order, attention_scores_in_dram, attention_flash_sweep, attention_causal_skip)
