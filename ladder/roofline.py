"""The roofline model and its plot.

attainable(I) = min(peak compute, I x bandwidth), with I the arithmetic intensity in FLOP/byte.
The ridge point I* = peak / bandwidth separates memory-bound (left) from compute-bound (right).
Which roof bounds a rung depends on the unit its math runs on, on a given GPU (`compute_unit`, `unit`); a GPU
from its datasheet row (`datasheet_gpu`) stands in for one that is not here, as the recording's GPU does on a
machine without one, and `gpu_model` bounds every rung of a ladder on it (a lesson's "what a T4 would do").

The plot: measured roofs solid, datasheet roofs dashed, each labelled where it runs; every rung is a
marker whose glyph is the rung's number (the same in every lesson) on its backend's colour and shape
(CUDA a circle, Triton a square, the library a diamond: told apart without colour; the shape grows to hold a
wide number), named in a key beside the axes, so no label sits on the data. A second panel zooms on the top
decade, where the best rungs crowd: their numbered marks are drawn there only (a grey box in the first panel,
with a dot at each rung's place, stands for them), and marks that would hide one another are set beside their
places at their own heights, off the roofs, each with a leader from a small mark at its true place (`spread`).
A rung profiled by ncu is placed twice on one horizontal line: by the bytes it moved from DRAM (filled) and by
the bytes the SMs moved through L2 (hollow); the one nearer its roof binds. Faint arrows step up each ladder,
bent around other rungs' marks, none where two rungs nearly meet (`_draw_arrows`). Roof labels keep off the
marks, each other, the other roofs and the lines between marks; a roof with no room is named in the key.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from ladder.runtime.hardware import GPU, datasheet_for

ROOFS = {"fp32_TFLOPs": "fp32 CUDA cores", "fp16_tc_TFLOPs": "fp16 tensor cores"}
# Instruction roofs (ladder.ceilings: microbenchmarks of one tensor-core instruction), drawn only where measured:
# recordings made before them, and GPUs without the instruction (wgmma off Hopper), have none.
INSTRUCTION_ROOFS = {"mma_sync_TFLOPs": "mma.sync", "wgmma_TFLOPs": "wgmma"}


def with_tensor_core_roof(ceilings: dict) -> dict:
    """`ceilings` with the tensor-core roof (fp16_tc_TFLOPs) set to the highest instruction roof measured, and
    cuBLAS's speed under its own name; ceilings written when fp16_tc_TFLOPs held cuBLAS's speed are read so too."""
    out = dict(ceilings)
    if "cublas_TFLOPs" not in out and "fp16_tc_TFLOPs" in out:   # written before the roof was an instruction's
        out["cublas_TFLOPs"] = out.pop("fp16_tc_TFLOPs")
    measured = [out[k] for k in INSTRUCTION_ROOFS if out.get(k)]
    if measured:
        out["fp16_tc_TFLOPs"] = max(measured)
    else:
        out.pop("fp16_tc_TFLOPs", None)
    return out


ROOF_COLORS = {"fp32_TFLOPs": "tab:orange", "fp16_tc_TFLOPs": "tab:red", "mma_sync_TFLOPs": "tab:olive",
               "wgmma_TFLOPs": "tab:brown"}
# What each roof is, as measured (ladder.ceilings) and on the datasheet. The measured tensor-core roof is the
# highest instruction roof, drawn once, under that instruction's name; cuBLAS is a point, not a roof.
ROOF_NAMES = {"measured": {"copy_TBps": "DRAM copy", "l2_TBps": "L2 read", "fp32_TFLOPs": "FMA kernel",
                           **INSTRUCTION_ROOFS},
              "datasheet": {"copy_TBps": "HBM datasheet", "fp32_TFLOPs": "fp32 datasheet",
                            "fp16_tc_TFLOPs": "fp16 tensor-core datasheet"}}
BANDWIDTHS = ("copy_TBps", "l2_TBps")
BACKEND_COLORS = {"cuda": "tab:green", "triton": "tab:blue", "torch": "tab:gray"}
BACKEND_MARKERS = {"cuda": "o", "triton": "s", "torch": "D"}
# Glyphs of the library rungs (the rungs of ours carry their number: "3b_register_blocked" -> 3b).
LIBRARY_GLYPHS = {"cublas": "cB", "sdpa": "S", "sdpa_flash": "FA", "add": "+", "three_ops": "3op",
                  "compile": "tc", "fused": "F"}


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
    intensity: float   # FLOP/byte: by the problem's minimum bytes, or by the DRAM bytes ncu measured
    tflops: float      # achieved
    backend: str = "cuda"
    l2_intensity: float | None = None   # FLOP per L2 byte (ncu, the count l2_counter names), when profiled
    l2_counter: str = "l2_bytes"  # which ncu count of L2 bytes l2_intensity divides by (L2_COUNTERS)
    unit: str | None = None   # what does its math: "CUDA cores", "mma.sync", "wgmma" (see `unit`), said in the key
    dram: bool = False        # intensity by the DRAM bytes ncu measured (else by bytes counted: the title says how)

    @property
    def glyph(self) -> str:
        """The rung's mark, the same in every lesson: its number ("3b"), or a library rung's initials."""
        name = self.label.split(":")[-1]
        number = re.match(r"\d+[a-z]?(?=_|$)", name)
        return number.group(0) if number else LIBRARY_GLYPHS.get(name, name[:1].upper())


def datasheet_gpu(name: str):
    """The GPU of `name`'s datasheet row (ladder.runtime.hardware), as a model: its limits and peak rates, no device."""
    sheet = datasheet_for(name)
    if sheet is None:
        raise ValueError(f"no datasheet row matches {name!r}")
    return GPU(sheet.name, sheet.capability, sheet.sm_count, 0, sheet.smem_per_block_bytes, 0, sheet)


