"""ladder.lessons.verdict_words: a Why's hit/miss words agree with the verdicts printed above it — tiny notebooks
built in memory, then every lesson as committed."""
from __future__ import annotations

from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output

from ladder.lessons import verdict_words

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"
STEP = ("cuda:9_persistent  1.02-1.1x over 8_tma   1.017x miss ↓   1.06x miss ↓\n"
        "cuda:9_persistent  85-95% of cublas        90.5% hit  95.02% miss ↑\n"
        "cuda:8_tma         80-95% of cublas        89.0% hit   89.7% hit\n")


def rung9(why: str, printed: str = STEP):
    return new_notebook(cells=[new_markdown_cell("## Rung 9 — persistent"),
                               new_code_cell("lad.step(...)", outputs=[new_output("stream", text=printed)]),
                               new_markdown_cell(f"**Why ({why}).** Because."),
                               new_markdown_cell("## Rung 10 — clusters"),
                               new_code_cell("lad.step(...)", outputs=[new_output("stream", text="1.5x hit\n")])])


@pytest.mark.parametrize("why", ["three misses, one hit", "a hit at 4096³, misses at 8192³", "1.06x at 8192³",
                                 "misses below the band"])
def test_words_the_verdicts_bear_out_pass(why):
    assert verdict_words.check(rung9(why)) == []


@pytest.mark.parametrize("why", ["two misses, two hits", "hits at both shapes", "a miss at every shape",
                                 "misses both ways"])
def test_words_the_verdicts_contradict_are_found(why):
    [finding] = verdict_words.check(rung9(why))
    assert (finding.cell, finding.hits, finding.misses) == (2, 1, 3)   # rung 9's rows only, not rung 8's


def test_a_goal_line_counts_and_the_next_section_starts_afresh():
    nb = rung9("a narrow miss", "ladder.ops.matmul: 16.7 µs per call: 1.28× -> HIT (goal ≤ 1.3×)\n")
    [finding] = verdict_words.check(nb)
    assert (finding.hits, finding.misses) == (1, 0)
    nb.cells.append(new_markdown_cell("**Why (a hit at every shape).**"))   # under rung 10's own "1.5x hit"
    assert len(verdict_words.check(nb)) == 1


@pytest.mark.parametrize("notebook", sorted(NOTEBOOKS.glob("*.ipynb")), ids=lambda p: p.stem)
def test_every_lessons_whys_agree_with_its_verdicts(notebook):
    findings = verdict_words.check(nbformat.read(str(notebook), 4))
    assert not findings, "\n".join(map(str, findings))
