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

import io
import re

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.colors import to_hex, to_rgba
from matplotlib.figure import Figure
from matplotlib.patches import FancyArrowPatch, Polygon, Rectangle

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

class Diagram(Figure):
    """A Figure that shows itself as a PNG when it is a cell's value: a figure made without pyplot has no inline
    backend behind it, and a notebook would otherwise print only "<Figure size ...>"."""

    def _repr_png_(self) -> bytes:
        buffer = io.BytesIO()
        self.savefig(buffer, format="png", bbox_inches="tight")
        return buffer.getvalue()


def _figure(width: float, height: float) -> Figure:
    fig = Diagram(figsize=(width, height), dpi=100)
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


def register_operand_ring(buffers: int, tiles: int) -> list[dict[str, tuple[int, str]]]:
    """Triton's pipelined K loop before Hopper (mma.sync reads registers): per step t, tile t's operands are in
    registers under the math, and `buffers` copies are in flight, tiles t+1..t+buffers; the newest went into
    the buffer tile t was just read from (t mod buffers)."""
    return [{"registers": (t, "math"), **{f"buffer {j % buffers}": (j, "copy") for j in range(t + 1, min(tiles, t + 1 + buffers))}}
            for t in range(tiles)]


def triton_ring(config: dict, capability: tuple[int, int]) -> tuple[int, int]:
    """(buffers, k-tiles in flight ahead of the math) of Triton's pipeliner for a tile `config` with num_stages,
    on `capability`: the buffers as kernels/triton/matmul.py's shared_bytes counts them (num_stages on Hopper,
    where wgmma reads its operands from shared memory while the next copies land; one fewer before), and
    the copies always num_stages - 1 tiles ahead (tests/test_diagrams.py checks both against the compiler)."""
    from kernels.triton import matmul as tm
    per_buffer = 2 * config["BLOCK_K"] * (config["BLOCK_M"] + config["BLOCK_N"])
    return tm.shared_bytes(config, capability) // per_buffer, config["num_stages"] - 1


