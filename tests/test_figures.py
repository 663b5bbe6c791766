"""Every figure the lessons draw, drawn from the recording on CPU, must be readable: no two texts on top
of each other (roof labels included), no text over a plotted point, no marker on another, no legend over
data (ladder.figcheck).

LESSON_FIGURES makes each figure the way its lesson's cell does (with the lesson's own arguments, in the
CPU world: the recorded runs); test_every_figure_cell_is_checked keeps that list and the notebooks in step.
"""
from __future__ import annotations

import re
from pathlib import Path

import matplotlib
import nbformat
import numpy as np
import pytest

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.transforms import Affine2D, Bbox  # noqa: E402

import kernels.attention as at  # noqa: E402
import kernels.attention_backward as ab  # noqa: E402
import kernels.matmul as mm  # noqa: E402
import kernels.matmul_bias_relu as mbr  # noqa: E402
from ladder import dispatch, figcheck, figures, problems, roofline, verdicts  # noqa: E402
from ladder.lessons.l06_shipping_a_kernel import grid_ratios  # noqa: E402
from ladder import results as results_mod  # noqa: E402

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"
rec = results_mod.load()
n = 4096
CUDA_MATMUL = mm.PROBLEM.only("cuda", "torch")
CUDA_ATTENTION = at.PROBLEM.only("cuda", "torch")
# each lesson's part of its ladder and its backend, as the lesson's first cells pick them (its `lad`)
LESSON_LADDERS = {"01": (problems.get("vector_add"), ("cuda", "triton")),
                  "02a": (CUDA_MATMUL.span("cuda", "1_naive", "6_autotuned"), "cuda"),
                  "02b": (CUDA_MATMUL.span("cuda", "6_autotuned", "9_persistent"), "cuda"),
                  "02c": (CUDA_MATMUL.span("cuda", "9_persistent", "12_autotuned"), "cuda"),
                  "03": (mm.PROBLEM.only("triton", "torch"), "triton"),
                  "04a": (CUDA_ATTENTION.span("cuda", "1_naive", "3_fused"), "cuda"),
                  "04b": (CUDA_ATTENTION.span("cuda", "3_fused", "6_autotuned"), "cuda"),
                  "04c": (at.PROBLEM.only("triton", "torch"), "triton"),
                  "04e": (at.PROBLEM.only("cuda", "torch", "triton:7_tma").span("cuda", "6_autotuned", "9_pingpong"),
                          "cuda"),
                  "04f": (CUDA_ATTENTION.span("cuda", "10_intra_overlap", "11_fast_exp2"), "cuda")}


def _ladder(lesson: str) -> verdicts.Ladder:
    """The lesson's `lad`: on CPU, the recorded rows of its rungs."""
    return verdicts.Ladder(*LESSON_LADDERS[lesson])


def _roofline(lesson: str, profiles: list[dict], shape: tuple, what: str):
    lad = _ladder(lesson)
    return figures.ladder_roofline(lad.rows, profiles, lad.problem, shape, lad.roofs, lad.datasheet, lad.label, what)


def _speed_bars(lesson: str):
    lad = _ladder(lesson)
    return figures.speed_bars(lad.rows, lad.problem.bench_shapes, lad.label)


def _square_matmuls():
    return [r for r in rec.runs("matmul") if r["backend"] != "triton" and len(set(r["shape"])) == 1]


def _attention_memory():
    sizes, memory = [512, 1024, 2048, 4096, 8192, 16384], rec.data["gpu"]["memory_bytes"]
    curves = {"rungs 1-2 (S×S fp32 in DRAM)": [at.peak_bytes("triton:1_naive", (4, 32, S, 64, 0)) for S in sizes],
              "fused rungs 3-6 (Q, K, V, O)": [at.peak_bytes("triton:3_fused", (4, 32, S, 64, 0)) for S in sizes]}
    return figures.memory_needed(curves, sizes, {rec.gpu: memory}, "sequence length S (B=4, H=32, D=64)")


def _attention_sweep():
    problem = LESSON_LADDERS["04b"][0]
    sweep = {tuple(s) for s in problem.sweep_shapes} | {at.HEADLINE[0]}
    taught = {r.label for r in problem.rungs}
    rows = [r for r in rec.runs("attention") if tuple(r["shape"]) in sweep and f"{r['backend']}:{r['rung']}" in taught]
    return figures.size_sweep(rows, lambda shape: shape[2], "S (B=4, H=32, D=64, not causal)", rec.label)


