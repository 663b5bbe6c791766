"""Every figure a lesson draws, one function each, so that tests/test_figures.py can draw them all from
the recording and check that none is unreadable (ladder.figcheck). A lesson cell calls one of these.

Colours are the backends' (roofline.BACKEND_COLORS) and marks the rungs' (roofline.Point.glyph), the same
in every figure; legends sit outside the axes.
"""
from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.colors import TwoSlopeNorm
from matplotlib.lines import Line2D
from matplotlib.ticker import FuncFormatter, LogLocator

from ladder import profile, results, roofline, verdicts
from ladder.runtime import hardware


def _legend_outside(ax, **kw):
    return ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False, **kw)


def _rows_gpu(rows: list[dict]):
    """The GPU the rows were timed on: this one for live rows, the default recording's for recorded rows (what
    runner.results and results.load give on a machine without a GPU); None where neither is known."""
    if any("recorded" not in r for r in rows):
        return hardware.detect()
    try:
        return roofline.datasheet_gpu(results.load().gpu)
    except Exception:   # no recording, or its GPU is not in the datasheet table: the key names no unit
        return None


def _with_units(pts: list[roofline.Point], rows: list[dict], problem) -> list[roofline.Point]:
    """`pts`, each told which unit does its rung's math on the rows' GPU (roofline.unit), for the key."""
    gpu = _rows_gpu(rows)
    rungs = {r.label: r for r in problem.rungs}
    for p in pts:
        if gpu is not None and p.label in rungs:
            p.unit = roofline.unit(problem, rungs[p.label], gpu)
    return pts


def ladder_roofline(rows: list[dict], profiles: list[dict], problem, shape: tuple, ceilings: dict,
                    datasheet: dict | None, source: str, what: str):
    """The rungs at `shape` on the roofline, placed by the DRAM and L2 bytes ncu measured where profiled
    (else by the problem's minimum bytes, said in the title); the key says which unit each rung's math uses."""
    pts = roofline.measured_points(rows, profiles, problem, shape)
    placed = "intensity from the recorded ncu DRAM (filled) and L2 (hollow) bytes"
    if not pts:
        pts, placed = roofline.points(rows, problem, shape), "intensity from the fewest bytes the problem must move"
    return roofline.plot(_with_units(pts, rows, problem), ceilings, datasheet, source=source,
                         title=f"{what}\nspeed {source}\n{placed}").figure   # a line each: no word wraps alone


def best_positions(examples: dict[str, tuple[float, str]], ceilings: dict, datasheet: dict | None, source: str):
    """Each example (name -> (intensity, the ceiling key of the unit doing its math)) at the best rate the
    roofs allow it."""
    pts = [roofline.Point(name, i, roofline.attainable(i, ceilings["copy_TBps"], ceilings[roof]), "torch")
           for name, (i, roof) in examples.items()]
    return roofline.plot(pts, ceilings, datasheet, source=source, arrows=False,
                         title=f"Best possible positions — ceilings {source}").figure


def bandwidth_bars(rows: list[dict], shape: tuple, ceilings: dict, datasheet: dict | None, source: str):
    """Achieved TB/s per rung (minimum bytes over time), against the copy roofs drawn as lines."""
    at = [r for r in rows if tuple(r["shape"]) == tuple(shape)]
    fig, ax = plt.subplots(figsize=(7, 0.45 * len(at) + 1.2))
    ax.barh([results.rung_label(r) for r in at], [r["tbps"] for r in at],
            color=[roofline.BACKEND_COLORS.get(r["backend"], "k") for r in at])
    ax.axvline(ceilings["copy_TBps"], color="k", label=f"measured copy {ceilings['copy_TBps']:.2f} TB/s")
    if datasheet:
        ax.axvline(datasheet["copy_TBps"], color="k", ls="--", label=f"datasheet {datasheet['copy_TBps']} TB/s")
    ax.set_xlabel(f"achieved TB/s (minimum bytes / time), n = {shape[0]:.0e}")
    ax.set_title(source, fontsize=9)
    ax.invert_yaxis()
    _legend_outside(ax)
    return fig


BARS_SPAN = 20   # up to this ratio of the fastest rung to the slowest, bars from zero; beyond, dots on a log axis