def compute_unit(problem, rung, gpu) -> str:
    """What does a rung's arithmetic on `gpu`: the tensor cores, or the CUDA cores where it needs none or its
    tensor-core path falls back to them there (Triton's tl.dot before sm_80). The anchors (cuBLAS, SDPA) use
    the unit of the problem's compute roof."""
    if rung.backend == "torch":
        return "tensor cores" if problem.compute_roof == "fp16_tc_TFLOPs" else "CUDA cores"
    if rung.needs not in ("tensor_cores", "wgmma", "tma"):   # the TMA rungs feed wgmma
        return "CUDA cores"
    if rung.fallback and not gpu.has(rung.fallback[0]) and "CUDA cores" in rung.fallback[1]:
        return "CUDA cores"
    return "tensor cores"


def unit(problem, rung, gpu) -> str:
    """The unit and instruction a rung's math runs on, on `gpu`: "CUDA cores" (FMA/FADD: rungs without tensor cores,
    and tl.dot before sm_80), "mma.sync" (HMMA: CUDA rungs 4-6; Triton's tl.dot on sm_80-89), "wgmma" (HGMMA: CUDA
    rungs 7-8; Triton's tl.dot on Hopper, as tests/test_matmul_triton.py finds in its SASS), or "tensor cores" for a
    library anchor (cuBLAS, SDPA), whose instruction is the library's choice."""
    where = compute_unit(problem, rung, gpu)
    if where == "CUDA cores" or rung.backend == "torch":
        return where
    if rung.needs in ("wgmma", "tma") or (rung.backend == "triton" and gpu.capability == (9, 0)):
        return "wgmma"
    return "mma.sync"


def _rate(tflops: float) -> str:
    """One decimal, or three significant figures below 1 TFLOP/s (a memory-bound rate would print 0.1)."""
    return f"{tflops:.1f}" if tflops >= 1 else f"{tflops:.3g}"


def gpu_model(problem, shape: tuple, name: str = "T4", moved=None) -> str:
    """What each rung does on the GPU of `name`'s datasheet and the least time it could take there at `shape`:
    the roofline bound max(FLOPs / peak of the unit it uses, bytes / DRAM bandwidth), the bytes `moved(rung name,
    shape)` where given (a rung that moves more than the problem's minimum), else the problem's minimum. A model
    from the datasheet, never a measurement; the same for every reader."""
    gpu = datasheet_gpu(name)
    sheet = gpu.datasheet
    flops = problem.flops(shape)
    moved = moved or (lambda rung_name, s: problem.min_bytes(s))
    peak = {"tensor cores": sheet.fp16_tc_TFLOPs, "CUDA cores": sheet.fp32_TFLOPs}
    lines = [f"model, not a measurement: {sheet.name} ({gpu.arch}) from its datasheet: {sheet.hbm_TBps * 1000:.0f} GB/s, "
             f"fp32 {sheet.fp32_TFLOPs} TFLOP/s, fp16 tensor cores {sheet.fp16_tc_TFLOPs} TFLOP/s; shape {shape}",
             f"{'rung':24s} {'bound by':13s} {'at least ms':>11s} {'at most TFLOP/s':>15s}  how it runs there"]
    for rung in problem.rungs:
        reason = rung.unavailable_reason(gpu)
        if reason:
            lines.append(f"{rung.label:24s} {'-':13s} {'-':>11s} {'-':>15s}  N/A: {reason.split(': ', 1)[-1]}")
            continue
        where = compute_unit(problem, rung, gpu)
        compute_ms = flops / (peak[where] * 1e12) * 1e3
        memory_ms = moved(rung.name, shape) / (sheet.hbm_TBps * 1e12) * 1e3
        ms, bound_by = max((compute_ms, where), (memory_ms, "DRAM"))
        how = rung.fallback_note(gpu) or "as on any GPU"
        tflops = flops / ms / 1e9
        lines.append(f"{rung.label:24s} {bound_by:13s} {ms:11.3f} {_rate(tflops):>15s}  {how}")
    return "\n".join(lines)


def points(rows: list[dict], problem, shape: tuple | None = None) -> list[Point]:
    """Roofline points for the runs of `problem` (at `shape`, default: its largest benchmark shape)."""
    shape = list(shape or problem.bench_shapes[-1])
    return [Point(f"{r['backend']}:{r['rung']}", problem.intensity(tuple(r["shape"])), r["tflops"], r["backend"])
            for r in rows if r["problem"] == problem.name and r["shape"] == shape]


# The two counts of L2 bytes a profile may hold, as the roofline's key names them, the first one a profile has
# placing the hollow mark: the L2's whole traffic, reads and writes (lts__t_bytes, the tables' "L2 GB", so a figure
# and a table show one number), else what the SMs read from L2 (TMA included)
L2_COUNTERS = {"l2_bytes": "per L2 byte", "l2_to_sm_bytes": "per byte the SMs read from L2"}