def _stall_mix(lesson: str):
    states = [w for w in rec.warp_states("attention") if tuple(w["shape"]) == at.HEADLINE[0]]
    return figures.stall_mix(states, [r.label for r in LESSON_LADDERS[lesson][0].rungs], rec.label)


def _vector_add_bars():
    lad = _ladder("01")
    return figures.bandwidth_bars(lad.rows, (10**9,), lad.roofs, lad.datasheet, lad.label)


# (notebook, figures function the cell calls, how the cell calls it on CPU)
LESSON_FIGURES = [
    ("00_roofline", "best_positions", lambda: figures.best_positions(
        {"vector add (fp16)": (1 / 6, "fp32_TFLOPs"), "matmul 4096³ (fp16)": (2 * n**3 / (6 * n * n), "fp16_tc_TFLOPs")},
        rec.ceilings, rec.data.get("datasheet"), rec.label)),
    ("01_vector_add", "ladder_roofline", lambda: _roofline(
        "01", [], problems.get("vector_add").bench_shapes[-1], "vector add, n = 1e9")),
    ("01_vector_add", "bandwidth_bars", _vector_add_bars),
    ("02a_matmul_cuda", "ladder_roofline", lambda: _roofline(
        "02a", rec.profiles("matmul"), (n,) * 3, "CUDA matmul 4096³, rungs 1–6")),
    ("02a_matmul_cuda", "speed_bars", lambda: _speed_bars("02a")),
    ("02b_matmul_cuda_hopper", "ladder_roofline", lambda: _roofline(
        "02b", rec.profiles("matmul"), (n,) * 3, "CUDA matmul 4096³, rungs 6–9")),
    ("02b_matmul_cuda_hopper", "speed_bars", lambda: _speed_bars("02b")),
    ("02c_matmul_cuda_clusters", "ladder_roofline", lambda: _roofline(
        "02c", rec.profiles("matmul"), (n,) * 3, "CUDA matmul 4096³, rungs 9–12")),
    ("02c_matmul_cuda_clusters", "size_sweep", lambda: figures.size_sweep(
        _square_matmuls(), lambda s: s[0], "M = N = K", rec.label)),
    ("02c_matmul_cuda_clusters", "speed_bars", lambda: _speed_bars("02c")),
    ("03_matmul_triton", "ladder_roofline", lambda: _roofline(
        "03", rec.profiles("matmul"), (n,) * 3, "Triton matmul 4096³")),
    ("03_matmul_triton", "ladder_roofline", lambda: figures.ladder_roofline(
        rec.runs("matmul_bias_relu"), rec.profiles("matmul_bias_relu"), mbr.PROBLEM, (n,) * 3, rec.ceilings,
        rec.data.get("datasheet"), rec.label, "relu(A·B + bias) 4096³")),
    ("04a_attention_cuda", "ladder_roofline", lambda: _roofline(
        "04a", rec.profiles("attention"), at.HEADLINE[0], "CUDA attention B4 H32 S4096 D64, rungs 1–3")),
    ("04b_attention_cuda_tensor_cores", "ladder_roofline", lambda: _roofline(
        "04b", rec.profiles("attention"), at.HEADLINE[0], "CUDA attention B4 H32 S4096 D64, rungs 3–6")),
    ("04b_attention_cuda_tensor_cores", "stall_mix", lambda: _stall_mix("04b")),
    ("04b_attention_cuda_tensor_cores", "memory_needed", _attention_memory),
    ("04b_attention_cuda_tensor_cores", "size_sweep", _attention_sweep),
    ("04c_attention_triton", "ladder_roofline", lambda: figures.ladder_roofline(
        rec.runs("attention"), rec.profiles("attention"), at.PROBLEM, at.HEADLINE[0], rec.ceilings,
        rec.data.get("datasheet"), rec.label, "attention B4 H32 S4096 D64")),
    ("04c_attention_triton", "stall_mix", lambda: _stall_mix("04c")),
    ("04d_attention_backward", "backward_roofline", lambda: figures.backward_roofline(
        rec.runs("attention_backward"), ab.PROBLEM, ab.HEADLINE[0], rec.ceilings, rec.data.get("datasheet"),
        rec.label)),
    ("04e_attention_hopper", "ladder_roofline", lambda: _roofline(
        "04e", rec.profiles("attention"), at.HEADLINE[0], "CUDA attention B4 H32 S4096 D64, rungs 6–9")),
    ("04f_attention_softmax_instructions", "ladder_roofline", lambda: _roofline(
        "04f", rec.profiles("attention"), at.HEADLINE[0], "CUDA attention B4 H32 S4096 D64, rungs 10–11")),
    ("06_shipping_a_kernel", "host_timeline", lambda: figures.host_timeline(
        rec.data["launch"], f"one matmul call's host time, {rec.label}")),
    ("06_shipping_a_kernel", "shape_grid", lambda: figures.shape_grid(
        grid_ratios(rec.data["shape_sweep"]),
        {**{s: n for n, s in dispatch.GOAL_SHAPES.items()}, **dict.fromkeys(dispatch.GRID, "grid")},
        f"× cuBLAS per shape, {rec.label}")),
]


