"""Every figure the lessons draw, drawn from the recording on CPU, must be readable: no two texts on top
of each other, no text over a plotted point, no legend over data (ladder.figcheck).

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

import kernels.attention as at  # noqa: E402
import kernels.matmul as mm  # noqa: E402
import kernels.matmul_bias_relu as mbr  # noqa: E402
from ladder import figcheck, figures, problems, roofline, runner  # noqa: E402
from ladder import results as results_mod  # noqa: E402

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"
rec = results_mod.load()
sheet = rec.data.get("datasheet")


def _square_matmuls():
    return [r for r in rec.runs("matmul") if r["backend"] != "triton" and len(set(r["shape"])) == 1]


def _attention_memory():
    sizes, memory = [512, 1024, 2048, 4096, 8192, 16384], rec.data["gpu"]["memory_bytes"]
    curves = {"rungs 1-2 (S×S fp32 in DRAM)": [at.peak_bytes("triton:1_naive", (4, 32, S, 64, 0)) for S in sizes],
              "fused rungs 3-6 (Q, K, V, O)": [at.peak_bytes("triton:3_fused", (4, 32, S, 64, 0)) for S in sizes]}
    return figures.memory_needed(curves, sizes, {rec.gpu: memory}, "sequence length S (B=4, H=32, D=64)")


def _attention_sweep(backends: tuple[str, ...]):
    sweep = {tuple(s) for s in at.PROBLEM.sweep_shapes} | {at.HEADLINE[0]}
    rows = [r for r in rec.runs("attention") if tuple(r["shape"]) in sweep and r["backend"] in backends]
    limit = np.sqrt(rec.data["gpu"]["memory_bytes"] / (4 * 4 * 32))
    return figures.size_sweep(rows, lambda shape: shape[2], "S (B=4, H=32, D=64, not causal)", rec.label,
                              unavailable_from=limit, note="rungs 1-2: N/A (S×S fp32 > memory)")


def _vector_add():
    return runner.results(problems.get("vector_add"))


def _cuda_matmul():
    return runner.results(mm.PROBLEM.only("cuda", "torch"))


def _triton_matmul():
    return runner.results(mm.PROBLEM.only("triton", "torch"))


def _stall_mix(problem):
    states = [w for w in rec.warp_states("attention") if tuple(w["shape"]) == at.HEADLINE[0]]
    return figures.stall_mix(states, [r.label for r in problem.rungs], rec.label_for(states))


n = 4096
# (notebook, figures function the cell calls, how the cell calls it on CPU)
LESSON_FIGURES = [
    ("00_roofline", "best_positions", lambda: figures.best_positions(
        {"vector add (fp16)": (1 / 6, "fp32_TFLOPs"), "matmul 4096³ (fp16)": (2 * n**3 / (6 * n * n), "fp16_tc_TFLOPs")},
        rec.ceilings, sheet, rec.label)),
    ("01_vector_add", "ladder_roofline", lambda: (res := _vector_add()) and figures.ladder_roofline(
        res.rows, [], problems.get("vector_add"), (10**9,), res.ceilings, res.datasheet, res.label, "vector add")),
    ("01_vector_add", "bandwidth_bars", lambda: (res := _vector_add()) and figures.bandwidth_bars(
        res.rows, (10**9,), res.ceilings, res.datasheet, res.label)),
    ("02_matmul_cuda", "ladder_roofline", lambda: (res := _cuda_matmul()) and figures.ladder_roofline(
        res.rows, rec.profiles("matmul"), mm.PROBLEM.only("cuda", "torch"), (n,) * 3, res.ceilings, res.datasheet,
        res.label, "CUDA matmul 4096³")),
    ("02_matmul_cuda", "speed_bars", lambda: figures.speed_bars(_cuda_matmul().rows, [(n,) * 3, (8192,) * 3], rec.label)),
    ("02_matmul_cuda", "size_sweep", lambda: figures.size_sweep(_square_matmuls(), lambda s: s[0], "M = N = K", rec.label)),
    ("03_matmul_triton", "ladder_roofline", lambda: (res := _triton_matmul()) and figures.ladder_roofline(
        res.rows, rec.profiles("matmul"), mm.PROBLEM.only("triton", "torch"), (n,) * 3, res.ceilings, res.datasheet,
        res.label, "Triton matmul 4096³")),
    ("03_matmul_triton", "ladder_roofline", lambda: figures.ladder_roofline(
        rec.runs("matmul_bias_relu"), rec.profiles("matmul_bias_relu"), mbr.PROBLEM, (n,) * 3, rec.ceilings, sheet,
        rec.label, "relu(A·B + bias) 4096³")),
    ("04a_attention_cuda", "ladder_roofline", lambda: figures.ladder_roofline(
        rec.runs("attention"), rec.profiles("attention"), at.PROBLEM.only("cuda", "torch"), at.HEADLINE[0],
        rec.ceilings, sheet, rec.label, "CUDA attention B4 H32 S4096 D64")),
    ("04a_attention_cuda", "stall_mix", lambda: _stall_mix(at.PROBLEM.only("cuda", "torch"))),
    ("04a_attention_cuda", "memory_needed", _attention_memory),
    ("04a_attention_cuda", "size_sweep", lambda: _attention_sweep(("cuda", "torch"))),
    ("04b_attention_triton", "ladder_roofline", lambda: figures.ladder_roofline(
        rec.runs("attention"), rec.profiles("attention"), at.PROBLEM, at.HEADLINE[0], rec.ceilings, sheet, rec.label,
        "attention B4 H32 S4096 D64")),
    ("04b_attention_triton", "stall_mix", lambda: _stall_mix(at.PROBLEM.only("triton", "torch"))),
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