def measured_points(runs: list[dict], profiles: list[dict], problem, shape: tuple) -> list[Point]:
    """Roofline points whose intensity counts the DRAM bytes ncu measured for each rung (read + written)
    instead of the problem's minimum, and the L2 bytes beside it (all L2 traffic, the tables' count, else what
    the SMs received from L2, each point naming its count): where each rung really sits at each level. Rungs with
    no profile at `shape` are left out."""
    def l2_bytes(metrics):
        return next(((metrics[k], k) for k in L2_COUNTERS if metrics.get(k)), (None, None))

    profiled = {f"{p['backend']}:{p['rung']}": p["metrics"] for p in profiles
                if p["problem"] == problem.name and tuple(p["shape"]) == tuple(shape)}
    flops = problem.flops(tuple(shape))
    pts = []
    for r in runs:
        label = f"{r['backend']}:{r['rung']}"
        metrics = profiled.get(label)
        if r["problem"] != problem.name or tuple(r["shape"]) != tuple(shape) or not metrics:
            continue
        dram = (metrics.get("dram_bytes_read") or 0) + (metrics.get("dram_bytes_write") or 0)
        if dram:
            l2, counter = l2_bytes(metrics)
            pts.append(Point(label, flops / dram, r["tflops"], r["backend"], flops / l2 if l2 else None,
                             counter or "l2_bytes", dram=True))
    return pts


def _roof_segments(sheet: dict, tag: str, lo: float, hi: float, skip=()):
    """(label, xs, ys, color) for each roof of one sheet of ceilings, over intensities lo..hi; the flat roofs in
    `skip` are not drawn (the slopes still rise to the highest)."""
    xs = np.geomspace(lo, hi, 400)
    flat = [k for k in (*ROOFS, *INSTRUCTION_ROOFS) if sheet.get(k) and k in ROOF_NAMES[tag]]
    top = max(sheet[k] for k in flat)
    flat = [k for k in flat if k not in skip]
    names = ROOF_NAMES[tag]
    for key in BANDWIDTHS:
        if sheet.get(key) and key in names:
            ys = xs * sheet[key]
            keep = ys <= top
            yield f"{names[key]} {sheet[key]:.2f} TB/s", xs[keep], ys[keep], "tab:purple" if key == "l2_TBps" else "k"
    for key in flat:
        keep = xs >= min(sheet[key] / sheet["copy_TBps"], hi)
        yield f"{names[key]} {sheet[key]:.0f} TFLOP/s", xs[keep], np.full(keep.sum(), sheet[key]), ROOF_COLORS[key]


CROWDED = 0.08   # a datasheet roof this close (relative) to a measured flat roof is named in the key, not drawn on it


def measured_flat_roofs(ceilings: dict) -> dict[str, float]:
    """The measured flat roofs in `ceilings`, by the name the figures give them."""
    return {ROOF_NAMES["measured"][k]: ceilings[k] for k in (*ROOFS, *INSTRUCTION_ROOFS)
            if ceilings.get(k) and k in ROOF_NAMES["measured"]}


def crowded_datasheet_roofs(ceilings: dict, datasheet: dict | None) -> dict[str, float]:
    """The datasheet's flat roofs within CROWDED of a measured one: drawn, the two lines and labels would overlap."""
    measured = measured_flat_roofs(ceilings).values()
    return {k: v for k, v in (datasheet or {}).items() if k in ROOFS and v
            and any(abs(v - m) <= CROWDED * m for m in measured)}


def _draw_roofs(ax, ceilings, datasheet, lo, hi):
    crowded = crowded_datasheet_roofs(ceilings, datasheet)
    for sheet, style, tag in ((ceilings, "-", "measured"), (datasheet, "--", "datasheet")):
        if not sheet:
            continue
        for name, xs, ys, color in _roof_segments(sheet, tag, lo, hi, crowded if tag == "datasheet" else ()):
            if len(xs):
                ax.plot(xs, ys, style, color=color, lw=1.6 if tag == "measured" else 1,
                        alpha=1 if tag == "measured" else 0.55, zorder=1, gid=name)


def _glyph_size(size: float, glyph: str) -> float:
    """Scatter size of a rung's number on a mark of `size`: every number one height, wider numbers wider."""
    return size * 0.4 * len(glyph)


GLYPH_MARGIN = 1.0   # points between a rung's number and its shape's outline (half the outline's width included)


def mark_size(size: float, glyph: str, backend: str) -> float:
    """Scatter size of a rung's shape: `size`, or larger where the number on it would reach past the outline
    ("10" is as tall as "1" and twice as wide: on a disc of a "1"'s size it sticks out at both sides)."""
    from matplotlib.markers import MarkerStyle   # matplotlib loads only to draw (verdicts and capstone use the model)
    number = MarkerStyle(f"${glyph}$")
    outlines = number.get_transform().transform_path(number.get_path()).to_polygons(closed_only=False)
    ink = np.vstack(outlines) * np.sqrt(_glyph_size(size, glyph))
    ink = ink + GLYPH_MARGIN * ink / np.maximum(np.hypot(*ink.T), 1e-9)[:, None]   # pushed out by the margin
    shape = MarkerStyle(BACKEND_MARKERS.get(backend, "o"))
    outline = shape.get_transform().transform_path(shape.get_path())   # at scatter size 1
    scale = np.sqrt(size)
    while not outline.contains_points(ink / scale).all():
        scale *= 1.02
    return scale ** 2


def draw_mark(ax, x, y, glyph: str, backend: str, size: float, gid: str, hollow: bool = False):
    """One rung's mark: its backend's shape and colour with its number on it (hollow: white inside), the shape
    grown where the number needs it (`mark_size`). Both layers carry `gid`, which tells ladder.figcheck they are
    one mark and names it."""
    color, shape = BACKEND_COLORS.get(backend, "k"), BACKEND_MARKERS.get(backend, "o")
    outline = mark_size(size, glyph, backend)
    if hollow:
        ax.scatter(x, y, s=outline, marker=shape, facecolors="white", edgecolors=color, lw=1.4, zorder=3, gid=gid)
    else:
        ax.scatter(x, y, s=outline, marker=shape, color=color, zorder=3, gid=gid)
    # no outline on the number: stroked, a two-digit number fills a small hollow mark and it reads as filled
    ax.scatter(x, y, s=_glyph_size(size, glyph), marker=f"${glyph}$", color=color if hollow else "white", zorder=4,
               linewidths=0, gid=gid)