def speed_bars(rows: list[dict], shapes: list[tuple], source: str, anchor: str = "torch:cublas"):
    """TFLOP/s per rung, one bar per shape, each rung in its backend's colour; the anchor drawn as a line per
    shape, not as another bar. A bar's length is its value, so bars start at zero on a linear axis; a ladder
    spanning more than BARS_SPAN (three decades, for the first rungs) is drawn as dots on a log axis instead."""
    labels = list(dict.fromkeys(results.rung_label(r) for r in rows if results.rung_label(r) != anchor
                                and tuple(r["shape"]) in {tuple(s) for s in shapes}))
    fig, ax = plt.subplots(figsize=(9, 0.42 * len(labels) * len(shapes) + 1.2))
    height = 0.8 / len(shapes)
    values = [r["tflops"] for r in rows
              if results.rung_label(r) in labels and tuple(r["shape"]) in {tuple(s) for s in shapes}]
    dots = bool(values) and max(values) > BARS_SPAN * min(values)
    for i, shape in enumerate(shapes):
        tf = {results.rung_label(r): r["tflops"] for r in rows if tuple(r["shape"]) == tuple(shape)}
        alpha = 1.0 - 0.5 * i / max(1, len(shapes) - 1)
        name = "×".join(map(str, shape))
        at = [(j + height * i, lb) for j, lb in enumerate(labels) if lb in tf]
        colors = [roofline.BACKEND_COLORS.get(lb.split(":")[0], "k") for _, lb in at]
        tag = f"{name} ({'dark' if i == 0 else 'light'})"
        if dots:
            ax.scatter([tf[lb] for _, lb in at], [y for y, _ in at], s=40, color=colors, alpha=alpha, zorder=3,
                       label=tag)
        else:
            ax.barh([y for y, _ in at], [tf[lb] for _, lb in at], height=height, color=colors, alpha=alpha, label=tag)
        if anchor in tf:
            ax.axvline(tf[anchor], color="k", ls=["-", "--", ":"][i % 3], lw=1,
                       label=f"{anchor.split(':')[1]} at {name}: {tf[anchor]:.0f}")
    ax.set_yticks([j + height * (len(shapes) - 1) / 2 for j in range(len(labels))], labels, fontsize=8)
    if dots:
        ax.set_xscale("log")
        ax.grid(True, axis="x", which="both", alpha=0.2)
        ax.set_xlabel("TFLOP/s (log scale: each dot is a rung at one shape)")
    else:
        ax.set_xlim(left=0)
        ax.set_xlabel("TFLOP/s")
    ax.set_title(source, fontsize=9)
    ax.invert_yaxis()
    _legend_outside(ax)
    return fig


SWEEP_MARK = 110   # points² of a rung's mark on a size sweep
# A rung's line on a size sweep: its backend's colour, and its own dash pattern among that backend's rungs (a
# seventh rung of one backend repeats the first's pattern, thinner).
SWEEP_DASHES = ["-", "--", "-.", ":", (0, (7, 2, 1, 2, 1, 2)), (0, (10, 3))]
SWEEP_WIDTHS = [1.5, 0.9, 2.6]   # with the dashes, a style of its own for each of a backend's first 18 lines
SWEEP_END = 0.45   # how far outside a line's first and last size its marks stand, in octaves


