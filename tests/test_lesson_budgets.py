"""Every lesson within ../shared/LESSONS.md's budgets: prose words, code lines per cell and per lesson, text
outputs (a kernel's source or diff excepted), and no clock times or run history in the prose."""
from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest

from ladder.lessons import reading

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"
LESSONS = sorted(p.name for p in NOTEBOOKS.glob("*.ipynb"))
SOURCE_CELL = re.compile(r"show_source|show_diff|show_cuda_rung|show_code")  # a kernel's source or diff


def code_lines(source: str) -> int:
    return sum(1 for line in source.splitlines() if line.strip())


def text_of(output) -> str:
    text = output.get("text") or output.get("data", {}).get("text/plain", "")
    return "".join(text)


@pytest.mark.parametrize("name", LESSONS)
def test_lesson_within_budgets(name):
    nb = nbformat.read(NOTEBOOKS / name, 4)
    prose = "\n".join(re.sub(r"<!--.*?-->", "", c.source, flags=re.S) for c in nb.cells if c.cell_type == "markdown")
    lines = [code_lines(c.source) for c in nb.cells if c.cell_type == "code"]
    assert len(prose.split()) <= 3500
    assert reading.reading_minutes(nb)["total"] <= 45  # prose, code, printed text, kernel text and figures
    assert sum(lines) <= 200 and max(lines) <= 25
    for cell in nb.cells:
        if cell.cell_type == "code" and not SOURCE_CELL.search(cell.source):
            longest = max((len(text_of(o).splitlines()) for o in cell.get("outputs", [])), default=0)
            assert longest <= 60, cell.source[:80]
    assert not re.search(r"\b\d\d:\d\d UTC\b|earlier today|this session", prose)


def test_every_lesson_is_checked():
    assert {"00_roofline.ipynb", "02a_matmul_cuda.ipynb", "02b_matmul_cuda_hopper.ipynb", "02c_matmul_cuda_clusters.ipynb",
            "04a_attention_cuda.ipynb", "04b_attention_cuda_tensor_cores.ipynb", "04d_attention_backward.ipynb",
            "04e_attention_hopper.ipynb", "04f_attention_softmax_instructions.ipynb",
            "05_capstone.ipynb",
            "06_shipping_a_kernel.ipynb"} <= set(LESSONS)


@pytest.mark.parametrize("name", LESSONS)
def test_lesson_reads_in_45_minutes(name):
    """Prose, code, printed tables, kernel text and figures at a student's pace (ladder.lessons.reading's rates)."""
    minutes = reading.reading_minutes(NOTEBOOKS / name)
    assert minutes["total"] <= 45, {part: round(m, 1) for part, m in minutes.items()}


def test_reading_estimate_counts_kernel_text_at_half_pace():
    nb = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_markdown_cell("word " * 200),
        nbformat.v4.new_code_cell('lessons.source.show_source("k.cu")', outputs=[
            nbformat.v4.new_output("stream", name="stdout", text="code " * 100)]),
        nbformat.v4.new_code_cell("x", outputs=[nbformat.v4.new_output("display_data", data={"image/png": ""})])])
    minutes = reading.reading_minutes(nb)
    assert (minutes["prose"], minutes["kernel"], minutes["figures"]) == (1, 1, 0.5)