def mark_extent(ax, glyph: str, backend: str, size: float) -> tuple[float, float]:
    """(width, height) in pixels of a rung's mark: its shape, which holds its number (`mark_size`)."""
    from matplotlib.markers import MarkerStyle   # matplotlib loads only to draw
    style = MarkerStyle(BACKEND_MARKERS.get(backend, "o"))
    box = style.get_path().get_extents(style.get_transform())
    to_pixels = np.sqrt(mark_size(size, glyph, backend)) * ax.figure.dpi / 72
    return box.width * to_pixels, box.height * to_pixels


MARK_GAP = 4.0   # pixels between two marks set side by side (their outlines are drawn half outside them)
TRUE_PLACE = 14   # points² of the small mark at a rung's true place when its numbered mark is set beside it
LEADER_WIDTH = 2.0   # pixels: the band along a leader that no other mark may cover
REACH = 4   # marks' widths a mark may be set from its place


def spread(ax, places: list[tuple[float, float]], extents: list[tuple[float, float]],
           roofs: np.ndarray | None = None, sides: tuple[int, ...] = (-1, 1)) -> list[tuple[float, float]]:
    """The (x, y) (data) to draw each mark at, so that a reader can tell every mark and every true place apart.

    Marks are given by their places in data and their (width, height) in pixels. Of two marks that would overlap
    at their places the later is set aside, and both are where either, left there, would hide the other's true
    place (drawn as a small mark). In order, each mark set aside moves sideways, a mark's width at a time,
    to the `sides` in their order (-1 left, 1 right: by default left first, as roofs are labelled from their right
    end) — its height is the measurement, which a reader reads off the axis — to the nearest place inside the axes
    where it covers no other mark, no true place, no other mark's leader and none of `roofs` (pixels along the roof
    lines: a mark on a roof reads as a point of it), and where its own leader, from its true place, runs through
    no other mark and across no roof (the mark would read as on the roof's other side). Where no place within
    REACH marks' widths spares its leader both, the nearest that spares it the roofs, then one up to twice as far
    that does, else the nearest within REACH that meets the rest, rightwards first; else, where left at its
    place it would cover another's true place, one up to REACH heights above or below (its height then off); with
    none, it stays at its place (a longer leader is hard to follow back; ladder.figcheck says what it hides). The
    axes' limits must be set."""
    from itertools import combinations
    from matplotlib.transforms import Bbox   # matplotlib loads only to draw
    roofs = np.empty((0, 2)) if roofs is None else roofs
    pixels = ax.transData.transform(places)

    def box_at(i, x, y):
        w, h = extents[i]
        return Bbox.from_bounds(x - w / 2, y - h / 2, w, h)

    at_place = [box_at(i, *xy) for i, xy in enumerate(pixels)]
    radius = np.sqrt(TRUE_PLACE) * ax.figure.dpi / 72 * 0.75 + MARK_GAP / 2   # a small diamond's half diagonal, a gap
    dot = [Bbox.from_bounds(px - radius, py - radius, 2 * radius, 2 * radius) for px, py in pixels]
    overlapping = [(i, j) for i, j in combinations(range(len(places)), 2)
                   if at_place[i].overlaps(at_place[j].padded(MARK_GAP / 2))]
    aside = {k for i, j in overlapping if at_place[i].overlaps(dot[j]) or at_place[j].overlaps(dot[i]) for k in (i, j)}
    for i, j in overlapping:
        if not aside & {i, j}:
            aside.add(j)
    taken = [box.padded(MARK_GAP / 2) for i, box in enumerate(at_place) if i not in aside]
    dots_shown = [dot[i] for i in aside]
    leaders, drawn = [], list(places)

    def leader_to(i, x, y):   # a horizontal or a vertical line from the true place
        px, py = pixels[i]
        return Bbox([[min(px, x) - (x == px) * LEADER_WIDTH / 2, min(py, y) - (y == py) * LEADER_WIDTH / 2],
                     [max(px, x) + (x == px) * LEADER_WIDTH / 2, max(py, y) + (y == py) * LEADER_WIDTH / 2]])

    def free(i, xy, leader_spares_marks: bool, leader_spares_roofs: bool) -> bool:
        box, leader = box_at(i, *xy), leader_to(i, *xy)
        return ax.bbox.x0 <= box.x0 and box.x1 <= ax.bbox.x1 and ax.bbox.y0 <= box.y0 and box.y1 <= ax.bbox.y1 \
            and not any(box.overlaps(t) for t in (*taken, *dots_shown, *leaders)) \
            and not _covers(box.padded(MARK_GAP / 2), roofs) \
            and not (leader_spares_marks and any(leader.overlaps(t) for t in taken)) \
            and not (leader_spares_roofs and _covers(leader.padded(1.0), roofs))   # roofs are sampled 2 px apart

    for i in sorted(aside):
        (px, py), (w, h) = pixels[i], extents[i]
        sideways = [(px + side * k * (w + MARK_GAP), py) for k in range(1, REACH + 1) for side in sides]
        further = [(px + side * k * (w + MARK_GAP), py) for k in range(REACH + 1, 2 * REACH + 1) for side in sides]
        # strictest first; a longer leader before one across a roof (the mark would read as on its other side)
        # across a roof, rightwards first: every sloped roof rises to the right, so a mark set right of its place
        # stays under each roof it was under (set left of a place on a slope, it would read as above the roof)
        rightwards = sorted(sideways, key=lambda xy: (xy[0] < px, abs(xy[0] - px)))
        tries = [(sideways, (True, True)), (sideways, (False, True)), (further, (False, True)),
                 (rightwards, (False, False))]
        if any(at_place[i].contains(*pixels[j]) for j in aside if j != i):
            # left at its place it would cover another's true place: above or below (its height then off)
            upright = [(px, py + side * k * (h + MARK_GAP)) for k in range(1, REACH + 1) for side in (1, -1)]
            tries.append((upright, (False, False)))
        xy = next((xy for where, rule in tries for xy in where if free(i, xy, *rule)), None)
        if xy is None:   # no room within reach: left where it is
            continue
        taken.append(box_at(i, *xy).padded(MARK_GAP / 2))
        leaders.append(leader_to(i, *xy))
        x, y = ax.transData.inverted().transform(xy)
        drawn[i] = (x, places[i][1] if xy[1] == py else y)   # a height left as it is stays the measurement
    return drawn


