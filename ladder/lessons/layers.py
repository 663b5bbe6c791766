"""A lesson's two layers (../shared/LESSONS.md): the main path every student reads, and per rung a Deeper part —
counter tables, stall mixes, SASS counts beyond the deciding one, causes ruled out — under a heading
`### Deeper: <what>` (any level from ### down), which runs to the next heading of its level or higher. A Deeper
heading opens collapsed in JupyterLab (`jp-MarkdownHeadingCollapsed`), in Colab (the notebook's
`colab.collapsed_sections`, by the cell's Colab id) and in the classic notebook (`heading_collapsed`); `fold` sets
all three from the headings, so a lesson's author writes the heading only.

    python -m ladder.lessons.layers [notebooks...]          minutes of the main path and of each Deeper part
    python -m ladder.lessons.layers --fold [notebooks...]   set the collapsed flags (and write the notebooks)
"""
from __future__ import annotations

import re
import sys
from pathlib import Path

from ladder.lessons import reading

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"
HEADING = re.compile(r"^(#{1,6})\s+(.*)")
DEEPER = re.compile(r"^Deeper\b[:\s—–-]*(.*)", re.I)
MAIN_MINUTES, DEEPER_MINUTES = 45, 10


def _heading(cell) -> tuple[int, str] | None:
    """(level, title) of a markdown cell whose first line is a heading."""
    if cell.cell_type != "markdown":
        return None
    found = HEADING.match(cell.source.lstrip().split("\n", 1)[0])
    return (len(found.group(1)), found.group(2).strip()) if found else None


def parts(nb) -> tuple[list, dict[str, list]]:
    """The main path's cells, and each Deeper part's cells by its heading's title (the heading cell included)."""
    main, deeper, open_at, title = [], {}, None, None
    for cell in nb.cells:
        heading = _heading(cell)
        if heading and open_at is not None and heading[0] <= open_at:
            open_at = None
        if heading and heading[0] >= 3 and DEEPER.match(heading[1]):
            open_at, title = heading[0], heading[1]
            if title in deeper:
                raise ValueError(f"two Deeper parts titled {title!r}: give each its own")
            deeper[title] = []
        (deeper[title] if open_at is not None else main).append(cell)
    return main, deeper


def minutes(notebook) -> dict:
    """{"main": minutes of the main path, "deeper": {title: minutes}} at ladder.lessons.reading's rates."""
    import nbformat
    nb = nbformat.read(str(notebook), 4) if isinstance(notebook, (str, Path)) else notebook
    main, deeper = parts(nb)
    subset = lambda cells: reading.reading_minutes(nbformat.v4.new_notebook(cells=cells))["total"]  # noqa: E731
    return {"main": subset(main), "deeper": {title: subset(cells) for title, cells in deeper.items()}}


def _colab_id(cell) -> str:
    return cell.metadata.get("id") or cell.get("id") or ""


def fold(nb) -> bool:
    """Collapse every Deeper heading when the notebook opens (and no other heading); True if anything changed."""
    _, deeper = parts(nb)
    headings = {id(cells[0]) for cells in deeper.values()}
    changed = False
    for cell in nb.cells:
        if cell.cell_type != "markdown":
            continue
        want = id(cell) in headings
        for key in ("jp-MarkdownHeadingCollapsed", "heading_collapsed"):
            if bool(cell.metadata.get(key)) != want:
                changed = True
                if want:
                    cell.metadata[key] = True
                else:
                    cell.metadata.pop(key, None)
        if want and "id" not in cell.metadata:
            cell.metadata["id"] = cell.get("id") or f"deeper-{len(headings)}"
            changed = True
    sections = [_colab_id(cells[0]) for cells in deeper.values()]
    colab = nb.metadata.setdefault("colab", {})
    if colab.get("collapsed_sections", []) != sections:
        colab["collapsed_sections"] = sections
        changed = True
    if not colab.get("collapsed_sections") and set(colab) == {"collapsed_sections"}:
        del nb.metadata["colab"]
    return changed


def main(argv: list[str]) -> int:
    import nbformat
    do_fold = "--fold" in argv
    paths = [Path(a) for a in argv if not a.startswith("--")] or sorted(NOTEBOOKS.glob("*.ipynb"))
    over = 0
    for path in paths:
        nb = nbformat.read(str(path), 4)
        if do_fold and fold(nb):
            nbformat.write(nb, str(path))
        m = minutes(nb)
        deeper = ", ".join(f"{t[:40]} {v:.1f}" for t, v in m["deeper"].items()) or "none"
        print(f"{path.stem}: main {m['main']:.1f} min; Deeper parts ({len(m['deeper'])}): {deeper}")
        over += m["main"] > MAIN_MINUTES or any(v > DEEPER_MINUTES for v in m["deeper"].values())
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
