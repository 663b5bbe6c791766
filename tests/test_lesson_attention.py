"""Lessons 04a-04c: within LESSONS.md's budgets, and the helpers of ladder.lesson they call."""
from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest

import kernels.attention as at
from ladder import autotune, lesson

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"
ATTENTION = ["04a_attention_cuda.ipynb", "04b_attention_cuda_tensor_cores.ipynb", "04c_attention_triton.ipynb"]


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