def _covers(box, points: np.ndarray) -> bool:
    """Whether any of `points` (pixels) lies inside `box`."""
    return bool(np.any((box.x0 < points[:, 0]) & (points[:, 0] < box.x1)
                       & (box.y0 < points[:, 1]) & (points[:, 1] < box.y1)))


def _draw_points(ax, pts, size) -> bool:
    """Every rung at its DRAM place (filled) and, where profiled, its L2 place (hollow) on one horizontal line.
    Marks that would hide one another are set beside their places (spread), off the roofs, each with a leader from
    a small mark at its true place. Returns whether any mark was set aside."""
    from ladder import figcheck   # matplotlib's, loaded only to draw
    marks = [(p, p.intensity, False) for p in pts] + [(p, p.l2_intensity, True) for p in pts if p.l2_intensity]
    roofs = np.vstack([np.empty((0, 2)), *(_pixels_along(ax, line) for line in ax.get_lines() if line.get_gid())])
    at = spread(ax, [(x, p.tflops) for p, x, _ in marks],
                [mark_extent(ax, p.glyph, p.backend, size) for p, *_ in marks], roofs)
    for p in pts:
        if p.l2_intensity:
            ax.plot([p.l2_intensity, p.intensity], [p.tflops, p.tflops], color=BACKEND_COLORS.get(p.backend, "k"),
                    lw=0.8, alpha=0.5, zorder=2)
    for (p, x, hollow), (drawn_x, drawn_y) in zip(marks, at):
        if (drawn_x, drawn_y) != (x, p.tflops):   # a small mark of its kind at the true place, a leader to the numbered
            color = BACKEND_COLORS.get(p.backend, "k")
            ax.plot([x, drawn_x], [p.tflops, drawn_y], color=color, lw=0.8, zorder=2)
            ax.scatter(x, p.tflops, s=TRUE_PLACE, marker=BACKEND_MARKERS.get(p.backend, "o"), zorder=2.5,
                       facecolors="white" if hollow else color, edgecolors=color, lw=1.0,
                       gid=f"{figcheck.PLACE}{p.label}{' (L2)' if hollow else ''}")
        draw_mark(ax, drawn_x, drawn_y, p.glyph, p.backend, size, f"{p.label} (L2)" if hollow else p.label, hollow)
    return any(xy != (x, p.tflops) for (p, x, _), xy in zip(marks, at))


ARROW_SHRINK = 8.0   # points an arrow stops short of each end's place, clear of the mark there
SHORTEST_ARROW = 12.0   # pixels of shaft (twice an arrowhead) an arrow needs to read as a step
ARROW_BENDS = (0.0, 0.2, -0.2, 0.4, -0.4)   # arc3 bends tried in turn: straight where nothing is in the way


def _rung_order(p: Point) -> tuple:
    """Where a rung stands in its ladder: by its number ("3b" after "3", before "4")."""
    number = re.match(r"(\d+)(.*)", p.glyph)
    return (int(number.group(1)), number.group(2)) if number else (float("inf"), p.glyph)


def _rung_of(gid: str | None) -> str:
    """The rung a marker's gid names, without the prefix and suffixes `_draw_points` and `plot` add to it (a rung's
    label holds no space or comma)."""
    from ladder import figcheck   # matplotlib's, loaded only to draw
    return re.match(r"[^ ,]*", (gid or "").removeprefix(figcheck.PLACE)).group(0)


def _arrow_crosses(start, end, bend: float, shrink: float, boxes) -> bool:
    """Whether an arc3 arrow from `start` to `end` (pixels) of this `bend`, `shrink` pixels short of both ends,
    runs through any of `boxes`."""
    (x0, y0), (x1, y1) = start, end
    control = np.array([(x0 + x1) / 2 + bend * (y1 - y0), (y0 + y1) / 2 - bend * (x1 - x0)])   # as arc3 bends
    t = np.linspace(0, 1, 200)[:, None]
    curve = (1 - t) ** 2 * np.asarray(start) + 2 * t * (1 - t) * control + t ** 2 * np.asarray(end)
    shaft = curve[(np.hypot(*(curve - start).T) > shrink) & (np.hypot(*(curve - end).T) > shrink)]
    return any(_covers(box, shaft) for box in boxes)


