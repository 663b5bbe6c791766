"""The roofline model and its plot.

attainable(I) = min(peak compute, I x bandwidth), with I the arithmetic intensity in FLOP/byte.
The ridge point I* = peak / bandwidth separates memory-bound (left) from compute-bound (right).
One roof per compute unit (fp32 CUDA cores, fp16 tensor cores); measured ceilings solid,
datasheet ones dashed; kernels are labelled points, joined by arrows in ladder order.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

ROOFS = {"fp32_TFLOPs": "fp32 CUDA cores", "fp16_tc_TFLOPs": "fp16 tensor cores"}
BACKEND_COLORS = {"cuda": "tab:green", "triton": "tab:blue", "torch": "tab:gray"}


def ridge(bandwidth_TBps: float, peak_TFLOPs: float) -> float:
    """Arithmetic intensity (FLOP/byte) where the memory slope meets the compute roof."""
    return peak_TFLOPs / bandwidth_TBps


def attainable(intensity: float, bandwidth_TBps: float, peak_TFLOPs: float) -> float:
    """Best TFLOP/s a kernel of this intensity can reach under these ceilings."""
    return min(peak_TFLOPs, intensity * bandwidth_TBps)


def bound(intensity: float, bandwidth_TBps: float, peak_TFLOPs: float) -> str:
    return "memory" if intensity < ridge(bandwidth_TBps, peak_TFLOPs) else "compute"


@dataclass
class Point:
    label: str
    intensity: float   # FLOP/byte, from the problem's minimum bytes
    tflops: float      # achieved
    backend: str = "cuda"


def points(rows: list[dict], problem, shape: tuple | None = None) -> list[Point]:
    """Roofline points for the runs of `problem` (at `shape`, default: its largest benchmark shape)."""
    shape = list(shape or problem.bench_shapes[-1])
    return [Point(f"{r['backend']}:{r['rung']}", problem.intensity(tuple(r["shape"])), r["tflops"], r["backend"])
            for r in rows if r["problem"] == problem.name and r["shape"] == shape]


def measured_points(runs: list[dict], profiles: list[dict], problem, shape: tuple) -> list[Point]:
    """Roofline points whose intensity counts the DRAM bytes ncu measured for each rung (read +
    written) instead of the problem's minimum: where each rung really sits. Rungs with no profile
    at `shape` are left out."""
    moved = {f"{p['backend']}:{p['rung']}": (p["metrics"].get("dram_bytes_read") or 0)
             + (p["metrics"].get("dram_bytes_write") or 0)
             for p in profiles if p["problem"] == problem.name and tuple(p["shape"]) == tuple(shape)}
    return [Point(label, problem.flops(tuple(shape)) / moved[label], r["tflops"], r["backend"])
            for r in runs if r["problem"] == problem.name and tuple(r["shape"]) == tuple(shape)
            and moved.get(label := f"{r['backend']}:{r['rung']}")]


def plot(pts: list[Point], ceilings: dict, datasheet: dict | None = None, source: str = "",
         ax=None, title: str | None = None, arrows: bool = True):
    """Draw the roofs and the points; returns the matplotlib Axes."""
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=(8, 5.5))
    intensities = [p.intensity for p in pts] or [1.0]
    lo = min(min(intensities) / 4, 0.05)
    hi = max(max(intensities) * 4, 4 * max(ridge(ceilings["copy_TBps"], ceilings[k]) for k in ROOFS))
    xs = np.geomspace(lo, hi, 400)
    for sheet, style, tag in ((ceilings, "-", "measured"), (datasheet, "--", "datasheet")):
        if not sheet:
            continue
        bw = sheet["copy_TBps"]
        for key, name in ROOFS.items():
            ys = np.minimum(sheet[key], xs * bw)
            color = "tab:red" if key == "fp16_tc_TFLOPs" else "tab:orange"
            ax.plot(xs, ys, style, color=color, lw=2 if tag == "measured" else 1, alpha=1 if tag == "measured" else 0.6,
                    label=f"{name}, {tag}: {sheet[key]:.0f} TFLOP/s, {bw:.2f} TB/s")
            if tag == "measured":
                r = ridge(bw, sheet[key])
                ax.annotate(f"ridge {r:.0f} FLOP/B", (r, sheet[key]), textcoords="offset points",
                            xytext=(4, 6), fontsize=8, color=color)
    for p in pts:
        ax.scatter(p.intensity, p.tflops, s=40, zorder=3, color=BACKEND_COLORS.get(p.backend, "k"))
        ax.annotate(p.label, (p.intensity, p.tflops), textcoords="offset points", xytext=(6, -10), fontsize=8)
    if arrows:
        for backend in {p.backend for p in pts}:
            ladder = [p for p in pts if p.backend == backend]
            for a, b in zip(ladder, ladder[1:]):
                ax.annotate("", (b.intensity, b.tflops), (a.intensity, a.tflops),
                            arrowprops=dict(arrowstyle="->", color=BACKEND_COLORS.get(backend, "k"), alpha=0.6))
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOP / byte)")
    ax.set_ylabel("TFLOP/s")
    ax.set_title(title or "Roofline" + (f" — {source}" if source else ""), fontsize=10)
    ax.grid(True, which="both", alpha=0.25)
    ax.legend(fontsize=7, loc="lower right")
    return ax