def size_sweep(rows: list[dict], size_of, xlabel: str, source: str, unavailable_from: float | None = None,
               note: str = ""):
    """TFLOP/s against problem size, log-log: one line per rung through the sizes it was timed at (the ticks),
    in its backend's colour and a dash pattern of its own. Each line is named at both ends by its rung's mark
    (colour and shape: backend, number: rung) at its end's height, a little outside the line's first and last
    size; where marks would touch, the later stands a column further out, joined to its end by a level leader.
    Sizes from `unavailable_from` on shaded, `note` in the legend."""
    fig, ax = plt.subplots(figsize=(11, 4.5))   # wide: the marks' columns take room beside the sizes
    sizes = sorted({size_of(r["shape"]) for r in rows})
    series = {label: sorted((size_of(r["shape"]), r["tflops"]) for r in rows if results.rung_label(r) == label)
              for label in dict.fromkeys(results.rung_label(r) for r in rows)}
    series = {label: pts for label, pts in series.items() if len(pts) >= 2}
    speeds = [tf for pts in series.values() for _, tf in pts]
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_ylim(min(speeds) / 1.5, max(speeds) * 1.5)
    ends = [{label: pts[end] for label, pts in series.items()} for end in (0, -1)]
    columns = [_columns(ax, these) for these in ends]
    # room beside the first and the last size for the marks' columns: the octaves a column step takes depend on
    # the octaves shown, so solve for those
    step = max(roofline.mark_extent(ax, roofline.Point(label, 1, 1).glyph, label.split(":")[0], SWEEP_MARK)[0]
               for label in series) + roofline.MARK_GAP
    extra = sum(max(c.values()) for c in columns) * step / ax.bbox.width
    octaves = (np.log2(sizes[-1] / sizes[0]) + 4 * SWEEP_END) / (1 - extra)
    column_octaves = step * octaves / ax.bbox.width
    ax.set_xlim(sizes[0] / 2**(2 * SWEEP_END + max(columns[0].values()) * column_octaves),
                sizes[-1] * 2**(2 * SWEEP_END + max(columns[1].values()) * column_octaves))
    handles, per_backend = [], {}
    for label, pts in series.items():
        backend = label.split(":")[0]
        k = per_backend[backend] = per_backend.get(backend, -1) + 1
        style = dict(ls=SWEEP_DASHES[k % len(SWEEP_DASHES)], color=roofline.BACKEND_COLORS.get(backend, "k"),
                     lw=SWEEP_WIDTHS[k // len(SWEEP_DASHES) % len(SWEEP_WIDTHS)])
        ax.plot(*zip(*pts), zorder=1.9 if backend == "torch" else 2, **style)   # ours over the library's
        handles.append(Line2D([], [], marker=roofline.BACKEND_MARKERS.get(backend, "o"), ms=8,
                              label=f"{roofline.Point(label, 1, 1).glyph:>3s}  {label}", **style))
    for these, column, side in zip(ends, columns, (-1, 1)):
        for label, (size, tflops) in these.items():
            x = size * 2**(side * (SWEEP_END + column[label] * column_octaves))
            # dotted grey: a leader is not data, and must not read as the line's next segment
            ax.plot([size, x], [tflops, tflops], color="0.55", ls=":", lw=0.9, zorder=1.8)
            roofline.draw_mark(ax, x, tflops, roofline.Point(label, 1, 1).glyph, label.split(":")[0], SWEEP_MARK,
                               label)
    if unavailable_from:
        handles.append(ax.axvspan(unavailable_from, ax.get_xlim()[1], color="tab:red", alpha=0.08, label=note))
    ax.set_xticks(sizes, [str(s) for s in sizes])
    ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1, 2, 5)))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.minorticks_off()
    ax.set_xlabel(xlabel)
    ax.set_ylabel("TFLOP/s")
    ax.set_title(source, fontsize=9)
    ax.grid(True, which="major", alpha=0.25)
    _legend_outside(ax, handles=handles, handlelength=4)
    return fig


def _columns(ax, ends: dict[str, tuple[float, float]]) -> dict[str, int]:
    """For each line's end (label -> (size, TFLOP/s)), the column (0 nearest the end) its mark stands in: the
    first, from the lowest end up, where it touches no mark already placed beside an end of the same size. The
    y-axis' limits must be set."""
    placed: dict[tuple[float, int], list[tuple[float, float]]] = {}   # (size, column) -> (centre, half height)
    columns = {}
    for label, (size, tflops) in sorted(ends.items(), key=lambda item: item[1][1]):
        half = roofline.mark_extent(ax, roofline.Point(label, 1, 1).glyph, label.split(":")[0], SWEEP_MARK)[1] / 2
        y = ax.transData.transform((1.0, tflops))[1]
        column = next(c for c in range(len(ends) + 1)
                      if all(abs(y - at) >= half + other + roofline.MARK_GAP for at, other in placed.get((size, c), [])))
        placed.setdefault((size, column), []).append((y, half))
        columns[label] = column
    return columns


def memory_needed(curves: dict[str, list[float]], sizes: list[int], memories: dict[str, float], xlabel: str):
    """Peak bytes one call must hold against sequence length (one curve per family), with each GPU's memory
    as a line; every label in the legend beside the axes."""
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for (label, nbytes), color in zip(curves.items(), ("tab:red", "tab:blue", "tab:green")):
        ax.plot(sizes, np.asarray(nbytes) / 1e9, marker="o", color=color,
                label=f"{label}: {nbytes[-1] / 1e9:.2f} GB at S = {sizes[-1]}")
    for (name, nbytes), style in zip(memories.items(), ("--", ":")):
        ax.axhline(nbytes / 1e9, color="k", ls=style, lw=1, label=f"{name}: {nbytes / 1e9:.1f} GB")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xticks(sizes, [str(s) for s in sizes])
    ax.set_xlabel(xlabel)
    ax.set_ylabel("peak memory of one call (GB)")
    ax.set_title("what one attention call must hold", fontsize=10)
    ax.grid(True, which="both", alpha=0.2)
    _legend_outside(ax)
    return fig


