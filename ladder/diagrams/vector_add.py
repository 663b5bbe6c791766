"""Lesson 01, vector add: the elements warp 0 loads with each load instruction of rungs 1 and 2, over A's 32-byte
sectors.
"""
from __future__ import annotations

import re

import numpy as np

from kernels.cuda import vector_add as cva
from ladder.runtime import cuda
from ladder.diagrams.style import CUDA, FP16_BYTES, SECTOR_BYTES, _box, _cdiv, _cells, _figure, _fill, _sectors, _shade


VECTOR_BYTES = {"uint4": 16, "float4": 16, "int4": 16, "uint2": 8, "float2": 8, "int2": 8,
                "unsigned": 4, "float": 4, "int": 4, "__half2": 4, "half2": 4, "__half": 2, "half": 2}


def cu_vector_bytes(path: str) -> int:
    """Bytes per load of the type a .cu file reinterprets its input `a` as (uint4 -> 16)."""
    m = re.search(r"reinterpret_cast<const\s+(\w+)\s*\*>\s*\(\s*a\s*\)", cuda.source(path))
    return VECTOR_BYTES[m.group(1)] if m else FP16_BYTES


def vector_add_loads():
    """Vector add rungs 1-2: the elements of A that warp 0 touches with each of its load instructions, in
    rows of THREADS elements (one row per load of the scalar rung), over A's 32-byte sectors."""
    threads, loads = cva.THREADS, cva.SCALAR_ELEMS_PER_THREAD
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
