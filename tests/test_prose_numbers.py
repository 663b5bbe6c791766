"""ladder.lessons.numbers: a number in a lesson's prose is printed, rounded as written, by its section's outputs
(or a section the sentence names), unless the lesson lists it as a constant: tiny notebooks built in memory, then every
lesson as committed."""
from __future__ import annotations

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output

from ladder.lessons import numbers


def code(text: str | None = None, outputs=None):
    """A code cell that printed `text` (or has the given outputs)."""
    return new_code_cell("print(...)", outputs=outputs if outputs is not None else [new_output("stream", text=text)])


def lesson(*cells, **metadata):
    nb = new_notebook(cells=list(cells))
    nb.metadata.update(metadata)
    return nb


def flagged(nb) -> list[str]:
    return [f.number for f in numbers.check(nb)[1]]


def written(text: str) -> list[str]:
    return [n.text for n in numbers.prose_numbers(text)]


def test_a_decimal_printed_in_its_section_passes():
    nb = lesson(new_markdown_cell("## Rung 1 — naive\n\nIt runs at 0.50 TFLOP/s, 1.13× cuBLAS."),
                code("cuda:1_naive  0.5012 TFLOP/s  1.128x over cublas\n"))
    assert flagged(nb) == []


def test_a_number_printed_only_in_another_section_fails():
    nb = lesson(new_markdown_cell("## Rung 1 — naive\n\nIt runs at 0.947 of the roof."),
                code("nothing measured here\n"),
                new_markdown_cell("## Rung 2 — coalesced"),
                code("0.947\n"))
    findings = numbers.check(nb)[1]
    assert [(f.number, f.section, f.cell) for f in findings] == [("0.947", "Rung 1 — naive", 0)]
    assert "0.947 of the roof" in findings[0].sentence


def test_rounding_as_written():
    assert numbers.printed("1.13×", "speedup 1.128x")
    assert not numbers.printed("1.14×", "speedup 1.128x")
    assert numbers.printed("0.95", "0.947")
    assert not numbers.printed("0.947", "0.95")              # the output holds less than the prose claims
    assert numbers.printed("14", "13.8 s") and not numbers.printed("14.0", "13.8 s")
    assert numbers.printed("7.81e+05", "load instructions 781250")
    nb = lesson(new_markdown_cell("## Rung 3\n\nA step of 1.13×, then 1.14×."), code("1.128x\n"))
    assert flagged(nb) == ["1.14×"]


def test_a_ratio_is_matched_by_a_printed_ratio_or_range_only():
    assert not numbers.printed("1.03×", "took 1.03 ms")
    assert numbers.printed("1.03×", "1.028x over rung 12")
    assert numbers.printed("0.97×", "predicted 0.97-1.03 over rung 12")


def test_a_percentage():
    assert written("reaches 87% of copy, then 0.86%, and 85–90% of the datasheet") == ["87", "0.86", "85", "90"]
    assert [n.kind for n in numbers.prose_numbers("at 87% and 0.86%")] == ["percent", "percent"]
    nb = lesson(new_markdown_cell("## Measure\n\nThe copy reaches 90% of the datasheet, the FMA 88%."),
                code("copy_TBps 3.02 =  90.1% of datasheet 3.35\nfp32 86.7% of datasheet\n"))
    assert flagged(nb) == ["88%"]


def test_an_integer_comparison():
    text = "The loop loses FMULs (66 → 28): 42 of the 66 leave, in 173 lines."
    assert written(text) == ["66", "28", "42", "66", "173"]
    nb = lesson(new_markdown_cell("## Rung 14\n\n" + text), code("FMUL 66\nFMUL 28\n173 lines\n"))
    assert flagged(nb) == ["42"]


def test_names_sizes_and_code_are_not_numbers():
    text = ("On sm_90 at D128, rung 12 (lesson 04e, rungs 4–7) in fp16 at 4096³ and 8192×8192 with 16-byte loads; "
            "`num_stages=4`, `1.57`, [a link](https://example.com/v2.75/x) and $2.5 \\cdot N$; in 2024, "
            "with 64 threads a warp and CUDA 12.4. Issue #42.")
    assert written(text) == []
    assert written("```\nx = 3.25\n```\nand 1.5 after") == ["1.5"]


def test_about_a_round_number_matches_at_its_figures():
    assert numbers.printed(numbers.prose_numbers("about 300 FLOP/B")[0], "ridge 295")
    assert not numbers.printed(numbers.prose_numbers("300 FLOP/B")[0], "ridge 295")


def test_a_listed_constant_is_not_flagged():
    prose = new_markdown_cell("## The roofs\n\nHBM3e moves 4.8 TB/s and the chip draws 700 W.")
    assert flagged(lesson(prose, code("measured 4.21 TB/s\n"))) == ["4.8 TB/s", "700 W"]
    constants = {"ladder": {"constants": {"4.8": "H200 datasheet, HBM3e TB/s", "700 W": "H100 SXM power limit"}}}
    assert flagged(lesson(prose, code("measured 4.21 TB/s\n"), **constants)) == []