def modelled_roofline(rows: list[dict], problem, shape: tuple, model_bytes, ceilings: dict, datasheet: dict | None,
                      source: str, what: str):
    """The rungs at `shape` placed by the bytes a model says they move (`model_bytes(rung name, shape)`)."""
    pts = [roofline.Point(p.label, problem.flops(tuple(shape)) / model_bytes(p.label.split(":")[1], shape),
                          p.tflops, p.backend) for p in roofline.points(rows, problem, shape)]
    return roofline.plot(_with_units(pts, rows, problem), ceilings, datasheet, source=source,
                         title=f"{what}, by modelled bytes\n{source}").figure


# A stall reason's colour, the same in every stall figure: tab10's for the ten reasons the ladders lead with
# (its grey, which "other" would be confused with, replaced), tab20b's for the rarer ones.
STALL_COLORS = dict(zip(profile.STALL_REASONS, [*(c if i != 7 else "#393b79" for i, c in
                                                  enumerate(plt.get_cmap("tab10").colors)),
                                                *plt.get_cmap("tab20b").colors[2::4], *plt.get_cmap("tab20b").colors[1::4]]))


def stall_mix(warp_states: list[dict], labels: list[str], source: str, top: int = 3):
    """Why each rung's warps waited, rung by rung: one bar per rung, split into the stall reasons (ncu's warp
    states), each as a share of the warp cycles an issued instruction spent waiting. Every reason among some
    rung's `top` largest gets its own colour (STALL_COLORS), so the reasons a lesson argues about show; the rest
    are "other". The total (warp cycles per issued instruction) is written after each bar: a short bar of the
    same mix is a faster rung."""
    found = {results.rung_label(w): w["metrics"] for w in warp_states}
    shown = [label for label in labels if label in found]
    totals = {label: {r: found[label].get(f"stall_{r}") or 0.0 for r in profile.STALL_REASONS} for label in shown}
    lead = sorted({r for t in totals.values() for r, _ in sorted(t.items(), key=lambda x: -x[1])[:top]},
                  key=lambda r: -max(t[r] / max(sum(t.values()), 1e-9) for t in totals.values()))
    fig, ax = plt.subplots(figsize=(8.5, 0.42 * len(shown) + 1.4))
    for y, label in enumerate(shown):
        t, left = totals[label], 0.0
        whole = sum(t.values()) or 1.0
        for r in [*lead, "other"]:
            share = (whole - sum(t[x] for x in lead)) / whole if r == "other" else t[r] / whole
            ax.barh(y, share, left=left, color="0.8" if r == "other" else STALL_COLORS[r],
                    label=("other" if r == "other" else verdicts.STALL_NAMES[r]) if y == 0 else None)
            left += share
        ax.text(1.01, y, f"{found[label]['cycles_per_issue']:.1f}", va="center", fontsize=8)
    ax.set_yticks(range(len(shown)), shown, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlim(0, 1)
    ax.set_xlabel("each state's share of the warp cycles spent not issuing (\"not selected\": ready, another warp "
                  "issued)\nafter each bar: warp cycles per issued instruction (these states and the issuing warp's 1)",
                  fontsize=9)
    ax.set_title(f"Why warps waited, rung by rung\n{source}", fontsize=10)
    _legend_outside(ax, title="warp state", title_fontsize=8).set_bbox_to_anchor((1.08, 1.0))
    fig.tight_layout()
    return fig


PHASE_COLORS = ["#4c72b0", "#dd8452", "#55a868", "#c44e52", "#8172b3", "#937860"]


def host_timeline(rows: list[dict], source: str):
    """One matmul call's host time, step by step (ladder.launch's "phases"): a horizontal stacked bar per path
    that has them (rung 6's launcher before, ladder.ops.matmul after), each path's whole call as a tick on its bar,
    torch.matmul's whole call as a line."""
    paths = [r for r in rows if r["op"] == "matmul" and r.get("phases")]
    paths.sort(key=lambda r: -r["us"])   # the slower path (before) on top
    fig, ax = plt.subplots(figsize=(9, 0.8 * len(paths) + 1.4))
    color = iter(PHASE_COLORS)
    for y, r in enumerate(paths):
        left = 0.0
        for step, us in r["phases"]:
            ax.barh(y, us, left=left, height=0.6, color=next(color), label=f"{r['call']}: {step} ({us:.1f} µs)")
            left += us
        # the call timed in one piece: its steps, each timed alone, sum to less (what lies between them)
        ax.plot([r["us"]] * 2, [y - 0.4, y + 0.4], color="k", lw=2.2,
                label="black tick: the path's whole call, timed in one piece" if y == 0 else None)
        ax.text(r["us"], y, f" {r['us']:.1f} µs", ha="left", va="center", fontsize=8)   # no step lies right of it
    anchor = paths[0]["anchor_us"]
    ax.axvline(anchor, color="k", ls=":", lw=1.2, label=f"torch.matmul, its whole call: {anchor:.1f} µs")
    ax.set_yticks(range(len(paths)), [r["call"] for r in paths], fontsize=8)
    ax.set_ylim(len(paths) - 0.5, -0.5)
    ax.set_xlim(0, 1.15 * max(max(r["us"] for r in paths), anchor))   # room right of the longest call for its µs
    ax.set_xlabel(f"host µs per call, each step timed on its own (matmul {'×'.join(map(str, paths[0]['shape']))})")
    ax.set_title(source, fontsize=9)
    ax.legend(loc="upper left", bbox_to_anchor=(0.0, -0.22), fontsize=8, frameon=False)
    return fig


def shape_grid(ratios: dict[tuple, dict[str, float]], names: dict[tuple, str], source: str):
    """× cuBLAS per shape (ladder.lessons.l06_shipping_a_kernel.grid_ratios) as a heat map: a row per shape (`names`
    gives each a label), a column per kernel; green where ours is faster than cuBLAS, red where slower, the number in
    each cell."""
    shapes = list(names)
    columns = list(next(iter(ratios.values())))
    values = np.array([[ratios[s][c] for c in columns] for s in shapes])
    fig, ax = plt.subplots(figsize=(6.5, 0.24 * len(shapes) + 1.2))
    image = ax.imshow(values, cmap="RdYlGn", norm=TwoSlopeNorm(1.0, vmin=min(0.2, values.min()),
                                                               vmax=max(1.3, values.max())), aspect="auto")
    for (i, j), x in np.ndenumerate(values):   # white on the darkest cells, black elsewhere
        red, green, blue, _ = image.cmap(image.norm(x))
        dark = 0.299 * red + 0.587 * green + 0.114 * blue < 0.45
        ax.text(j, i, f"{x:.2f}", ha="center", va="center", fontsize=7, color="white" if dark else "black")
    ax.set_xticks(range(len(columns)), columns, fontsize=8)
    ax.xaxis.tick_top()
    ax.set_yticks(range(len(shapes)), [f"{names[s]}  {'×'.join(map(str, s))}" for s in shapes], fontsize=7)
    fig.colorbar(image, ax=ax, label="× cuBLAS (over 1: faster than cuBLAS)", shrink=0.6)
    ax.set_title(source, fontsize=9, pad=22)
    return fig


def backward_roofline(rows: list[dict], problem, shape: tuple, ceilings: dict, datasheet: dict | None, source: str):
    """Lesson 04d: the attention-backward rungs at `shape` on the roofline, FLOPs counted as 2.5x the forward's,
    each placed by the fewest bytes it must move: rungs 2-4 and SDPA the problem's minimum; rung 1 that plus its
    probabilities P (B·H·S² fp32) written by the forward and read by the backward once. Recomputation buys the
    move to the right: rungs 2-4 run more matmuls than the FLOPs counted, and need none of P's bytes."""
    B, H, S, D, _ = shape
    flops = problem.flops(tuple(shape))
    p_bytes = 2 * 4 * B * H * S * S
    pts = []
    for r in rows:
        if r["problem"] != problem.name or tuple(r["shape"]) != tuple(shape):
            continue
        moved = problem.min_bytes(tuple(shape)) + (p_bytes if r["rung"] == "1_materialized" else 0)
        pts.append(roofline.Point(f"{r['backend']}:{r['rung']}", flops / moved, r["tflops"], r["backend"]))
    title = (f"attention backward {'x'.join(map(str, shape))}: FLOPs 2.5x the forward's; placed by the fewest bytes "
             f"(rung 1: + P written and read once)\n{source}")
    return roofline.plot(_with_units(pts, rows, problem), ceilings, datasheet, source=source, title=title).figure
