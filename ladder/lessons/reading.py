"""How long a lesson takes to read: its prose, code cells, printed text, the kernel text the source viewer
prints and its figures, each at a student's pace. tests/test_lesson_budgets.py holds every lesson to 45 minutes.
"""
from __future__ import annotations

import re
from pathlib import Path

from ladder.lessons import source


# A student's reading pace (words a minute) when reading to learn, as the cold reads of ../shared/STUDENT_READ.md
# do (each term looked up, each number found in the output): technical prose and printed tables at 120, a kernel's
# code at half that, a minute a figure.
PROSE_WPM, CODE_WPM, FIGURE_MINUTES = 120, 60, 1.0
# The viewer's calls that print kernel text (a source, a diff, a header's declarations): a cell that calls one is
# read at the code pace.
KERNEL_TEXT = tuple(f.__name__ for f in (source.show_source, source.show_diff, source.show_declarations,
                                         source.show_cuda_rung, source.show_code, source.kernel_lines)) + ("hopper_host_side",)


def reading_minutes(notebook) -> dict[str, float]:
    """How long a lesson takes to read, by part: its prose, the code cells, their printed text, the kernel text
    they print (sources and diffs) and the figures. `notebook`: a path or an nbformat notebook."""
    import nbformat   # here, not at the top: an optional dependency (the test and lab extras)
    nb = nbformat.read(str(notebook), 4) if isinstance(notebook, (str, Path)) else notebook
    words = {"prose": 0, "code": 0, "printed": 0, "kernel": 0}
    figures = 0
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            words["prose"] += len(re.sub(r"<!--.*?-->", "", cell.source, flags=re.S).split())
            continue
        if cell.cell_type != "code" or cell.source.startswith("# @title Colab"):  # the install cell: not read
            continue
        words["code"] += len(cell.source.split())
        kernel = any(name + "(" in cell.source for name in KERNEL_TEXT)
        for output in cell.get("outputs", []):
            data = output.get("data", {})
            if "image/png" in data or "image/svg+xml" in data:
                figures += 1
                continue
            text = output.get("text") or data.get("text/plain", "")
            words["kernel" if kernel else "printed"] += len("".join(text).split())
    minutes = {part: n / (CODE_WPM if part == "kernel" else PROSE_WPM) for part, n in words.items()}
    minutes["figures"] = figures * FIGURE_MINUTES
    minutes["total"] = sum(minutes.values())
    return minutes
