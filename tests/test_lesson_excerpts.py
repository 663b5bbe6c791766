"""A kernel excerpt a lesson quotes in its prose (a fenced ```cuda, ```python or ```diff block) is the code as it is:
every line of it, comments, spacing and elisions (`...`) aside, is a line of a file under kernels/ or ladder/. A quote that drifted
from the kernel would teach code that no longer runs."""
from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parent.parent
LESSONS = sorted((ROOT / "notebooks").glob("*.ipynb"))
FENCE = re.compile(r"```(cuda|python|diff)\n(.*?)```", re.S)


def _code(line: str, language: str) -> str:
    """A quoted line as the file has it: a diff's +/- and a trailing comment dropped, whitespace stripped."""
    if language == "diff" and line[:1] in "+- ":
        line = line[1:]
    return " ".join(re.split(r"\s(?://|#)\s", line)[0].split())


@pytest.fixture(scope="module")
def source_lines() -> set[str]:
    files = [*ROOT.glob("kernels/**/*.cu"), *ROOT.glob("kernels/**/*.cuh"), *ROOT.glob("kernels/**/*.py"),
             *ROOT.glob("ladder/**/*.py")]
    return {_code(line, "") for f in files for line in f.read_text().splitlines()}


@pytest.mark.parametrize("path", LESSONS, ids=lambda p: p.stem)
def test_quoted_kernel_lines_are_in_the_kernels(path, source_lines):
    nb = nbformat.read(path, 4)
    for cell in nb.cells:
        if cell.cell_type != "markdown":
            continue
        for language, block in FENCE.findall(cell.source):
            for line in block.splitlines():
                code = _code(line, language)
                if not code or code.startswith(("//", "#", "@@")) or "..." in code or code in ("{", "}"):
                    continue
                assert code in source_lines, f"{path.name}: {line!r} is in no kernel or ladder file"