def _draw_arrows(ax, pts, shown) -> tuple[bool, bool]:
    """Each backend's ladder, in rung order, rung to rung between the rungs' DRAM places; a step between two
    rungs not `shown` (both in the zoomed top decade) is left to the zoom. A step too short to read (two rungs at
    nearly one place) gets no arrow: such stubs stack into a pile of arrowheads along the longer steps. An arrow
    bends, as little as it can, around other rungs' marks. A rung set aside is met at its numbered mark, not at
    its small one: near the rung it was set aside from, an arrow to the small mark points at both. Returns
    (whether any step was drawn, whether any was left out as too short)."""
    from ladder import figcheck   # matplotlib's, loaded only to draw
    marks = figcheck.markers(ax)
    set_aside = {_rung_of(gid) for gid, _, _ in marks if (gid or "").startswith(figcheck.PLACE) and "(L2)" not in gid}
    numbered = {gid: box for gid, _, box in marks}

    def meets(p):   # pixels: where p's steps begin and end
        if p.label in set_aside and p.label in numbered:
            return np.array(numbered[p.label].get_points().mean(axis=0))
        return ax.transData.transform((p.intensity, p.tflops))

    shrink = ARROW_SHRINK * ax.figure.dpi / 72
    to_data = ax.transData.inverted()
    drawn = short = False
    for backend in dict.fromkeys(p.backend for p in pts if p.backend != "torch"):
        ladder = sorted((p for p in pts if p.backend == backend), key=_rung_order)
        for a, b in zip(ladder, ladder[1:]):
            if a not in shown and b not in shown:
                continue
            places = ax.transData.transform([(a.intensity, a.tflops), (b.intensity, b.tflops)])
            if np.hypot(*(places[1] - places[0])) - 2 * shrink < SHORTEST_ARROW:
                short = True
                continue
            start, end = meets(a), meets(b)
            others = [box for gid, _, box in marks if _rung_of(gid) not in (a.label, b.label)]
            bend = next((rad for rad in ARROW_BENDS if not _arrow_crosses(start, end, rad, shrink, others)), 0.0)
            ax.annotate("", to_data.transform(end), to_data.transform(start), zorder=2,
                        arrowprops=dict(arrowstyle="->", color=BACKEND_COLORS.get(backend, "k"), alpha=0.35,
                                        shrinkA=ARROW_SHRINK, shrinkB=ARROW_SHRINK,
                                        connectionstyle=f"arc3,rad={bend}"))
            drawn = True
    return drawn, short


LABEL_GAP = 3.0   # pixels kept clear around a roof's label: two labels end to end would read as one