def _figure_calls(notebook: Path) -> list[str]:
    """The figures functions a notebook's cells call, in order."""
    return [name for cell in nbformat.read(notebook, 4).cells if cell.cell_type == "code"
            for name in re.findall(r"\bfigures\.(\w+)\(", cell.source)]


def test_every_figure_cell_is_checked():
    drawn = [(nb.stem, name) for nb in sorted(NOTEBOOKS.glob("*.ipynb")) for name in _figure_calls(nb)]
    assert drawn == [(nb, name) for nb, name, _ in LESSON_FIGURES]
    for nb in sorted(NOTEBOOKS.glob("*.ipynb")):  # a figure drawn outside ladder.figures would escape the check
        code = "\n".join(c.source for c in nbformat.read(nb, 4).cells if c.cell_type == "code")
        assert not re.search(r"plt\.subplots|\.plot\(|\.barh\(|roofline\.plot\(", code), nb.name


@pytest.mark.parametrize("notebook,name,draw", LESSON_FIGURES,
                         ids=[f"{nb}-{i}-{name}" for i, (nb, name, _) in enumerate(LESSON_FIGURES)])
def test_lesson_figure_is_readable(notebook, name, draw):
    fig = draw()
    try:
        assert figcheck.collisions(fig) == []
    finally:
        plt.close(fig)


def test_roofline_marks_are_the_rungs_everywhere():
    assert roofline.Point("cuda:3b_register_blocked", 1, 1).glyph == "3b"
    assert roofline.Point("triton:6_autotuned", 1, 1).glyph == "6"
    assert roofline.Point("torch:cublas", 1, 1).glyph == "cB"


def test_the_check_sees_what_a_reader_cannot_read():
    fig, ax = plt.subplots()
    ax.scatter([1, 2], [1, 2])
    ax.text(1, 1, "on a point")
    ax.text(1.5, 1.5, "one label")
    ax.text(1.5, 1.5, "another")
    ax.legend(["data"], loc="center")
    ax.plot([0.5, 2.5], [1.5, 1.5])
    found = figcheck.collisions(fig)
    plt.close(fig)
    assert any("covers a plotted point" in f for f in found)
    assert any("overlaps text" in f for f in found)
    assert any("legend covers data" in f for f in found)


def test_the_check_sees_a_marker_on_a_marker():
    fig, ax = plt.subplots(figsize=(4, 3))
    ax.set(xlim=(0, 10), ylim=(0, 10))
    for gid, x in (("cuda:9_persistent", 5.0), ("cuda:10_cluster_multicast", 5.05)):
        roofline.draw_mark(ax, x, 5.0, gid.split(":")[1].split("_")[0], "cuda", 120, gid)  # a disc, its number on it
    ax.plot([2, 2.05], [2, 2], ls="", marker="o", label="two points of one line")
    roofline.draw_mark(ax, 8.0, 8.0, "cB", "torch", 120, "torch:cublas")   # alone: a shape and its number are one mark
    found = figcheck.collisions(fig)
    plt.close(fig)
    assert found == ["marker 'cuda:9_persistent' sits on marker 'cuda:10_cluster_multicast'",
                     "marker 'two points of one line' sits on marker 'two points of one line'"]


