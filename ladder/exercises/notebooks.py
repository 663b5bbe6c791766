"""Exercise notebooks made from solutions, in nbgrader's conventions, and graded.

One source of truth: each solutions/*.ipynb is complete. Its answers sit between `### BEGIN SOLUTION`
and `### END SOLUTION` in cells marked as nbgrader solution cells, and the cells that check them are
nbgrader autograded test cells (metadata `nbgrader: {grade: true, grade_id, points, ...}`), so the
folder drops into an nbgrader course as it is. exercises/*.ipynb is the same notebook with every
solution block blanked: each assignment `name = ...` in it stays as `name = ...  # YOUR ANSWER`, every
other line goes (`python -m ladder exercises` rewrites them; tests/test_exercises.py checks they agree).
"""
from __future__ import annotations

import copy
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from ladder.exercises.grading import GRADING_ENV

ROOT = Path(__file__).resolve().parents[2]
BEGIN, END = "### BEGIN SOLUTION", "### END SOLUTION"
_BLOCK = re.compile(r"^([ \t]*)### BEGIN SOLUTION\n.*?^[ \t]*### END SOLUTION\n?", re.M | re.S)
_ASSIGN = re.compile(r"^([ \t]*)(\w+)\s*=(?!=)", re.M)
_DEFINED = re.compile(r"^(?:[ \t]*def\s+(\w+)|(\w+)\s*=(?!=))", re.M)
SCHEMA = 3


def strip_solutions(source: str) -> str:
    def blank(m: re.Match) -> str:
        names = dict.fromkeys((ind, name) for ind, name in _ASSIGN.findall(m.group(0)))
        return "".join(f"{ind}{name} = ...  # YOUR ANSWER\n" for ind, name in names)
    return _BLOCK.sub(blank, source)


def answer_names(source: str) -> set[str]:
    """The names a cell with a solution block gives the student to fill in: its functions and its top-level
    assignments (what later cells use)."""
    return {a or b for a, b in _DEFINED.findall(source)}


def is_solution_cell(cell) -> bool:
    return cell.cell_type == "code" and BEGIN in cell.source


def is_graded(cell) -> bool:
    return bool(cell.metadata.get("nbgrader", {}).get("grade"))


def solution_answers(nb) -> set[str]:
    return set().union(*(answer_names(c.source) for c in nb.cells if is_solution_cell(c)))


def uses_answers(cell, answers: set[str]) -> bool:
    """A code cell left as the student gets it whose output depends on their answers."""
    return (cell.cell_type == "code" and "# YOUR ANSWER" not in cell.source
            and bool(answers & set(re.findall(r"\w+", cell.source))))


def mark_solution_cells(nb) -> None:
    """nbgrader's metadata on every cell with a solution block (nbgrader refuses a solution region
    outside a solution cell); its grade_id names the answers. Graded cells are marked by the author."""
    for cell in nb.cells:
        if is_solution_cell(cell):
            inside = answer_names("".join(m.group(0) for m in _BLOCK.finditer(cell.source)))
            names = "_".join(sorted(inside or answer_names(cell.source))) or "answer"
            cell.metadata["nbgrader"] = {"grade": False, "grade_id": f"answer_{names}", "locked": False,
                                         "schema_version": SCHEMA, "solution": True, "task": False}


def graded_cell(grade_id: str, points: int = 1) -> dict:
    return {"grade": True, "grade_id": grade_id, "locked": True, "points": points,
            "schema_version": SCHEMA, "solution": False, "task": False}


def problems(nb) -> list[str]:
    """What keeps a solution notebook from being an nbgrader source notebook (empty: nothing)."""
    found, ids = [], []
    graded = [c for c in nb.cells if is_graded(c)]
    if not graded:
        found.append("no autograded test cell (metadata nbgrader.grade = true)")
    for cell in nb.cells:
        meta = cell.metadata.get("nbgrader")
        if BEGIN in cell.source and not (meta and meta.get("solution")):
            found.append(f"a solution region outside a solution cell: {cell.source[:60]!r}")
        if meta:
            ids.append(meta.get("grade_id"))
            if meta.get("schema_version") != SCHEMA:
                found.append(f"{meta.get('grade_id')}: schema_version is not {SCHEMA}")
        if is_graded(cell) and not cell.metadata["nbgrader"].get("points", 0) > 0:
            found.append(f"{meta['grade_id']}: a graded cell without points")
    dupes = sorted({i for i in ids if ids.count(i) > 1})
    if dupes:
        found.append(f"grade_id used twice: {', '.join(dupes)}")
    return found


def exercise_from_solution(nb, target: Path):
    """The exercise notebook to save at `target`: solution blocks blanked, and the outputs of those cells
    and of every cell that uses an answer cleared (`python -m ladder exercises` reruns the notebook
    unanswered to fill them); other outputs stay the solution's run. Its Colab badge opens the exercise."""
    from ladder import colab
    ex = copy.deepcopy(nb)
    answers = solution_answers(nb)
    for cell in ex.cells:
        if is_solution_cell(cell):
            cell.source = strip_solutions(cell.source)
            cell.outputs, cell.execution_count = [], None
        elif uses_answers(cell, answers):
            cell.outputs, cell.execution_count = [], None
    return colab.with_setup(ex, target)