def test_a_sentence_may_name_the_section_that_prints_it():
    rung2 = [new_markdown_cell("## Rung 2 — coalesced: threads along a row"), code("16.5 sectors per request\n")]
    for sentence in ("The counters (section: Rung 2) show 16.5 sectors per request.",
                     "The [counters](#Rung-2-—-coalesced:-threads-along-a-row) show 16.5 sectors per request.",
                     "The counters below (rung 2's section) show 16.5 sectors per request."):
        nb = lesson(new_markdown_cell("## Rung 1 — naive\n\n" + sentence), code("no counters\n"), *rung2)
        assert flagged(nb) == [], sentence
    elsewhere = "The counters show 16.5 sectors per request. CUDA's rung 2 shows 16.5 too."
    nb = lesson(new_markdown_cell("## Rung 1 — naive\n\n" + elsewhere), code("no counters\n"), *rung2)
    assert flagged(nb) == ["16.5 sectors", "16.5"]      # no section named; another lesson's rung 2 is not this one's


def test_a_link_to_a_subheading_names_the_section_holding_it():
    deeper = [new_markdown_cell("## Rung 2 — coalesced\n\n### Deeper: the counters"), code("16.5 sectors per request\n")]
    linked = "The [counters](#Deeper:-the-counters) show 16.5 sectors per request."
    assert flagged(lesson(new_markdown_cell("## Rung 1 — naive\n\n" + linked), code("none\n"), *deeper)) == []
    unlinked = "The counters show 16.5 sectors per request."
    assert flagged(lesson(new_markdown_cell("## Rung 1 — naive\n\n" + unlinked), code("none\n"), *deeper)) != []


def test_sections_cut_at_headings_inside_cells_and_keep_subheadings():
    nb = lesson(new_markdown_cell("# 02a — Matmul\n\nIntro."), code("GPU\n"),
                new_markdown_cell("## Rung 1 — naive\n\nIdea.\n\n### Why\n\nIt is slow.\n\n## Recap\n\n- fast"),
                code("0.5\n"))
    cut = numbers.sections(nb)
    assert [s.heading for s in cut] == ["02a — Matmul", "Rung 1 — naive", "Recap"]
    assert cut[1].prose == [(2, "\nIdea.\n\n\nIt is slow.\n")] and cut[1].outputs == ""
    assert cut[2].outputs.strip() == "0.5"


def test_empty_odd_and_nan_outputs_do_not_crash():
    image = new_output("display_data", data={"image/png": "iVBORw0KGgo=", "text/plain": "<Figure size 800x520>"})
    error = new_output("error", ename="ValueError", evalue="bad 1.25", traceback=["1.25"])
    nb = lesson(new_markdown_cell("## Rung 1\n\nIt takes 1.25 ms, 800 ms at most."),
                code(outputs=[]), code(outputs=[image, error]), code("nan inf -nan NaN\n"), code(""),
                new_markdown_cell(""), new_code_cell("x = 1"))
    assert flagged(nb) == ["1.25 ms", "800 ms"]     # an image's text stand-in and an error print nothing
    assert not numbers.printed("1.25", None) and not numbers.printed("1.25", "")
    assert numbers.check(lesson()) == ([], [])


def test_the_command_line(tmp_path, capsys):
    path = tmp_path / "lesson.ipynb"
    nbformat.write(lesson(new_markdown_cell("## Rung 1\n\nA step of 1.14×, at 0.50 TFLOP/s."),
                          code("0.5012 TFLOP/s 1.128x\n")), path)
    assert numbers.main([str(path)]) == 0
    out = capsys.readouterr().out
    assert "lesson: 1 of 2 numbers in prose not printed" in out and "'1.14×'" in out and out.rstrip().endswith(
        "total: 1 of 2 numbers in prose not printed by their section's outputs")
    assert numbers.main([str(path), "--strict"]) == 1
    assert [f.number for f in numbers.unprinted(path)] == ["1.14×"]


@pytest.mark.parametrize("name", sorted(p.name for p in numbers.NOTEBOOKS.glob("*.ipynb")))
def test_every_number_in_a_lessons_prose_is_printed_beside_it(name):
    assert [(f.cell, f.number, f.sentence) for f in numbers.unprinted(numbers.NOTEBOOKS / name)] == []


@pytest.mark.parametrize("name", sorted(p.name for p in numbers.NOTEBOOKS.glob("*.ipynb")))
def test_every_listed_constant_is_still_quoted(name):
    assert numbers.unquoted_constants(nbformat.read(numbers.NOTEBOOKS / name, 4)) == []