def test_the_check_sees_a_roof_label_on_a_roof_label():
    fig, ax = plt.subplots(figsize=(4, 3))
    ax.set(xscale="log", yscale="log", xlim=(1, 1000), ylim=(10, 2000))
    for name, y in (("wgmma 985 TFLOP/s", 985), ("fp16 tensor-core datasheet 989 TFLOP/s", 989)):
        ax.plot([300, 1000], [y, y], gid=name)
        ax.annotate(name, (1000, y), xytext=(-2, -3), textcoords="offset points", fontsize=7, ha="right", va="top")
    found = figcheck.collisions(fig)
    plt.close(fig)
    assert found == ["text 'wgmma 985 TFLOP/s' overlaps text 'fp16 tensor-core datasheet 989 TFLOP/s'"]


def test_a_crowded_top_decade_is_spread_around_its_places():
    pts = [roofline.Point(f"cuda:{i}_rung", 700.0, 660.0 + i, "cuda") for i in (9, 10, 11)]
    ax = roofline.plot(pts, {"copy_TBps": 3.0, "fp32_TFLOPs": 58.0, "fp16_tc_TFLOPs": 700.0})
    try:
        assert figcheck.collisions(ax.figure) == []
        zoom = ax.figure.axes[1]
        drawn = {c.get_gid(): tuple(c.get_offsets()[0]) for c in zoom.collections
                 if not c.get_gid().startswith(figcheck.PLACE)}
        heights = [drawn[p.label][1] for p in pts]
        assert heights == [p.tflops for p in pts]                              # set aside sideways only
        assert len(set(drawn.values())) == len(pts)                            # each at a place of its own
        places = {tuple(c.get_offsets()[0]) for c in zoom.collections if c.get_gid().startswith(figcheck.PLACE)}
        assert places <= {(p.intensity, p.tflops) for p in pts} and places    # a set-aside mark's true place
        # the main panel leaves the top decade to the zoom: only a dot at each rung's place
        assert {c.get_gid() for c in ax.collections} == {f"{figcheck.PLACE}{p.label}, zoomed" for p in pts}
    finally:
        plt.close(ax.figure)


# What readers found on the lessons' rooflines, each on a few synthetic rungs: a mark set aside onto a roof, a line
# through a roof's name or a rung's mark, a number overflowing its disc, a pile of arrowheads, a hidden true place.
ROOFS = {"copy_TBps": 3.0, "fp32_TFLOPs": 58.0, "wgmma_TFLOPs": 700.0}


def _inside(box, pixels: np.ndarray) -> bool:
    return bool(np.any((box.x0 < pixels[:, 0]) & (pixels[:, 0] < box.x1)
                       & (box.y0 < pixels[:, 1]) & (pixels[:, 1] < box.y1)))


def _along(pixels: np.ndarray, step: float = 1.0) -> np.ndarray:
    """Points every `step` pixels along the polyline through `pixels`."""
    along = np.concatenate([[0], np.cumsum(np.hypot(*np.diff(pixels, axis=0).T))])
    at = np.arange(0, along[-1] + step, step)
    return np.column_stack([np.interp(at, along, pixels[:, 0]), np.interp(at, along, pixels[:, 1])])


def _arrows(ax) -> list[np.ndarray]:
    """The rung-to-rung arrows' shafts as drawn, in pixels."""
    ax.figure.canvas.draw()
    shafts = []
    for text in ax.texts:
        if getattr(text, "arrow_patch", None):
            path = text.arrow_patch.get_transform().transform_path(text.arrow_patch.get_path())
            shafts.append(_along(path.to_polygons(closed_only=False)[0]))   # the first polygon: the shaft
    return shafts


def test_a_mark_set_aside_keeps_off_the_roofs():
    """The L2 places of two rungs crowd just right of the DRAM slope: the one set aside must not land on it."""
    pts = [roofline.Point("cuda:4_a", 700.0, 150.0, "cuda", 80.0), roofline.Point("cuda:5_b", 705.0, 152.0, "cuda", 81.0)]
    ax = roofline.plot(pts, ROOFS, zoom=False)
    try:
        ax.figure.canvas.draw()
        roofs = np.vstack([_along(ax.transData.transform(np.column_stack(line.get_data())))
                           for line in ax.get_lines() if line.get_gid()])
        found = figcheck.markers(ax)
        set_aside = {gid.removeprefix(figcheck.PLACE) for gid, _, _ in found if gid.startswith(figcheck.PLACE)}
        assert set_aside
        assert [gid for gid, _, box in found if gid in set_aside and _inside(box, roofs)] == []
    finally:
        plt.close(ax.figure)


