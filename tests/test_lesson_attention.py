"""Lessons 04a-04d: within LESSONS.md's budgets, and the helpers of ladder.lesson they call."""
from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest

import kernels.attention as at
from ladder import autotune, lesson

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"
ATTENTION = ["04a_attention_cuda.ipynb", "04b_attention_cuda_tensor_cores.ipynb", "04c_attention_triton.ipynb",
             "04d_attention_backward.ipynb"]


def test_traffic_counts_the_score_passes():
    shape = (4, 32, 4096, 64, 0)
    matrix = 4 * 4 * 32 * 4096 * 4096
    assert lesson.attention_traffic_bytes("3_fused", shape) == at.min_bytes(shape)
    assert lesson.attention_traffic_bytes("1_naive", shape) == at.min_bytes(shape) + 6 * matrix
    assert lesson.attention_traffic_bytes("2_coalesced", shape) == at.min_bytes(shape) + 5 * matrix


def test_count_names_every_family_and_shape():
    text = lesson.attention_count(at.HEADLINE, {"copy_TBps": 3.0, "fp32_TFLOPs": 60.0, "fp16_tc_TFLOPs": 600.0}, "model")
    assert "ridge points 20 and 200 FLOP/B" in text
    assert all(family in text for family in lesson.ATTENTION_FAMILIES.values())
    assert "2048 F/B" in text and len(text.splitlines()) <= 10


def test_search_summary_is_one_line_per_search():
    reports = [r for r in autotune.recorded_reports(None) if r.problem == "attention"]
    if not reports:
        pytest.skip("no recorded attention searches")
    text = lesson.search_summary(reports)
    assert sum("BLOCK_M=" in line for line in text.splitlines()) == len(reports)


def test_backward_ratios_judge_the_issue_goals():
    """Lesson 04d's ratio table: a line per recorded shape, then the two goals computed (a synthetic run)."""
    rows = []
    for s, (ours, cudnn, fa2) in {(4, 32, 4096, 64, 0): (4.0, 3.2, 5.0), (4, 32, 4096, 128, 0): (8.0, 5.0, 9.0)}.items():
        rows += [{"backend": b, "rung": r, "shape": list(s), "ms": ms, "tflops": 1.0 / ms}
                 for b, r, ms in (("triton", "4_autotuned", ours), ("torch", "sdpa", cudnn), ("torch", "sdpa_flash", fa2))]
    text = lesson.backward_ratios(rows).splitlines()
    assert len(text) == 1 + 2 + 2
    assert text[-2].endswith("1.125x at worst -> HIT")
    assert "0.800-0.800x, met at 0 of 1 shapes -> MISS" in text[-1]


def test_backward_tiles_show_the_search_gain_over_rung_2s_tiles():
    """Lesson 04d's search table: the winner's speed-up over rung 2's tiles where the search timed them, "-"
    where it pruned them (a synthetic search)."""
    from kernels.triton import attention_backward as tab
    from ladder.autotune import Report
    fixed, other = tab.GPU_TILES[64]["dq"], dict(tab.GPU_TILES[64]["dq"], num_stages=4)
    timed = Report("attention_backward", "triton:4_autotuned:dq", (4096, 64, 0), "gpu", other, 1.0, 1.0,
                   timed=[{"config": other, "ms": 1.0}, {"config": fixed, "ms": 1.25}])
    pruned = Report("attention_backward", "triton:4_autotuned:dkdv", (4096, 64, 0), "gpu", other, 1.0, 1.0,
                    timed=[{"config": other, "ms": 1.0}], pruned=[{"config": fixed, "reason": "spills"}])
    lines = lesson.backward_tiles([timed, pruned]).splitlines()
    assert "gain" in lines[0]
    assert lines[1].startswith("dkdv") and lines[1].split()[-3] == "-"
    assert lines[2].startswith("dq") and lines[2].split()[-3] == "1.25x"


def test_backward_problem_times_live_at_s4096_only(monkeypatch):
    import dataclasses

    import kernels.attention_backward as ab
    from ladder import world
    monkeypatch.setattr(world, "WORLD", dataclasses.replace(world.WORLD, gpu=False))
    assert lesson.backward_problem().bench_shapes == ab.HEADLINE   # no GPU: every shape, from the recording
    monkeypatch.setattr(world, "WORLD", dataclasses.replace(world.WORLD, gpu=True))
    assert {s[2] for s in lesson.backward_problem().bench_shapes} == {4096}