def _label_roofs(ax) -> set[str]:
    """Write each roof's name on the roof itself, at the first place along it where the text covers no
    marker, no other label, no other roof and no line drawn between marks: leaders, a rung's DRAM-to-L2 line,
    arrows (a line through a name hides it; tried from the right end of the roof leftwards). Returns the
    names written."""
    from ladder import figcheck   # matplotlib's, loaded only to draw
    placed = set()
    renderer = ax.figure.canvas.get_renderer()
    taken = [box for _, _, box in figcheck.markers(ax)]
    roofs = [line for line in ax.get_lines() if line.get_gid()]
    between_marks = [_pixels_along(ax, line) for line in ax.get_lines() if not line.get_gid()]
    between_marks += [_resampled(polygon) for text in ax.texts if getattr(text, "arrow_patch", None)
                      for polygon in text.arrow_patch.get_transform().transform_path(
                          text.arrow_patch.get_path()).to_polygons(closed_only=False)]
    # flat roofs first: a sloped label's box is far larger than its text and would shut them out
    for line in sorted(roofs, key=lambda line: not _flat(line)):
        xs, ys = line.get_data()
        inside = [(x, y) for x, y in zip(xs, ys) if _in_view(ax, x, y)]
        flat = _flat(line)
        crossing = np.vstack([np.empty((0, 2)), *between_marks,
                              *(_pixels_along(ax, other) for other in roofs if other is not line)])
        angle = 0.0 if flat else _slope_degrees(ax, line)
        cos, sin = np.cos(np.radians(angle)), np.sin(np.radians(angle))
        spots = [(x, y, side) for side in (1, -1) for x, y in reversed(inside[:: max(1, len(inside) // 48)])]
        for x, y, side in spots:
            # set back 2 points along the roof and 3 off it, to the side tried
            offset = (-2 * cos - 3 * side * sin, -2 * sin + 3 * side * cos)
            text = ax.annotate(line.get_gid(), (x, y), xytext=offset, textcoords="offset points", fontsize=7,
                               color=line.get_color(), ha="right", va="bottom" if side > 0 else "top",
                               rotation=angle, rotation_mode="anchor")
            box = text.get_window_extent(renderer).padded(LABEL_GAP)
            if ax.bbox.contains(box.x0, box.y0) and ax.bbox.contains(box.x1, box.y1) \
                    and not any(box.overlaps(t) for t in taken) and not _crosses(text, renderer, crossing):
                taken.append(box)
                placed.add(line.get_gid())
                break
            text.remove()
    return placed


def _crosses(text, renderer, points: np.ndarray) -> bool:
    """Whether any of `points` (pixels) lies within LABEL_GAP of `text`'s own rectangle, rotated as it is drawn
    (its window extent, upright, would take in a sloped roof's neighbours wherever it stood)."""
    if not len(points):
        return False
    angle = np.radians(text.get_rotation())
    text.set_rotation(0)
    upright = text.get_window_extent(renderer)
    text.set_rotation(np.degrees(angle))
    # the anchor (right end; bottom or top) is the one corner of the upright box that rotation leaves in place
    anchor = np.array([upright.x1, upright.y0 if text.get_va() == "bottom" else upright.y1])
    d = points - anchor
    along = d[:, 0] * np.cos(angle) + d[:, 1] * np.sin(angle)
    across = -d[:, 0] * np.sin(angle) + d[:, 1] * np.cos(angle)
    low, high = (0, upright.height) if text.get_va() == "bottom" else (-upright.height, 0)
    return bool(np.any((-upright.width - LABEL_GAP < along) & (along < LABEL_GAP)
                       & (low - LABEL_GAP < across) & (across < high + LABEL_GAP)))


def _pixels_along(ax, line, step: float = 2.0) -> np.ndarray:
    """Points every `step` pixels along a line, in pixels."""
    return _resampled(ax.transData.transform(np.column_stack(line.get_data())), step)


def _resampled(pixels: np.ndarray, step: float = 2.0) -> np.ndarray:
    """Points every `step` pixels along the polyline through `pixels`."""
    along = np.concatenate([[0], np.cumsum(np.hypot(*np.diff(pixels, axis=0).T))])
    at = np.arange(0, along[-1] + step, step)
    return np.column_stack([np.interp(at, along, pixels[:, 0]), np.interp(at, along, pixels[:, 1])])


def _flat(line) -> bool:
    return len(set(np.round(line.get_ydata(), 9))) == 1


def _slope_degrees(ax, line) -> float:
    (x0, y0), (x1, y1) = ax.transData.transform(np.column_stack(line.get_data())[[0, -1]])
    return float(np.degrees(np.arctan2(y1 - y0, x1 - x0)))


def _in_view(ax, x, y) -> bool:
    (x0, x1), (y0, y1) = ax.get_xlim(), ax.get_ylim()
    return x0 <= x <= x1 and y0 <= y <= y1


def _plain_ticks(axis, low: float, high: float, ticker):
    """A zoom's ticks as plain numbers: at 1, 2 and 5 of each decade, or, where that leaves fewer than three in
    view (the zoom spans a fraction of a decade), at round steps between `low` and `high`."""
    at = [t for t in ticker.LogLocator(subs=(1.0, 2.0, 5.0)).tick_values(low, high) if low <= t <= high]
    if len(at) < 3:
        at = [t for t in ticker.MaxNLocator(nbins=5, steps=[1, 2, 2.5, 5, 10]).tick_values(low, high)
              if low <= t <= high]
    axis.set_major_locator(ticker.FixedLocator(at))
    axis.set_major_formatter(ticker.FuncFormatter(lambda value, _: f"{value:g}"))
    axis.set_minor_locator(ticker.NullLocator())


ZOOM_ROOF = 1.6   # the zoom reaches up to the highest roof when it is at most this far above the fastest rung
ZOOM_SIDE = 1.15   # the least room (a factor) the zoom leaves left and right of its outermost rungs


def _zoom_limits(pts, roof_top: float):
    """The top decade: rungs within 10x of the fastest, up to the highest flat roof where it is near (within
    ZOOM_ROOF), so the gap from the fastest rung to its ceiling shows; at the sides, room for the marks `spread`
    sets beside the outermost: half as many decades as the zoom spans in height, at least ZOOM_SIDE and at most a
    factor of 2 (a sloped roof then crosses the zoom at about its slope in the main panel, not near-vertical, and
    marks between two sloped roofs find room there)."""
    best = max(p.tflops for p in pts)
    top = [p for p in pts if p.tflops >= best / 10]
    xs = [x for p in top for x in (p.intensity, p.l2_intensity) if x]
    ys = [p.tflops for p in top]
    low, high = min(ys) / 1.08, (roof_top * 1.05 if best < roof_top <= ZOOM_ROOF * best else max(ys) * 1.12)
    side = min(2.0, max(ZOOM_SIDE, np.sqrt(high / low)))
    return (min(xs) / side, max(xs) * side), (low, high)


def plot(pts: list[Point], ceilings: dict, datasheet: dict | None = None, source: str = "",
         ax=None, title: str | None = None, arrows: bool = True, zoom: bool = True):
    """Roofs, rungs and the key; with `zoom`, a second panel on the top decade. Returns the main Axes."""
    import matplotlib.pyplot as plt   # matplotlib loads only to draw
    from matplotlib import ticker
    from matplotlib.lines import Line2D
    from matplotlib.patches import Rectangle

    best = max((p.tflops for p in pts), default=0)
    top = [p for p in pts if p.tflops >= best / 10]
    # a zoom on one rung shows nothing new, nor one on the library's marks alone
    zoom = zoom and len(top) > 1 and any(p.backend != "torch" for p in top)
    if ax is None:
        fig, axes = plt.subplots(1, 2 if zoom else 1, figsize=(12.5 if zoom else 8, 5.2),
                                 squeeze=False, gridspec_kw={"wspace": 0.22})
        ax, zoom_ax = axes[0][0], (axes[0][1] if zoom else None)
    else:
        fig, zoom_ax = ax.figure, None
    xs_seen = [x for p in pts for x in (p.intensity, p.l2_intensity) if x] or [1.0]
    roof_top = max(ceilings.get(k) or 0 for k in (*ROOFS, *INSTRUCTION_ROOFS))
    lo = min(min(xs_seen) / 4, 0.05)
    hi = max(max(xs_seen) * 4, 4 * ridge(ceilings["copy_TBps"], roof_top))
    ys_seen = [p.tflops for p in pts] or [roof_top]
    # With a zoom, the top decade's rungs are drawn there only: at the main panel's scale they would pile up
    below = [p for p in pts if p not in top] if zoom_ax is not None else pts
    panels = [(ax, (lo, hi), (min(min(ys_seen) / 3, 0.01 * roof_top), 3 * roof_top), below, 170)]
    if zoom_ax is not None:
        panels.append((zoom_ax, *_zoom_limits(pts, roof_top), top, 120))
    from ladder import figcheck   # matplotlib's, loaded only to draw
    set_aside = False
    for where, xlim, ylim, shown, size in panels:
        where.set(xscale="log", yscale="log", xlim=xlim, ylim=ylim, xlabel="arithmetic intensity (FLOP / byte)")
        where.grid(True, which="both", alpha=0.2)
        _draw_roofs(where, ceilings, datasheet, *xlim)
        set_aside |= _draw_points(where, shown, size)   # after the limits: spreading marks measures them in pixels
    if zoom_ax is not None:
        for axis, (low, high) in ((zoom_ax.xaxis, zoom_ax.get_xlim()), (zoom_ax.yaxis, zoom_ax.get_ylim())):
            _plain_ticks(axis, low, high, ticker)
        zoom_ax.set_title("the grey box at the left, zoomed", fontsize=9)
        zoom_ax.set_ylabel("TFLOP/s")
        (x0, x1), (y0, y1) = zoom_ax.get_xlim(), zoom_ax.get_ylim()
        ax.add_patch(Rectangle((x0, y0), x1 - x0, y1 - y0, color="0.85", zorder=0))   # no edge to cross a label
        for p in top:   # a dot at each zoomed rung's place, so the box shows where they are (and arrows keep off)
            for x in (p.intensity, p.l2_intensity):
                if x:
                    ax.scatter(x, p.tflops, s=6, color=BACKEND_COLORS.get(p.backend, "k"), zorder=1, lw=0,
                               gid=f"{figcheck.PLACE}{p.label}, zoomed")
    stepped = short = False   # whether any rung-to-rung arrow is drawn, and any step left without one
    if arrows:
        fig.canvas.draw()   # sets the marks' sizes in pixels, which the arrows bend around
        stepped, short = _draw_arrows(ax, pts, below)
        if zoom_ax is not None:   # the steps between the zoomed rungs
            in_zoom = _draw_arrows(zoom_ax, top, top)
            stepped, short = stepped or in_zoom[0], short or in_zoom[1]
    ax.set_ylabel("TFLOP/s")
    ax.set_title(title or "Roofline" + (f" — {source}" if source else ""), fontsize=10, wrap=True)
    fig.canvas.draw()
    placed = set().union(*(_label_roofs(where) for where, *_ in panels))
    unlabelled = {line.get_gid(): line for line in ax.get_lines() if line.get_gid() and line.get_gid() not in placed}
    key = [Line2D([], [], ls="", marker=BACKEND_MARKERS.get(p.backend, "o"), ms=8, color=BACKEND_COLORS.get(p.backend, "k"),
                  label=f"{p.glyph:>3s}  {p.label}: {p.tflops:.3g} TFLOP/s at {p.intensity:.3g} FLOP per {'DRAM byte' if p.dram else 'byte counted'}"
                  + (f", {p.l2_intensity:.3g} {L2_COUNTERS[p.l2_counter]}" if p.l2_intensity else "") + (f" [{p.unit}]" if p.unit else ""))
           for p in pts]
    if any(p.l2_intensity for p in pts):
        key.append(Line2D([], [], ls="", marker="o", ms=8, mfc="white", color="0.3",
                          label="filled: FLOP per DRAM byte (ncu dram__bytes); hollow: FLOP per "
                                "L2 byte (ncu lts__t_bytes, the tables' L2 GB" + (
                                    "; where an entry says so, per byte the SMs read from L2, l1tex__m_xbar2l1tex_read_bytes)"
                                    if any(p.l2_counter == "l2_to_sm_bytes" for p in pts if p.l2_intensity) else ")")))
    if stepped:
        key.append(Line2D([], [], ls="-", lw=1, marker=">", ms=4, color="0.3", alpha=0.5,
                          label="a faint arrow: the ladder's step from one rung to the next, between filled marks (a "
                                "rung set aside: its numbered mark)" + ("; none where two nearly meet" if short else "")))
    elif short:   # no arrow drawn: the key says why rather than showing one
        key.append(Line2D([], [], ls="", label="no arrows between rungs: each nearly meets the next"))
    if set_aside:
        key.append(Line2D([], [], ls="-", lw=0.8, marker="o", ms=3.5, color="0.3",
                          label="a small mark on a leader: the rung's true place, where its numbered mark would "
                                "overlap another's and is set beside it"))
    key.append(Line2D([], [], ls="-", color="0.3", label="roofs measured on this GPU (solid), datasheet (dashed)"))
    for name, line in unlabelled.items():   # roofs too close to others for their name to fit on them in any panel
        key.append(Line2D([], [], ls=line.get_linestyle(), color=line.get_color(), label=name))
    measured = measured_flat_roofs(ceilings)
    for roof, value in crowded_datasheet_roofs(ceilings, datasheet).items():
        name, near = min(measured.items(), key=lambda item: abs(item[1] - value))
        key.append(Line2D([], [], ls="", label=f"{ROOF_NAMES['datasheet'][roof]} {value:.0f} TFLOP/s: not drawn, "
                                                f"since the measured {name} roof, {near / value:.1%} of it, would "
                                                "overlap it"))
    if not ceilings.get("l2_TBps"):   # recorded before L2 was measured (ladder.ceilings.l2_TBps): no roof to draw
        key.append(Line2D([], [], ls="", label="no L2 roof: these ceilings have no measured L2 bandwidth"))
    if any(p.unit for p in pts):
        key.append(Line2D([], [], ls="", label="[unit]: what does each rung's math (CUDA cores; mma.sync = HMMA, "
                                               "wgmma = HGMMA on tensor cores)"))
    missing = [name for k, name in INSTRUCTION_ROOFS.items() if not ceilings.get(k)
               and any(p.unit == name for p in pts)]
    if missing:   # a rung on an instruction whose roof these ceilings lack (recorded before it was measured)
        key.append(Line2D([], [], ls="", label=f"no {' or '.join(missing)} roof: not measured with these ceilings"))
    fig.legend(handles=key, loc="upper left", bbox_to_anchor=(ax.get_position().x0, ax.get_position().y0 - 0.1),
               fontsize=9, frameon=False)
    return ax