def test_no_line_between_marks_runs_through_a_roof_name():
    """A rung's DRAM-to-L2 line crosses the DRAM slope where its name would go first (the slope's top)."""
    pts = [roofline.Point("cuda:1_a", 1000.0, 400.0, "cuda", 20.0)]
    ax = roofline.plot(pts, ROOFS, zoom=False)
    try:
        renderer = ax.figure.canvas.get_renderer()
        lines = [_along(ax.transData.transform(np.column_stack(line.get_data())))
                 for line in ax.get_lines() if not line.get_gid()]
        names = [t for t in ax.texts if t.get_text() and not getattr(t, "arrow_patch", None)]
        assert "DRAM copy 3.00 TB/s" in {t.get_text() for t in names}
        assert [t.get_text() for t in names for pixels in lines if roofline._crosses(t, renderer, pixels)] == []
    finally:
        plt.close(ax.figure)


def test_an_arrow_bends_around_another_rungs_mark():
    """SDPA sits on the straight way from rung 1 to rung 2."""
    pts = [roofline.Point("cuda:1_a", 1000.0, 100.0), roofline.Point("torch:sdpa", 1000.0, 200.0, "torch"),
           roofline.Point("cuda:2_b", 1000.0, 400.0)]
    ax = roofline.plot(pts, ROOFS, zoom=False)
    try:
        (shaft,) = _arrows(ax)
        assert not any(_inside(box, shaft) for gid, _, box in figcheck.markers(ax) if gid == "torch:sdpa")
    finally:
        plt.close(ax.figure)


def test_a_leader_passes_no_other_mark_where_a_place_spares_it():
    """B is crowded by A above it; C, at B's height, holds B's left; D, a little lower, holds its right. The
    place two steps left would draw B's leader through C; two steps right spares every mark."""
    fig, ax = plt.subplots(figsize=(4, 3))
    ax.set(xlim=(0, 1), ylim=(0, 1))
    w = h = 17.0
    step = w + roofline.MARK_GAP
    x0, y0 = ax.transAxes.transform((0.5, 0.5))
    pixels = {"C": (x0 - step, y0), "D": (x0 + step, y0 - 0.8 * h), "A": (x0, y0 + 0.9 * h), "B": (x0, y0)}
    places = [tuple(ax.transData.inverted().transform(p)) for p in pixels.values()]
    try:
        drawn = dict(zip(pixels, ax.transData.transform(roofline.spread(ax, places, [(w, h)] * 4))))
        assert [name for name in pixels if not np.allclose(drawn[name], pixels[name])] == ["B"]   # B set aside
        leader = _along(np.array([pixels["B"], drawn["B"]]))
        others = [Bbox.from_bounds(x - w / 2, y - h / 2, w, h) for name, (x, y) in drawn.items() if name != "B"]
        assert not any(_inside(box, leader) for box in others)
    finally:
        plt.close(fig)


@pytest.mark.parametrize("glyph,backend", [("10", "cuda"), ("15", "cuda"), ("3b", "cuda"), ("FA", "torch"),
                                           ("12", "triton"), ("7", "cuda")])
def test_a_rungs_number_stays_inside_its_mark(glyph, backend):
    fig, ax = plt.subplots(figsize=(3, 3))
    try:
        roofline.draw_mark(ax, 0.5, 0.5, glyph, backend, 120, f"{backend}:{glyph}_rung")
        fig.canvas.draw()
        (shape, number) = ax.collections
        outline = shape.get_paths()[0].transformed(Affine2D(shape.get_transforms()[0]))
        ink = np.vstack(number.get_paths()[0].transformed(Affine2D(number.get_transforms()[0]))
                        .to_polygons(closed_only=False))
        assert outline.contains_points(ink).all()
    finally:
        plt.close(fig)


def test_an_arrow_to_a_rung_set_aside_ends_at_its_numbered_mark():
    """Rungs 3 and 4 crowd one place, so both are set aside: the step 2 -> 3 ends at 3's numbered mark (to 3's
    small mark, just above 4's, it pointed at both)."""
    pts = [roofline.Point("cuda:2_b", 2000.0, 100.0), roofline.Point("cuda:3_c", 2000.0, 367.0),
           roofline.Point("cuda:4_d", 2000.0, 360.0)]
    ax = roofline.plot(pts, ROOFS, zoom=False)
    try:
        found = {gid: box for gid, _, box in figcheck.markers(ax)}
        assert f"{figcheck.PLACE}cuda:3_c" in found
        (arrow,) = [t for t in ax.texts if getattr(t, "arrow_patch", None)]
        assert np.allclose(ax.transData.transform(arrow.xy), found["cuda:3_c"].get_points().mean(axis=0))
    finally:
        plt.close(ax.figure)


