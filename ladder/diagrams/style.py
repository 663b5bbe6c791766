"""What every diagram draws with: the colours (a backend's, the tensor-core roof's red, the fp32 roof's orange, as on
the roofline), a Figure that shows itself in a notebook, cells, boxes, arrows and the key, and two drawings several
lessons share: a schedule of who holds which tile at each step (pipeline rings, warpgroup timelines) and an
autotuning search as a grid of its configurations.
"""
from __future__ import annotations

import io
import itertools

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.colors import to_hex, to_rgba
from matplotlib.figure import Figure
from matplotlib.patches import FancyArrowPatch, Rectangle

from ladder import autotune, roofline
from ladder.runtime import hardware

SECTOR_BYTES = 32     # the unit a load fetches from L2/DRAM
FP16_BYTES = 2
CUDA = roofline.BACKEND_COLORS["cuda"]
TRITON = roofline.BACKEND_COLORS["triton"]
TENSOR_CORES = roofline.ROOF_COLORS["fp16_tc_TFLOPs"]
CUDA_CORES = roofline.ROOF_COLORS["fp32_TFLOPs"]
MEMORY = "0.55"       # DRAM and L2: grey, as the torch anchors
LIGHT = "0.93"        # cells nobody touches
IN_FLIGHT = "#c8c8c8"  # a copy on its way from memory


# ------------------------------------------------------------- the figure and what it is drawn with

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


def _key(fig, entries: list[tuple[str, object]], y: float = 0.02, ncol: int | None = None):
    """A legend of coloured squares along the bottom of the figure, outside every axes: one row, or `ncol`
    columns. An entry's colour may instead be a dict of the square's patch properties (a hatch, say)."""
    handles = [Rectangle((0, 0), 1, 1, edgecolor="0.4", lw=0.5,
                         **(color if isinstance(color, dict) else {"facecolor": color})) for _, color in entries]
    fig.legend(handles, [label for label, _ in entries], loc="lower center", bbox_to_anchor=(0.5, y),
               ncol=ncol or len(entries), frameon=False, fontsize=9, handlelength=1.2)


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'s' * (n != 1)}"


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _sectors(byte_addresses) -> set[int]:
    return {int(a) // SECTOR_BYTES for a in byte_addresses}


# ------------------------------------------------------------- who holds which tile at each step

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
    _key(fig, key or [(math, TENSOR_CORES), ("copy issued: in flight, or landed and not yet read", IN_FLIGHT),
                      ("free", "white")], y=0.0)
    fig.tight_layout(rect=(0, 0.07, 1, 1))
    return fig


# ------------------------------------------------------------- an autotuning search as a grid

def _search_report(tuner: str, shape: tuple):
    """The recorded search of `tuner` at `shape`: this GPU's recording first, else the default recording's."""
    gpu = hardware.detect()
    for slug in ([gpu.slug] if gpu else []) + [None]:  # this GPU's recording first
        report = autotune.recorded_report(tuner, shape, slug)
        if report:
            return report
    return None


class PruneReasons:
    """The prune reasons of the searches a figure draws, by kind (autotune.reason_kind): every one is collected,
    and a kind gets its number (p1, p2, ...) when a cell first shows it; the key (_reasons_key) writes each numbered
    kind with the ranges all its reasons span, as the search's printout does."""

    def __init__(self):
        self.by_kind: dict[str, list[str]] = {}
        self.numbers: dict[str, int] = {}

    def add(self, reason: str) -> None:
        self.by_kind.setdefault(autotune.reason_kind(reason), []).append(reason)

    def number(self, reason: str) -> int:
        return self.numbers.setdefault(autotune.reason_kind(reason), len(self.numbers) + 1)


def _search_panel(ax, report, space: dict, row_keys: list, col_keys: list, color: str,
                  reasons: PruneReasons) -> None:
    """One search as a grid: a row per combination of row_keys, a column per combination of col_keys; each cell
    the best of its configurations over the other keys: timed (shaded by the best time / its time, the winner
    starred) or pruned (p1, p2, ...: the kind of one of its reasons, numbered in `reasons`)."""
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
        pruned: dict[tuple, str] = {}
        for p in report.pruned + report.failed:
            pruned[cell(p["config"])] = p["reason"]   # the reason a cell shows: its last configuration's
            reasons.add(p["reason"])
        for i, r in enumerate(rows):
            for j, c in enumerate(cols):
                if (r, c) in timed:
                    ms = timed[r, c]
                    cells[i, j] = _shade(color, max(0.08, report.best_ms / ms) ** 2)
                    marks[i, j] = "★" if ms == report.best_ms else f"{report.best_ms / ms:.0%}"
                elif (r, c) in pruned:
                    cells[i, j] = LIGHT
                    marks[i, j] = f"p{reasons.number(pruned[r, c])}"
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


def _reasons_key(fig, reasons: PruneReasons) -> None:
    fig.text(0.01, 0.01, "\n".join(f"p{n}: pruned, {next(iter(autotune.fold_reasons(reasons.by_kind[kind])))}"
                                   for kind, n in reasons.numbers.items()) or " ", fontsize=8, va="bottom")
    fig.tight_layout(rect=(0, (0.14 + 0.16 * len(reasons.numbers)) / fig.get_figheight(), 1, 1))  # the key's inches
