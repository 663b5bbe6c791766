"""Every lesson within ../shared/LESSONS.md's budgets: prose words, code lines per cell and per lesson, text
outputs (a kernel's source or diff excepted), and no clock times or run history in the prose."""
from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest

from ladder.lessons import layers, reading

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"
LESSONS = sorted(p.name for p in NOTEBOOKS.glob("*.ipynb"))
SOURCE_CELL = re.compile(r"show_source|show_diff|show_cuda_rung|show_code|show_op_template")  # source text, or a diff


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
def test_main_path_reads_in_45_minutes_and_each_deeper_part_in_10(name):
    """Prose, code, printed tables, kernel text and figures at a student's pace (ladder.lessons.reading's rates), on
    the main path and in each collapsed Deeper part (ladder.lessons.layers)."""
    minutes = layers.minutes(NOTEBOOKS / name)
    assert minutes["main"] <= layers.MAIN_MINUTES, minutes
    assert all(m <= layers.DEEPER_MINUTES for m in minutes["deeper"].values()), minutes


@pytest.mark.parametrize("name", LESSONS)
def test_deeper_parts_open_collapsed(name):
    nb = nbformat.read(NOTEBOOKS / name, 4)
    assert not layers.fold(nb), "python -m ladder.lessons.layers --fold " + name


WHY = re.compile(r"\*\*Why\b")
LAB_LOG = re.compile(r"\b20\d\d-\d\d-\d\d\b|\b(?:January|February|March|April|May|June|July|August|September|"
                     r"October|November|December)\s+(?:\d{1,2},?\s+)?20\d\d\b|\bissue\s*#?\d|\bwarning\s+#?[A-Z]?\d{3,}|"
                     r"\b[Tt]ried\b|\bon the way\b|\bthe issue's\b")


@pytest.mark.parametrize("name", LESSONS)
def test_whys_on_the_main_path_are_short_and_no_lab_log(name):
    """A rung's Why on the main path is one paragraph `**Why.** ...` of at most 60 words, link targets aside (about three lines); the
    rest of the explanation lives in its Deeper part. No dates, issue or warning numbers, or lists of tries."""
    nb = nbformat.read(NOTEBOOKS / name, 4)
    main, _ = layers.parts(nb)
    for cell in main:
        if cell.cell_type != "markdown":
            continue
        text = re.sub(r"<!--.*?-->", "", cell.source, flags=re.S)
        assert not re.match(r"#+\s+Why\b", text.lstrip()), "a Why is a paragraph, not a section: " + text[:80]
        for paragraph in re.split(r"\n\s*\n", text):
            if WHY.match(paragraph.lstrip()):
                assert len(re.sub(r"\]\([^)]*\)", "]", paragraph).split()) <= 60, paragraph  # link targets not read
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            assert not LAB_LOG.search(cell.source), LAB_LOG.search(cell.source).group(0) + ": " + cell.source[:120]


def test_a_deeper_part_runs_to_the_next_heading_of_its_level_and_opens_collapsed():
    nb = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_markdown_cell("## Rung 1"), nbformat.v4.new_markdown_cell("word " * 120),
        nbformat.v4.new_markdown_cell("### Deeper: counters"), nbformat.v4.new_markdown_cell("#### a table"),
        nbformat.v4.new_markdown_cell("word " * 240), nbformat.v4.new_markdown_cell("## Rung 2")])
    main, deeper = layers.parts(nb)
    assert [c.source[:9] for c in main] == ["## Rung 1", "word word", "## Rung 2"]
    assert list(deeper) == ["Deeper: counters"] and len(deeper["Deeper: counters"]) == 3
    assert round(layers.minutes(nb)["deeper"]["Deeper: counters"]) == 2
    assert layers.fold(nb) and not layers.fold(nb)
    assert nb.cells[2].metadata["jp-MarkdownHeadingCollapsed"] and "jp-MarkdownHeadingCollapsed" not in nb.cells[0].metadata
    assert nb.metadata["colab"]["collapsed_sections"] == [nb.cells[2].metadata["id"]]


def test_reading_estimate_counts_kernel_text_at_half_pace():
    nb = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_markdown_cell("word " * 120),
        nbformat.v4.new_code_cell('lessons.source.show_source("k.cu")', outputs=[
            nbformat.v4.new_output("stream", name="stdout", text="code " * 60)]),
        nbformat.v4.new_code_cell("x", outputs=[nbformat.v4.new_output("display_data", data={"image/png": ""})])])
    minutes = reading.reading_minutes(nb)
    assert (minutes["prose"], minutes["kernel"], minutes["figures"]) == (1, 1, 1)