def _schedule(ax, rows: list[str], steps: list[dict], title: str, prefix: str = "k"):
    colors = {"math": TENSOR_CORES, "copy": IN_FLIGHT, "store": CUDA}
    cells = _fill((len(rows), len(steps)), "white")
    for t, held in enumerate(steps):
        for who, (tile, state) in held.items():
            cells[rows.index(who), t] = colors[state]
            ax.text(t + 0.5, rows.index(who) + 0.5, f"{prefix}{tile}", ha="center", va="center", fontsize=9,
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


def _rings(panels: list[tuple[list[str], list[dict], str]], title: str, prefix: str = "k",
           math: str = "tensor cores compute on it", key: list | None = None):
    """One schedule panel per (rows, steps, title), stacked, with the colour key below (`key`: its entries, if
    not a ring's)."""
    fig = _figure(10, 1.6 + 0.45 * sum(len(rows) + 2 for rows, _, _ in panels) + 0.4)
    axes = fig.subplots(len(panels), 1, height_ratios=[len(rows) for rows, _, _ in panels], squeeze=False)[:, 0]
    for ax, (rows, steps, panel_title) in zip(axes, panels):
        _schedule(ax, rows, steps, panel_title, prefix)
    fig.suptitle(title, fontsize=12)
    _key(fig, key or [(math, TENSOR_CORES), ("its copy is in flight", IN_FLIGHT), ("free", "white")], y=0.0)
    fig.tight_layout(rect=(0, 0.07, 1, 1))
    return fig


def matmul_stage_ring(backend: str = "cuda", tiles: int = 8):
    """Rung 5: which k-tile each shared-memory buffer holds at each step of the K loop, and whether the math
    reads it or its copy is still in flight. CUDA: kernels/matmul.py PIPELINED and TWO_STAGES (5_pipelined.cu's
    loop); Triton: rung 5's tiles and num_stages (LAUNCH), the ring its compiler writes on sm_90 and on sm_80."""
    if backend == "cuda":
        from kernels import matmul as mm
        stages, bk = mm.PIPELINED["STAGES"], mm.PIPELINED["BK"]
        return _rings([([f"buffer {b}" for b in range(stages)], cp_async_ring(stages, tiles),
                        f"sm_80+: a ring of STAGES = {stages} buffers, cp.async {stages - 1} k-tiles ahead"),
                       ([f"buffer {b}" for b in range(mm.TWO_STAGES["STAGES"])] + ["registers"],
                        register_double_buffer(tiles), "sm_75 (no cp.async): two buffers, the next tile waits in registers")],
                      f"CUDA rung 5: the buffers at each step t of the K loop (k3: A's and B's 4th slice of BK = {bk})")
    from kernels.triton import matmul as tm
    c = dict(tm.GPU_TILES["5_pipelined"], **tm.LAUNCH["5_pipelined"])
    hopper, ampere = triton_ring(c, (9, 0)), triton_ring(c, (8, 0))
    return _rings([([f"buffer {b}" for b in range(hopper[0])], cp_async_ring(hopper[0], tiles),
                    f"sm_90 (wgmma reads shared memory): {hopper[0]} buffers, copies {hopper[1]} k-tiles ahead"),
                   ([f"buffer {b}" for b in range(ampere[0])] + ["registers"], register_operand_ring(ampere[0], tiles),
                    f"sm_80 (mma.sync reads registers): {ampere[0]} buffers, copies {ampere[1]} k-tiles ahead; "
                    f"a buffer is refilled once its tile is in registers")],
                  f"Triton rung 5, num_stages = {c['num_stages']}: the compiler's ring of cp.async buffers "
                  f"(k3: the 4th BLOCK_K = {c['BLOCK_K']} slice)")


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
    _schedule(axes[0], rows, epilogue_schedule(k_tiles, store_steps, False),
              "rung 10: the warpgroup stores C from its registers, and issues no wgmma meanwhile", prefix="")
    _schedule(axes[1], rows, epilogue_schedule(k_tiles, store_steps, True),
              "rung 11: it writes C into shared memory; the TMA stores it while the next tile computes", prefix="")
    fig.suptitle("One consumer warpgroup over two tiles of C (t.k: tile t's k-tile k; Ct: tile t's C)", fontsize=12)
    _key(fig, [("tensor cores compute", TENSOR_CORES), ("the warpgroup writes C", CUDA),
               ("the TMA stores C", IN_FLIGHT), ("idle", "white")], y=0.0)
    fig.tight_layout(rect=(0, 0.09, 1, 1))
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


PERSISTENT_RUNG = "matmul/9_persistent.cu"
CLUSTER_RUNG = "matmul/10_cluster_multicast.cu"


def matmul_tile_order(backend: str = "triton", shape: tuple[int, int, int] = (4096, 4096, 4096),
                      rung: str | None = None):
    """Rung 6: the order C's tiles are handed out, row-major vs grouped, with the tiles in flight at once and
    the A rows and B columns they read. Triton: GROUP_M by `group_rows` on a persistent grid of `programs`
    (one program's walk numbered); CUDA: 6_autotuned.cu's GROUP_M, one block per tile, one per SM at a time.
    CUDA rung="9_persistent": 9_persistent.cu's BM x BN tiles, the launcher's GROUP_M (kernels/matmul.py
    PERSISTENT, passed as -D over the .cu's default) on min(SMs, tiles) persistent blocks, block 0's tiles
    (blockIdx.x, + gridDim.x, ...) numbered."""
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
    elif rung == "9_persistent":
        bm, bn = cu_define(PERSISTENT_RUNG, "BM"), cu_define(PERSISTENT_RUNG, "BN")
        tiles_m, tiles_n = _cdiv(M, bm), _cdiv(N, bn)
        in_flight = min(sms, tiles_m * tiles_n)   # kernels/matmul.py persistent_grid, with this drawing's BM x BN
        group_m, walk, color = mm.PERSISTENT["GROUP_M"], in_flight, CUDA
        who = f"CUDA rung 9: {in_flight} persistent blocks (one per SM), block 0's tiles numbered"
    elif rung in (None, "6_autotuned"):
        c = mm.default_config(None)
        bm, bn = c["BM"], c["BN"]
        tiles_m, tiles_n = _cdiv(M, bm), _cdiv(N, bn)
        in_flight = min(sms, tiles_m * tiles_n)
        group_m, walk, color = cu_define("matmul/6_autotuned.cu", "GROUP_M"), None, CUDA
        who = f"CUDA rung 6: one block per tile, the first {in_flight} running (one per SM)"
    else:
        raise ValueError(f"no tile-order picture for CUDA rung {rung!r} (6_autotuned or 9_persistent)")
    fig = _figure(11, 1.5 + 5 * (M / N))
    axes = fig.subplots(1, 2)
    for ax, g in zip(axes, (1, group_m)):
        _order_panel(ax, tiles_m, tiles_n, g, in_flight, color, walk, bm, bn)
    fig.suptitle(f"{who}\nC {M}×{N} in {bm}×{bn} tiles; line: the order tiles are taken", fontsize=11)
    _key(fig, [("tiles in flight", _shade(color, 0.55)), ("A rows / B columns they read", MEMORY)], y=0.0)
    fig.tight_layout(rect=(0, 0.05, 1, 0.92))
    return fig


# ------------------------------------------------------------- matmul: rung 10, clusters and multicast

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
    memory; every consumer warpgroup of the cluster arrives on empty[s] in every block. With the L2 -> SM bytes
    per k-step and block, rung 9 (9_persistent.cu) against rung 10."""
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
                 f"L2 → SM per k-step and block: rung 9 {_kib(b['rung9_a'])} A + {_kib(b['rung9_b'])} B "
                 f"= {_kib(r9)};  rung 10 {_kib(b['rung10_a'])} A + {_kib(b['rung10_b'])} B = {_kib(r10)} "
                 f"({r10 / r9:.2f}×)", fontsize=11)
    fig.text(0.5, 0.075, "dashed: a consumer warpgroup's arrive on the partner's empty[s] (mapa + remote "
             "mbarrier arrive); a producer refills stage s once all consumers of the cluster are done with it",
             ha="center", fontsize=9)
    _key(fig, [(f"copied by block {r}'s producer", shades[r]) for r in range(cluster)], y=0.0)
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


# ------------------------------------------------------------- matmul: Triton rungs 1-2, 4

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
    from kernels.triton import matmul as tm
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
                 f"{span - 1}", fontsize=11)
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
    from kernels.triton import matmul as tm
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


# ------------------------------------------------------------- matmul: Hopper (CUDA rung 7, TMA, warp specialization)

def wgmma_shape(path: str = "matmul/7_wgmma.cu") -> tuple[int, int, int]:
    """(m, n, k) of the wgmma instruction a .cu file issues: m and k from tensor_core.cuh's instruction text, n its
    width (BN: one wgmma spans the block's columns)."""
    m = re.search(r'wgmma\.mma_async\.sync\.aligned\.m(\d+)n" #N "k(\d+)', cuda.source(path))
    if not m:
        raise KeyError(f"{path} issues no wgmma.mma_async")
    return int(m.group(1)), cu_define(path, "BN"), int(m.group(2))


def matmul_wgmma(path: str = "matmul/7_wgmma.cu"):
    """CUDA rung 7 (7_wgmma.cu's BM, BN, BK, THREADS and its wgmma shape; STAGES from kernels/matmul.py WGMMA):
    the block tile split into warpgroups of 4 warps, each issuing one asynchronous m64nNk16 per k16 step with
    A's and B's slices read from shared memory; each warp holds 16 rows of its group's accumulators."""
    from kernels import matmul as mm
    bm, bn, bk, threads = (cu_define(path, n) for n in ("BM", "BN", "BK", "THREADS"))
    im, in_, ik = wgmma_shape(path)
    groups = threads // 128
    stages = mm.WGMMA["STAGES"]
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
        rows, cols = cu_define(TMA_RUNG, "BM"), cu_define(TMA_RUNG, "BK")
    else:
        from kernels.triton import matmul as tm
        rows, cols = tm.TMA_PERSISTENT["BLOCK_M"], tm.TMA_PERSISTENT["BLOCK_K"]
    row_bytes = cols * element_bytes
    chunks = row_bytes // 16
    nbytes = rows * row_bytes
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
    left.text(1.27 * K, 2.2 * rows - 0.08 * rows, "cp.async.bulk.tensor\n(box at m0, k0)", ha="center", va="bottom",
              fontsize=8)
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
    _box(right, -1.5, bar_y, chunks + 1.6, 1.4, "0.3", lw=1.2)
    right.text((chunks - 1.4) / 2, bar_y + 0.7, f"mbarrier: expects {nbytes} bytes, counts them as they land;\n"
               f"then its phase flips and the waiting warps run", ha="center", va="center", fontsize=9)
    _bare(right, -1.6, chunks + 0.2, -0.2, bar_y + 1.6)
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
             "No __syncthreads: the two mbarriers per stage are the only handshake.", ha="center", fontsize=9)
    fig.tight_layout(rect=(0, 0.16, 1, 1))
    return fig



def matmul_tma_ring(tiles: int = 8):
    """CUDA rung 8 (8_tma_warp_specialized.cu's THREADS and CONSUMERS, kernels/matmul.py TMA_WS's STAGES): the
    producer/consumer ring of warp_specialized_ring with the rung's own stages and warpgroups."""
    from kernels import matmul as mm
    consumers = cu_define(TMA_RUNG, "CONSUMERS")
    producers = cu_define(TMA_RUNG, "THREADS") // 128 - consumers
    return warp_specialized_ring(mm.TMA_WS["STAGES"], producers, consumers, tiles,
                                 "CUDA rung 8: a producer warpgroup and consumer warpgroups around a ring of TMA stages")

# ------------------------------------------------------------- attention: rungs 4-6 (tensor cores)

def _flash_constants(backend: str, rung: str) -> tuple[int, int, int]:
    """(BLOCK_M, BLOCK_N, warps) of a tensor-core attention rung: CUDA kernels/attention.py, Triton GPU_TILES."""
    if backend == "cuda":
        from kernels import attention as at
        c = at.PIPELINED if rung == "5_pipelined" else at.TENSOR_CORE
        return c["BLOCK_M"], c["BLOCK_N"], c["WARPS"]
    from kernels.triton import attention as ta
    t = ta.GPU_TILES[rung]
    return t["BLOCK_M"], t["BLOCK_N"], t["num_warps"]


def attention_tensor_core_tile(backend: str = "cuda", head_dim: int = 64):
    """Attention rung 4 (CUDA: kernels/attention.py TENSOR_CORE and the mma shape of tensor_core.cuh; Triton:
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
    strips = _fill((warps, 1))
    strips[::2, 0] = _shade(color, 0.45)
    strips[1::2, 0] = _shade(color, 0.3)
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
    labels = [((q0[0] + D / 2, q0[1] - 0.03 * gap), f"Q {bm}×{D}\nloaded once, kept on chip", "bottom"),
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
    fig.text(0.5, 0.02, f"dark: what warp 0 holds in registers. {inst}. The scores never leave the registers: the online "
             f"softmax rescales m, ℓ and acc there,\nand P rounded to fp16 is already the A operand of P·V", ha="center",
             fontsize=9)
    return fig


def attention_kv_ring(tiles: int = 6):
    """Attention rung 5 (CUDA: kernels/attention.py PIPELINED's STAGES, 5_pipelined.cu's loop; Triton:
    GPU_TILES["5_pipelined"] num_stages): the K and V blocks in each shared-memory buffer at each step of the key
    loop, computed on or still in flight."""
    from kernels import attention as at
    from kernels.triton import attention as ta
    stages = at.PIPELINED["STAGES"]
    triton_stages = ta.GPU_TILES["5_pipelined"]["num_stages"]
    fig = _rings([([f"buffer {b}" for b in range(stages)], cp_async_ring(stages, tiles),
                   f"CUDA: STAGES = {stages} K and V buffers, cp.async {_count(stages - 1, 'key block')} ahead"),
                  (["buffer 0"], [{"buffer 0": (t // 2, "math" if t % 2 else "copy")} for t in range(tiles)],
                   "rung 4 (and sm_75): one buffer; the tensor cores wait while each block loads")],
                 f"Attention rung 5: the K and V blocks each buffer holds at each step of the key loop\n(kv2: the 3rd block of keys)",
                 prefix="kv", math="tensor cores compute on it")
    fig.text(0.5, 0.085, f"Triton rung 5, num_stages = {triton_stages}: the compiler builds such a ring itself, "
             f"{triton_stages} K and {triton_stages} V buffers on sm_90, {triton_stages - 1} of each on sm_80", ha="center", fontsize=9)
    fig.tight_layout(rect=(0, 0.12, 1, 1))
    return fig


# ------------------------------------------------------------- attention: the Hopper rungs 7-10

WGMMA_TMA_RUNG = "attention/7_wgmma_tma.cu"
WARP_SPECIALIZED_RUNG = "attention/8_warp_specialized.cu"


def attention_wgmma_tma_ring(tiles: int = 6):
    """Attention rung 7 (7_wgmma_tma.cu's CONSUMERS and PRODUCER_THREADS, kernels/attention.py WGMMA_TMA's STAGES at
    D = 128): one block's producer warp and consumer warpgroup around its ring of K/V stages (two or three such
    blocks share an SM, each with a ring of its own)."""
    from kernels import attention as at
    producer_warps = cu_define(WGMMA_TMA_RUNG, "PRODUCER_THREADS") // 32
    return warp_specialized_ring(at.WGMMA_TMA[128]["STAGES"], producer_warps, cu_define(WGMMA_TMA_RUNG, "CONSUMERS"),
                                 tiles, "Attention rung 7, one block: a producer warp keeps its consumer warpgroup's "
                                        "ring of K and V tiles full", producer="producer warp", tile="K/V tile")


def attention_warp_specialized_ring(tiles: int = 6):
    """Attention rung 8 (8_warp_specialized.cu's CONSUMERS, kernels/attention.py WARP_SPECIALIZED's STAGES at
    D = 128): the producer warpgroup and the consumer warpgroups around the ring of K/V stages."""
    from kernels import attention as at
    return warp_specialized_ring(at.WARP_SPECIALIZED[128]["STAGES"], 1, cu_define(WARP_SPECIALIZED_RUNG, "CONSUMERS"),
                                 tiles, "Attention rung 8: a producer warpgroup feeds the consumer warpgroups "
                                        "one ring of K and V tiles", tile="K/V tile")


def pingpong_timeline(tiles: int, pingpong: bool) -> list[dict]:
    """Unit steps of rung 8's two consumer warpgroups, each key tile Q·Kᵀ (S), the softmax (exp) and P·V (PV), one
    unit each, the tensor cores one warpgroup's product at a time. Without turns, the order nothing in rung 8
    rules out: the two in step, both exponentiating while the tensor cores wait (5 units a tile); with rung 9's
    turns, one's softmax under the other's product (4 units a tile). Units, not measured times."""
    steps = []
    for j in range(tiles):
        if pingpong:  # group 0: S, exp, PV, its turn passed; group 1 one unit behind
            steps += [{"tensor cores": ("g0", "math"), "warpgroup 0": (f"S{j}", "math")},
                      {"tensor cores": ("g1", "math"), "warpgroup 0": (f"exp{j}", "store"), "warpgroup 1": (f"S{j}", "math")},
                      {"tensor cores": ("g0", "math"), "warpgroup 0": (f"PV{j}", "math"), "warpgroup 1": (f"exp{j}", "store")},
                      {"tensor cores": ("g1", "math"), "warpgroup 1": (f"PV{j}", "math")}]
        else:
            steps += [{"tensor cores": ("g0", "math"), "warpgroup 0": (f"S{j}", "math")},
                      {"tensor cores": ("g1", "math"), "warpgroup 1": (f"S{j}", "math")},
                      {"warpgroup 0": (f"exp{j}", "store"), "warpgroup 1": (f"exp{j}", "store")},
                      {"tensor cores": ("g0", "math"), "warpgroup 0": (f"PV{j}", "math")},
                      {"tensor cores": ("g1", "math"), "warpgroup 1": (f"PV{j}", "math")}]
    return steps


def attention_pingpong(tiles: int = 2):
    """Rungs 8 and 9's consumer warpgroups over `tiles` key tiles (pingpong_timeline): in step, and taking turns
    at the tensor cores (9_pingpong.cu's named barriers)."""
    rows = ["tensor cores", "warpgroup 0", "warpgroup 1"]
    plain, turns = pingpong_timeline(tiles, False), pingpong_timeline(tiles, True)
    fig = _rings([(rows, plain, f"rung 8, the two in step: {len(plain) // tiles} units a tile, the tensor cores idle "
                                f"while both exponentiate"),
                  (rows, turns, f"rung 9, turns (bar.sync / bar.arrive): {len(turns) // tiles} units a tile, one's "
                                f"softmax under the other's product")],
                 "Two consumer warpgroups, one set of tensor cores (units, not measured times)", prefix="",
                 key=[("a product on the tensor cores", TENSOR_CORES), ("the softmax, on its own threads", CUDA),
                      ("idle or waiting", "white")])
    fig.text(0.5, 0.085, "g0, g1: the warpgroup whose product runs; S: Q·Kᵀ, exp: the softmax (its own threads, "
             "no tensor cores), PV: P·V", ha="center", fontsize=9)
    fig.tight_layout(rect=(0, 0.12, 1, 1))
    return fig


INTRA_OVERLAP_RUNG = "attention/10_intra_overlap.cu"


def consumer_programs(tiles: int, overlap: bool, softmax: float = 2.0, rescale: float = 0.25) -> list[tuple]:
    """One consumer warpgroup's key loop as 7_wgmma_tma.cu writes it, as a list of steps: ("turn", products) issues
    products inside a ping-pong turn (wait_turn ... pass_turn), ("issue", products) outside one, ("wait", product)
    is wgmma_wait, ("exp", t) the softmax of tile t (`softmax` units), ("rescale", t) rung 10's rescale of O by
    alpha (`rescale` units). Rung 9 (overlap False): per tile, S in a turn, its softmax (O rescaled inside it),
    then P·V. Rung 10 (INTRA_OVERLAP): S of tile 0 alone and its softmax; per tile t >= 1, S of t and P·V of t - 1
    in one turn, wait for S alone, the softmax of t, wait for P·V, the rescale; the last P·V in a turn of its own."""
    steps = []
    if not overlap:
        for t in range(tiles):
            steps += [("turn", (f"S{t}",)), ("wait", f"S{t}"), ("exp", t), ("issue", (f"PV{t}",)), ("wait", f"PV{t}")]
        return steps
    steps += [("turn", ("S0",)), ("wait", "S0"), ("exp", 0)]
    for t in range(1, tiles):
        steps += [("turn", (f"S{t}", f"PV{t - 1}")), ("wait", f"S{t}"), ("exp", t), ("wait", f"PV{t - 1}"),
                  ("rescale", t)]
    return steps + [("turn", (f"PV{tiles - 1}",)), ("wait", f"PV{tiles - 1}")]


def play_consumers(programs: list[list[tuple]], softmax: float = 2.0, rescale: float = 0.25) -> list[tuple]:
    """Play consumer warpgroups' programs (consumer_programs) against one set of tensor cores: each product one
    unit, run in the order issued; turns strictly alternate, warpgroup 0 first (9_pingpong.cu's named barriers);
    whichever warpgroup can act soonest acts first. Returns boxes (row, start, end, label, kind): row "tensor
    cores" or "warpgroup g", kind "product" (on a warpgroup's row: its own product running while it waits for
    it), "softmax" or "rescale". Units, not measured times."""
    pc, now, done, boxes = [0] * len(programs), [0.0] * len(programs), {}, []
    started: dict[tuple[int, str], float] = {}
    tc_free, turn, turn_at = 0.0, 0, 0.0

    def ready(g: int) -> float:
        kind, arg = programs[g][pc[g]]
        if kind == "turn":
            return max(now[g], turn_at) if turn == g else float("inf")
        return max(now[g], done[g, arg]) if kind == "wait" else now[g]

    while any(pc[g] < len(programs[g]) for g in range(len(programs))):
        g = min((g for g in range(len(programs)) if pc[g] < len(programs[g])), key=lambda g: (ready(g), g))
        at, (kind, arg) = ready(g), programs[g][pc[g]]
        if kind in ("turn", "issue"):
            for product in arg:
                start = max(at, tc_free)
                tc_free = done[g, product] = start + 1.0
                started[g, product] = start
                boxes.append(("tensor cores", start, tc_free, f"g{g} {product}", "product"))
            if kind == "turn":
                turn, turn_at = (g + 1) % len(programs), at
        elif kind == "wait":
            if done[g, arg] > now[g]:
                boxes.append((f"warpgroup {g}", max(now[g], started[g, arg]), done[g, arg], arg, "product"))
        else:
            length = softmax if kind == "exp" else rescale
            boxes.append((f"warpgroup {g}", at, at + length, f"exp{arg}" if kind == "exp" else "",
                          "softmax" if kind == "exp" else kind))
            at += length
        now[g], pc[g] = at, pc[g] + 1
    return boxes


def _timeline(ax, boxes: list[tuple], rows: list[str], end: float, title: str):
    colors = {"product": TENSOR_CORES, "softmax": CUDA, "rescale": _shade(CUDA, 0.45), "idle": "0.92"}
    for row, start, stop, label, kind in boxes:
        y = rows.index(row)
        ax.add_patch(Rectangle((start, y + 0.1), stop - start, 0.8, facecolor=colors[kind], edgecolor="white",
                               lw=1.0, zorder=2))
        if label:
            ax.text((start + stop) / 2, y + 0.5, label, ha="center", va="center", fontsize=8,
                    color="white" if kind == "product" else "k", zorder=3)
    ax.vlines(np.arange(int(np.ceil(end)) + 1), -0.05, len(rows) + 0.05, color="0.85", lw=0.6, zorder=1)
    ax.set_xlim(0, np.ceil(end))
    ax.set_ylim(len(rows), 0)
    ax.set_yticks(np.arange(len(rows)) + 0.5, rows, fontsize=9)
    ax.set_xticks(np.arange(int(np.ceil(end)) + 1), [str(u) for u in range(int(np.ceil(end)) + 1)], fontsize=8)
    ax.tick_params(length=0)
    for side in ax.spines.values():
        side.set_visible(False)
    ax.set_title(title, fontsize=10, loc="left")


def tile_period(boxes: list[tuple]) -> float:
    """Units between warpgroup 0's last two Q·Kᵀ on the tensor cores (play_consumers' boxes): how often a key tile
    starts once the loop runs (needs 3 tiles or more: the first tile's prologue differs)."""
    starts = sorted(start for row, start, _, label, _ in boxes if row == "tensor cores" and label.startswith("g0 S"))
    return starts[-1] - starts[-2]


def attention_intra_overlap(tiles: int = 3, softmax: float = 2.5, rescale: float = 0.25):
    """Rungs 9 and 10's consumer warpgroups (10_intra_overlap.cu's CONSUMERS) over `tiles` key tiles, played by
    play_consumers from the loops consumer_programs writes down: each product one unit, a softmax `softmax`
    units, rung 10's rescale `rescale` (units, not measured times). With the default, a softmax longer than the
    other warpgroup's two products: rung 9's tensor cores wait for it, rung 10's do not."""
    consumers = cu_define(INTRA_OVERLAP_RUNG, "CONSUMERS")
    rows = ["tensor cores"] + [f"warpgroup {g}" for g in range(consumers)]
    played = {overlap: play_consumers([consumer_programs(tiles, overlap, softmax, rescale)] * consumers, softmax,
                                      rescale) for overlap in (False, True)}
    end = max(stop for boxes in played.values() for _, _, stop, _, _ in boxes)
    fig = _figure(12, 1.4 + 0.5 * 2 * (len(rows) + 1.5))
    axes = fig.subplots(2, 1)
    for ax, overlap in zip(axes, (False, True)):
        period = tile_period(played[overlap])
        what = ("rung 9: S, softmax, P·V in turn, the softmax under the other warpgroup's products only"
                if not overlap else "rung 10: S of tile t and P·V of t−1 in one turn, the softmax of t under that "
                                    "P·V, O rescaled after it")
        _timeline(ax, played[overlap], rows, end, f"{what}: a tile every {period:g} units, the tensor cores idle "
                                                  f"{period - 2 * consumers:g}")
    fig.suptitle(f"{consumers} consumer warpgroups, one set of tensor cores: a product 1 unit, a softmax {softmax:g}, "
                 f"rung 10's rescale {rescale:g} (units, not measured times)", fontsize=12)
    _consumers_key(fig, "rung 10: O rescaled once its P·V is done")
    return fig


def _consumers_key(fig, rescaled: str) -> None:
    """The key under the consumer warpgroups' timelines (attention_intra_overlap, attention_three_consumers)."""
    _key(fig, [("a product on the tensor cores (gN: whose)", TENSOR_CORES), ("the softmax, on the warpgroup's threads", CUDA),
               (rescaled, _shade(CUDA, 0.45)), ("idle or waiting", "white")], y=0.0)
    fig.tight_layout(rect=(0, 0.06, 1, 1))


def attention_three_consumers(tiles: int = 4, softmax: float = 4.0, rescale: float = 0.25):
    """Rungs 11 and 12 at D64 (their consumer warpgroups as launched there: 64 queries each), each warpgroup
    running rung 10's loop (consumer_programs), played by play_consumers over `tiles` key tiles: a product 1 unit,
    a softmax `softmax` units (longer than the other warpgroup's two products, as when fixed-latency waits
    stall it), rung 10's rescale `rescale`. Units, not measured times."""
    import kernels.attention as at
    counts = [at.hopper_launch(name, 64)[1] // 64 for name in ("11_fast_exp2", "12_three_consumers")]
    played = [play_consumers([consumer_programs(tiles, True, softmax, rescale)] * n, softmax, rescale) for n in counts]
    end = max(stop for boxes in played for _, _, stop, _, _ in boxes)
    fig = _figure(12, 1.4 + 0.5 * (sum(counts) + 2 + 3))
    axes = fig.subplots(2, 1, gridspec_kw=dict(height_ratios=[n + 1 for n in counts]))
    for ax, n, boxes, rung in zip(axes, counts, played, (11, 12)):
        period = tile_period(boxes)
        busy = 2 * n / period
        _timeline(ax, boxes, ["tensor cores"] + [f"warpgroup {g}" for g in range(n)], end,
                  f"rung {rung}: {n} consumer warpgroups take turns: {n} tiles of 64 queries every {period:g} units, "
                  f"the tensor cores busy {busy:.0%}")
    fig.suptitle(f"One SM at D64, rung 10's loop in each warpgroup: a product 1 unit, a softmax {softmax:g}, "
                 f"O's rescale {rescale:g} (units, not measured times)", fontsize=12)
    _consumers_key(fig, "O rescaled once its P·V is done")
    return fig


def attention_persistent(items: int = 3, tiles: int = 5, copy_in: float = 1.5, tail: float = 1.0,
                         shape: tuple = (4, 32, 4096, 128, 0), sm_count: int = 132):
    """One SM's timeline under rungs 12 and 13 over `items` (query block, head) items of `tiles` key tiles each (a
    key tile 1 unit): a block of rung 12 waits `copy_in` units for its Q and first K/V tiles, then ends with its
    last P·V and the store of O (`tail` units); rung 13's one block an SM waits once, its next item's copies running
    under each item's tail. Units, not measured times; the block counts are the launchers' at `shape` on
    `sm_count` SMs (an H100's 132)."""
    import kernels.attention as at
    B, H, S, D, causal = shape
    rows = at.hopper_launch("13_persistent", D)[1]
    blocks = -(-S // rows) * B * H
    walkers = at.persistent_grid(blocks, bool(causal), sm_count)
    twelve, thirteen = "SM, rung 12", "SM, rung 13"
    boxes, t = [], 0.0
    for i in range(items):   # rung 12: a block an item, each starting cold
        boxes += [(twelve, t, t + copy_in, "Q, K/V in", "idle"), (twelve, t + copy_in, t + copy_in + tiles,
                                                                  f"item {i}: {tiles} key tiles", "product"),
                  (twelve, t + copy_in + tiles, t + copy_in + tiles + tail, "store O", "rescale")]
        t += copy_in + tiles + tail
    end12, t = t, copy_in
    boxes.append((thirteen, 0.0, copy_in, "Q, K/V in", "idle"))
    for i in range(items):   # rung 13: the next item's copies under this one's tail
        boxes += [(thirteen, t, t + tiles, f"item {i}: {tiles} key tiles", "product"),
                  (thirteen, t + tiles, t + tiles + tail, "store O", "rescale")]
        t += tiles + (max(tail, copy_in) if i < items - 1 else tail)
    end13 = t
    fig = _figure(12, 2.6)
    ax = fig.subplots()
    _timeline(ax, boxes, [twelve, thirteen], end12,
              f"{items} items: rung 12 {end12:g} units, rung 13 {end13:g}, its next item's copies under each store "
              f"(the tensor cores busy {items * tiles / end12:.0%} and {items * tiles / end13:.0%})")
    fig.suptitle(f"B{B} H{H} S{S} D{D}: rung 12 launches {blocks:,} blocks of one item, rung 13 {walkers} (one an SM), "
                 f"each walking about {blocks / walkers:.0f} (units, not measured times)", fontsize=11)
    _key(fig, [("key tiles: the tensor cores busy", TENSOR_CORES), ("the last P·V and the store of O", _shade(CUDA, 0.45)),
               ("waiting for the first copies", "0.92")], y=0.0)
    fig.tight_layout(rect=(0, 0.12, 1, 1))
    return fig


def attention_query_blocks(shape: tuple = (8, 12, 1024, 64, 1), rows=(192, 128), block_n: int = 128):
    """A head's score matrix at `shape` (B, H, S, D, causal) as the Hopper rungs compute it in blocks of each of
    `rows` queries (three or two consumer warpgroups) and `block_n`-key tiles: each block's rows (those past S too)
    over its keys (kernels/attention.py, block_keys and scores_computed), over the scores attention needs."""
    import kernels.attention as at
    B, H, S, D, causal = shape
    head = (1, 1, S, D, causal)
    fig = _figure(11, 6.2)
    axes = fig.subplots(1, len(rows))
    tall = max(_cdiv(S, r) * r for r in rows)
    for ax, r in zip(axes, rows):
        for m0 in range(0, S, r):
            keys = at.block_keys(m0, r, S, bool(causal), block_n)
            _box(ax, 0, m0, keys, r, _shade(CUDA, 0.35), fill=True, lw=0, z=1)
            _box(ax, 0, m0, keys, r, "white", lw=1.5, z=4)
        needed = [(0, 0), (S, S), (0, S)] if causal else [(0, 0), (S, 0), (S, S), (0, S)]
        ax.add_patch(Polygon(needed, closed=True, facecolor=CUDA, edgecolor="none", zorder=2))
        ax.axhline(S, color="k", lw=1, ls="--", zorder=5)
        ax.text(S * 1.02, S, "S", va="center", fontsize=9)
        _bare(ax, -0.04 * S, 1.1 * S, -0.04 * S, tall + 0.02 * S)
        ax.set_title(f"{r} queries a block ({r // 64} consumer warpgroups): {_cdiv(S, r)} blocks,\n"
                     f"{at.scores_computed(head, r, block_n) / at.scores_needed(head):.2f}x the scores needed",
                     fontsize=10)
    fig.suptitle(f"One head at S = {S}{', causal' if causal else ''} (B{B} H{H} D{D}): keys across in tiles of "
                 f"{block_n}, queries down", fontsize=11)
    _key(fig, [("needed", CUDA), ("computed, not needed (masked, or rows past S)", _shade(CUDA, 0.35))], y=0.0)
    fig.tight_layout(rect=(0, 0.06, 1, 0.93))
    return fig


# The softmax's opcode families (lesson.SOFTMAX_OPCODES, in order), then everything else.
_OPCODE_COLORS = ("#4c72b0", TENSOR_CORES, "#8172b2", "#64b5cd", "#ccb974", "#937860", "#dd8452", "0.8")


def _opcode_bars(rows: dict[str, dict], families: tuple, ends: dict[str, str], xlabel: str, title: str,
                 height: float, xmax: float):
    """A stacked bar per rung (rows: rung name -> width of each opcode family), the text `ends[name]` after it."""
    colors = dict(zip(families, _OPCODE_COLORS))
    fig = _figure(11, height)
    ax = fig.subplots()
    for y, (name, widths) in enumerate(rows.items()):
        left = 0.0
        for family in families:
            ax.barh(y, widths[family], left=left, color=colors[family], edgecolor="white", height=0.6)
            left += widths[family]
        ax.text(left + 0.01 * xmax, y, ends[name], va="center", fontsize=9)
    ax.set_yticks(range(len(rows)), [f"rung {n.split('_')[0]}" for n in rows])
    ax.invert_yaxis()
    ax.set_xlim(0, xmax)
    ax.set_xlabel(xlabel)
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)
    fig.suptitle(title, fontsize=11)
    _key(fig, [(f, colors[f]) for f in families], y=0.0)
    fig.tight_layout(rect=(0, 0.1 * 3.2 / height, 1, 1))
    return fig


def softmax_instruction_mix(head_dim: int = 64):
    """Rungs 10 and 11's instructions per score at `head_dim`, by opcode family, from their SASS
    (lesson.softmax_instruction_mix): rung 11 drops exp2f's fix-up (FSETP and two FMULs per exponential)."""
    from ladder import lesson
    mix = lesson.softmax_instruction_mix(head_dim=head_dim)
    families = lesson.SOFTMAX_OPCODES
    total = {name: sum(m[f] for f in families) for name, m in mix.items()}
    return _opcode_bars(mix, families, {name: f"{t:.2f} a score" for name, t in total.items()},
                        f"the softmax's SASS instructions per score a consumer thread owns (sm_90a, D = {head_dim}; "
                        "count / BLOCK_N)",
                        "rung 11 drops exp2f's range fix-up (FSETP and two FMULs an exponential): the rest of the "
                        "softmax is the same", 3.2, 1.35 * max(total.values()))


def attention_critical_path(head_dim: int = 128, names=("13_persistent", "14_critical_path")):
    """Rungs 13 and 14's path from a tile's S landing to the warpgroup's next S (lesson.next_issue_paths: their
    SASS for sm_90a, an unmasked tile), its instructions by opcode family (softmax_instruction_mix's colors and
    "other": barriers, addresses, the wait for the turn): rung 14 takes most of O's rescale (FMUL) off it."""
    from ladder import lesson
    families = lesson.SOFTMAX_OPCODES + ("other",)
    family_of = lambda op: next((f for f in lesson.SOFTMAX_OPCODES  # noqa: E731
                                 if op == f or op.startswith(f + ".")), "other")
    paths = lesson.next_issue_paths(tuple(names), head_dim)
    rows = {name: {f: sum(family_of(op) == f for op in path) for f in families} for name, path in paths.items()}
    return _opcode_bars(rows, families, {n: f"{len(p)} instructions, {p.count('FMUL')} FMUL" for n, p in paths.items()},
                        f"a consumer thread's SASS instructions from S landing to the next S's first HGMMA "
                        f"(sm_90a, D = {head_dim}, an unmasked tile)",
                        "rung 14 moves O's rescale (FMUL) under the next S's wgmma: fewer instructions between one "
                        "tile's S and the next", 2.8, 1.4 * max(len(p) for p in paths.values()))


def _search_report(tuner: str, shape: tuple):
    from ladder import autotune
    gpu = hardware.detect()
    for slug in ([gpu.slug] if gpu else []) + [None]:  # this GPU's recording first
        report = autotune.recorded_report(tuner, shape, slug)
        if report:
            return report
    return None


def _search_panel(ax, report, space: dict, row_keys: list, col_keys: list, color: str, reasons: dict) -> None:
    """One search as a grid: a row per combination of row_keys, a column per combination of col_keys; each cell
    the best of its configurations over the other keys: timed (shaded by the best time / its time, the winner
    starred) or pruned (p1, p2, ...: the kind of reason, numbered in `reasons`, which also collects the reasons
    of each kind for the key)."""
    from ladder.autotune import reason_kind
    import itertools
    rows = list(itertools.product(*(space[k] for k in row_keys)))
    cols = list(itertools.product(*(space[k] for k in col_keys)))
    cell = lambda c: (tuple(c[k] for k in row_keys), tuple(c[k] for k in col_keys))  # noqa: E731
    cells = _fill((len(rows), len(cols)), "white")
    marks: dict[tuple[int, int], str] = {}
    if report:
        timed: dict[tuple, float] = {}
        for t in report.timed:
            key = cell(t["config"])
            timed[key] = min(timed.get(key, t["ms"]), t["ms"])
        pruned = {cell(p["config"]): p["reason"] for p in report.pruned + report.failed}
        for i, r in enumerate(rows):
            for j, c in enumerate(cols):
                if (r, c) in timed:
                    ms = timed[r, c]
                    cells[i, j] = _shade(color, max(0.08, report.best_ms / ms) ** 2)
                    marks[i, j] = "★" if ms == report.best_ms else f"{report.best_ms / ms:.0%}"
                elif (r, c) in pruned:
                    number, of_kind = reasons.setdefault(reason_kind(pruned[r, c]), (len(reasons) + 1, []))
                    of_kind.append(pruned[r, c])
                    cells[i, j] = LIGHT
                    marks[i, j] = f"p{number}"
    _cells(ax, cells, grid="0.7", lw=0.8)
    for (i, j), text in marks.items():
        ax.text(j + 0.5, i + 0.5, text, ha="center", va="center", fontsize=8 if text != "★" else 12,
                color="white" if text == "★" or (text.endswith("%") and int(text[:-1]) > 80) else "k")
    ax.set_xlim(0, len(cols))
    ax.set_ylim(len(rows), 0)
    ax.set_aspect("auto")
    ax.set_xticks(np.arange(len(cols)) + 0.5, ["\n".join(str(v) for v in c) for c in cols], fontsize=8)
    ax.set_yticks(np.arange(len(rows)) + 0.5, [" × ".join(str(v) for v in r) for r in rows], fontsize=8)
    ax.tick_params(length=0)
    ax.set_xlabel(" / ".join(col_keys), fontsize=9)
    ax.set_ylabel(" × ".join(row_keys), fontsize=9)


def _reasons_key(fig, reasons: dict) -> None:
    from ladder.autotune import fold_reasons
    fig.text(0.01, 0.01, "\n".join(f"p{n}: pruned, {next(iter(fold_reasons(of_kind)))}"
                                   for n, of_kind in reasons.values()) or " ", fontsize=8, va="bottom")
    fig.tight_layout(rect=(0, 0.03 + 0.035 * len(reasons), 1, 1))


def attention_search(backend: str = "triton", causal: int = 0):
    """Attention rung 6 (SEARCH_SPACE of kernels/attention.py or kernels/triton/attention.py, and the recorded
    search at the headline shapes): every configuration, pruned (why) or timed (its time against the best), the
    winner starred, for D = 64 and D = 128: the best tile depends on D."""
    from kernels import attention as at
    from kernels.triton import attention as ta
    space = at.SEARCH_SPACE if backend == "cuda" else ta.SEARCH_SPACE
    names = list(space)
    shapes = [s for s in at.HEADLINE if s[4] == causal]
    fig = _figure(12, 1.8 + 0.5 * len(space[names[0]]) * len(space[names[1]]))
    axes = fig.subplots(1, len(shapes), squeeze=False)[0]
    reasons: dict[str, tuple[int, list[str]]] = {}
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


def matmul_hopper_search(shapes: tuple = ((4096, 4096, 4096), (8192, 8192, 8192), (8192, 768, 3072))):
    """CUDA matmul rung 12 (HOPPER_SEARCH_SPACE of kernels/matmul.py, and the recorded searches at `shapes`): a row
    per block of C (BM x BN), a column per ring depth and cluster size, each cell the best of its tile orders
    (GROUP_M) and epilogues (BOX_BY_BOX): pruned (why) or timed against the winner, the winner starred."""
    import kernels.matmul as mm
    fig = _figure(6 * len(shapes), 4.6)
    axes = fig.subplots(1, len(shapes), squeeze=False)[0]
    reasons: dict[str, tuple[int, list[str]]] = {}
    for ax, shape in zip(axes, shapes):
        report = _search_report(mm.HOPPER_TUNER.name, shape)
        _search_panel(ax, report, mm.HOPPER_SEARCH_SPACE, ["BM", "BN"], ["STAGES", "CLUSTER"], CUDA, reasons)
        best = " ".join(f"{k}={v}" for k, v in report.best.items()) if report else "no recorded search"
        ax.set_title(f"{'x'.join(map(str, shape))}\n★ {best}", fontsize=9)
    fig.suptitle("CUDA matmul rung 12: the search (recorded); % = the best time / this one's", fontsize=11)
    _reasons_key(fig, reasons)
    return fig


# ------------------------------------------------------------- attention backward (lesson 04d)

def attention_backward_programs(head_dim: int = 64, key_block: int = 1, query_block: int = 2):
    """Rung 2 of the attention backward, causal, with its own tiles (kernels/triton/attention_backward.GPU_TILES):
    left, what one dkdv_kernel program walks (its BLOCK_N keys, the queries in BLOCK_M steps); right, one
    dq_kernel program (its BLOCK_M queries, the keys in BLOCK_N steps). Masked: the diagonal steps; skipped:
    the steps above the diagonal, never loaded."""
    from kernels.triton import attention_backward as tab
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
        _attention_grid(ax, S, bm, bn, colors)
        ax.plot([0, S], [0, S], color="k", lw=0.8, ls="--")
        _box(ax, 0, 0, S, S, "k", lw=1)
        _bare(ax, -0.1 * S, S + 0.02 * S, -0.07 * S, S + 0.02 * S)
        ax.set_title(f"{title}\n{bm} x {bn} steps, {steps} computed", fontsize=10, pad=22)
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
    from kernels.triton import attention_backward as tab
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
    _attention_grid(ax, S, bm, bn, colors)
    ax.plot([0, S], [0, S], color="k", lw=0.8, ls="--")
    _box(ax, 0, 0, S, S, "k", lw=1)
    # the dQ buffer beside the scores: one row per query, shaded by how many programs add into it
    adders = [min(cols, q // bn + 1) for q in range(0, S, bm)]
    strip = np.array([[_shade(CUDA, 0.15 + 0.85 * n / cols)] for n in adders], dtype=object)
    x = S + 0.12 * S
    _cells(ax, strip, x0=x, w=0.12 * S, h=bm)
    _box(ax, x, 0, 0.12 * S, S, "k", lw=1)
    for i, n in enumerate(adders):
        ax.text(x + 0.06 * S, (i + 0.5) * bm, str(n), ha="center", va="center", fontsize=7)
    for i in [i for i in range(rows) if key_block * bn <= i * bm + bm - 1]:   # the query steps it computes
        _arrow(ax, ((key_block + 1) * bn, (i + 0.5) * bm), (x, (i + 0.5) * bm), color=CUDA)
    ax.text(x + 0.06 * S, -0.02 * S, "dQ (fp32)", ha="center", va="bottom", fontsize=9)
    _bare(ax, -0.1 * S, x + 0.14 * S, -0.07 * S, S + 0.02 * S)
    ax.set_title(f"one dkdv program: {bm} x {bn} steps, dQ added by atomics at each", fontsize=10, pad=22)
    fig.suptitle(f"Rung 3, causal, D = {head_dim}, S = {S}: no dQ kernel; every K/V program adds into the dQ rows "
                 f"of its queries\n(the number in each dQ row: how many programs add into it, up to {cols} here, "
                 f"S / {bn} at any S)", fontsize=11)
    _key(fig, [("this program, no mask", TRITON), ("this program, masked (diagonal)", _shade(TRITON, 0.4)),
               ("dQ rows: more programs adding, darker", CUDA), ("skipped: above the diagonal", "white")], y=0.0)
    return fig


ALL = (vector_add_loads, matmul_warp_sectors, matmul_shared_tile, matmul_register_block, matmul_warp_tiles,
       matmul_stage_ring, matmul_tile_order, attention_scores_in_dram, attention_flash_sweep, attention_causal_skip,
       matmul_triton_lanes, matmul_triton_dot, matmul_wgmma, tma_tile_copy, matmul_tma_ring, matmul_cluster_multicast,
       matmul_tma_store_epilogue, matmul_hopper_search, attention_tensor_core_tile, attention_kv_ring, attention_search,
       attention_backward_programs, attention_backward_atomics, attention_wgmma_tma_ring,
       attention_warp_specialized_ring, attention_pingpong, attention_intra_overlap, softmax_instruction_mix,
       attention_three_consumers, attention_persistent, attention_critical_path, attention_query_blocks)