def write_exercises(run_unanswered) -> list[Path]:
    """Write exercises/ from solutions/ (marking the solution cells for nbgrader first). `run_unanswered(nb,
    path)` executes a notebook in place: the outputs of cells that use an answer come from it, so they
    show what a student sees before answering."""
    import nbformat
    written = []
    for sol in sorted((ROOT / "solutions").glob("*.ipynb")):
        target = ROOT / "exercises" / sol.name
        solution = nbformat.read(sol, as_version=4)
        before = nbformat.writes(solution)
        mark_solution_cells(solution)
        wrong = problems(solution)
        if wrong:
            raise ValueError(f"{sol.name}: " + "; ".join(wrong))
        if nbformat.writes(solution) != before:
            nbformat.write(solution, sol)
        ex = exercise_from_solution(solution, target)
        ran = copy.deepcopy(ex)
        run_unanswered(ran, target)
        answers = solution_answers(solution)
        for cell, done in zip(ex.cells, ran.cells):
            if uses_answers(cell, answers):
                cell.outputs, cell.execution_count = done.outputs, done.execution_count
        nbformat.write(ex, target)
        written.append(target)
    return written


# ---------------------------------------------------------------- grading a student's notebook

@dataclass
class Task:
    grade_id: str
    points: float
    score: float
    feedback: str


@dataclass
class Grade:
    path: Path
    tasks: list[Task] = field(default_factory=list)

    @property
    def score(self) -> float:
        return sum(t.score for t in self.tasks)

    @property
    def points(self) -> float:
        return sum(t.points for t in self.tasks)

    def table(self) -> str:
        width = max([len(t.grade_id) for t in self.tasks] + [4])
        lines = [f"{self.path}"]
        lines += [f"  {t.grade_id:<{width}}  {t.score:g}/{t.points:g}  {t.feedback}" for t in self.tasks]
        lines.append(f"  {'score':<{width}}  {self.score:g}/{self.points:g}")
        return "\n".join(lines)


def cell_score(cell, points: float) -> tuple[float, str]:
    """nbgrader's rule for a test cell: an error, or anything on stderr, scores 0; else full points. The
    feedback: the checker's last line, or the error."""
    out = "".join(o.get("text", "") for o in cell.get("outputs", []) if o.output_type == "stream" and o.name == "stdout")
    said = [line for line in out.splitlines() if line.strip()]
    errors = [o for o in cell.get("outputs", []) if o.output_type == "error"]
    if errors:
        e = errors[0]
        return 0, said[-1] if e.ename == "NotYet" and said else f"{e.ename}: {e.evalue}"[:300]
    stderr = "".join(o.get("text", "") for o in cell.get("outputs", []) if o.output_type == "stream" and o.name == "stderr")
    if stderr.strip():
        return 0, f"wrote to stderr (nbgrader scores that 0): {stderr.strip().splitlines()[-1][:200]}"
    return points, said[-1] if said else "ran without error"


def execute(nb, path: Path, timeout: int, **options) -> None:
    """Run notebook `nb` (saved at `path`) in place, from its folder, as a student's kernel would (lessons,
    exercises run unanswered, and notebooks being graded)."""
    import nbclient
    nbclient.NotebookClient(nb, timeout=timeout, kernel_name="python3",
                            resources={"metadata": {"path": str(path.parent)}}, **options).execute()


def grade(path: Path, timeout: int = 900, reference: Path | None = None) -> Grade:
    """Execute a student's notebook (every cell, errors and all) with grading on, and score each graded
    cell. The graded cells run as they stand in the reference (solutions/ of the same name, when there
    is one): a student's edits to them do not count, and a graded cell they deleted scores 0."""
    import nbformat
    path = Path(path)
    nb = nbformat.read(path, as_version=4)
    reference = reference or ROOT / "solutions" / path.name
    master = nbformat.read(reference, as_version=4) if reference.exists() else nb
    wanted = [c for c in master.cells if is_graded(c)]
    by_id = {c.metadata["nbgrader"]["grade_id"]: c for c in wanted}
    for cell in nb.cells:
        gid = cell.metadata.get("nbgrader", {}).get("grade_id")
        if gid in by_id and is_graded(by_id[gid]):
            cell.source, cell.metadata["nbgrader"] = by_id[gid].source, copy.deepcopy(by_id[gid].metadata["nbgrader"])
    saved = os.environ.get(GRADING_ENV)
    os.environ[GRADING_ENV] = "1"  # the kernel inherits it: a check that does not pass raises
    try:
        execute(nb, path, timeout, allow_errors=True)
    finally:
        if saved is None:
            os.environ.pop(GRADING_ENV, None)
        else:
            os.environ[GRADING_ENV] = saved
    ran = {c.metadata["nbgrader"]["grade_id"]: c for c in nb.cells if is_graded(c)}
    result = Grade(path)
    for gid, cell in by_id.items():
        points = float(cell.metadata["nbgrader"]["points"])
        if gid not in ran:
            result.tasks.append(Task(gid, points, 0, "the graded cell is missing from the notebook"))
        else:
            result.tasks.append(Task(gid, points, *cell_score(ran[gid], points)))
    return result