def test_steps_too_short_to_read_get_no_arrow_and_the_key_says_so():
    """Rungs 2-4 sit at nearly one place (given out of order, as recordings list them): one arrow, 1 to 2."""
    pts = [roofline.Point("cuda:3_c", 2000.0, 305.0), roofline.Point("cuda:1_a", 2000.0, 100.0),
           roofline.Point("cuda:2_b", 2000.0, 300.0), roofline.Point("cuda:4_d", 2000.0, 310.0)]
    ax = roofline.plot(pts, ROOFS, zoom=False)
    try:
        steps = [(t.xyann, t.xy) for t in ax.texts if getattr(t, "arrow_patch", None)]
        (start, end), = steps   # 1 -> 2 (2 is set aside: to its numbered mark, at its height)
        assert np.allclose(start, (2000.0, 100.0)) and np.isclose(end[1], 300.0)
        key = [t.get_text() for t in ax.figure.legends[0].get_texts()]
        assert any("arrow" in line and "none where" in line for line in key)
    finally:
        plt.close(ax.figure)


def test_the_check_sees_a_true_place_hidden_under_a_mark():
    fig, ax = plt.subplots(figsize=(4, 3))
    ax.set(xlim=(0, 10), ylim=(0, 10))
    roofline.draw_mark(ax, 5.0, 5.0, "9", "cuda", 120, "cuda:9_persistent")
    ax.scatter(5.05, 5.0, s=roofline.TRUE_PLACE, gid=f"{figcheck.PLACE}cuda:10_cluster_multicast")
    ax.scatter(8.0, 8.0, s=roofline.TRUE_PLACE, gid=f"{figcheck.PLACE}cuda:11_tma_store")   # in the open
    found = figcheck.collisions(fig)
    plt.close(fig)
    assert found == ["marker 'cuda:9_persistent' hides the place of cuda:10_cluster_multicast"]


def test_a_size_sweep_draws_each_rung_at_its_timed_sizes_in_a_style_of_its_own():
    """Each line runs through the sizes timed, in a style no other line has, and is named by a mark beside each
    of its ends, at the end's height."""
    fig = _attention_sweep()
    try:
        ax = fig.axes[0]
        sizes = {s[2] for s in at.HEADLINE} | {s[2] for s in LESSON_LADDERS["04b"][0].sweep_shapes}
        lines = [line for line in ax.get_lines() if len(line.get_xdata()) > 2]
        assert lines and all(set(line.get_xdata()) <= sizes for line in lines)
        styles = {(line.get_color(), str(line.get_linestyle()), line.get_linewidth()) for line in lines}
        assert len(styles) == len(lines)
        marks = [tuple(c.get_offsets()[0]) for c in ax.collections if c.get_gid()]
        for line in lines:
            for end, beyond in ((0, lambda x, size: x <= size * 2**-figures.SWEEP_END),
                                (-1, lambda x, size: x >= size * 2**figures.SWEEP_END)):
                size, height = line.get_xdata()[end], line.get_ydata()[end]
                assert sum(np.isclose(y, height) and beyond(x, size) for x, y in marks) >= 1
        assert len(marks) == 2 * len(lines) * 2   # a shape and its number per mark
        assert figcheck.collisions(fig) == []
    finally:
        plt.close(fig)


def test_the_stall_picture_colours_every_rungs_top_three_reasons():
    from ladder import profile
    states = [w for w in rec.warp_states("attention") if tuple(w["shape"]) == at.HEADLINE[0]]
    fig = _stall_mix("04b")
    try:
        shown = {t.get_text() for t in fig.axes[0].get_legend().get_texts()}
        for w in states:
            if f"{w['backend']}:{w['rung']}" in {r.label for r in LESSON_LADDERS["04b"][0].rungs}:
                assert {verdicts.STALL_NAMES[r] for r, _ in profile.top_stalls(w["metrics"], 3)} <= shown
    finally:
        plt.close(fig)
