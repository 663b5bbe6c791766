"""Exercise notebooks made from solutions, in nbgrader's conventions, and graded.

One source of truth: each solutions/*.ipynb is complete, and an nbgrader source notebook:
- its answers sit between `### BEGIN SOLUTION` and `### END SOLUTION` in solution cells;
- the cells that check them are autograded test cells (`nbgrader: {grade: true, grade_id, points, ...}`);
  what decides their score sits between `### BEGIN HIDDEN TESTS` and `### END HIDDEN TESTS`: a checker
  the block builds itself (not the notebook's `check`, which a student's cell could rebind), cut from the
  exercise as nbgrader cuts hidden tests, put back when the notebook is graded;
- every other code cell is read-only (`locked`), so a student cannot change the givens a check uses;
- the notebook carries its assignment id in its metadata (`assignment.id`, the solution's file stem).
exercises/*.ipynb is the same notebook with every solution block blanked (each assignment `name = ...`
in it stays as `name = ...  # YOUR ANSWER`, every other line goes) and the hidden tests cut
(`python -m ladder make-exercises` writes them and never over a student's answers; tests check they agree).
`grade()` finds the assignment by that id, not by the file's name, and restores every locked cell by grade_id.
"""
from __future__ import annotations

import ast
import copy
import hashlib
import json
import os
import re
import subprocess
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from ladder import colab
from ladder.exercises.grading import GRADING_ENV


ROOT = Path(__file__).resolve().parents[2]
SOLUTIONS, EXERCISES = ROOT / "solutions", ROOT / "exercises"
BEGIN, END = "### BEGIN SOLUTION", "### END SOLUTION"
HIDDEN_BEGIN, HIDDEN_END = "### BEGIN HIDDEN TESTS", "### END HIDDEN TESTS"
_BLOCK = re.compile(r"^([ \t]*)### BEGIN SOLUTION\n.*?^[ \t]*### END SOLUTION\n?", re.M | re.S)
_HIDDEN = re.compile(r"\n?^[ \t]*### BEGIN HIDDEN TESTS\n.*?^[ \t]*### END HIDDEN TESTS[ \t]*(?:\n|$)", re.M | re.S)
_ASSIGN = re.compile(r"^([ \t]*)(\w+)\s*=(?!=)", re.M)
_DEFINED = re.compile(r"^(?:[ \t]*def\s+(\w+)|(\w+)\s*=(?!=))", re.M)
SCHEMA = 3


class NotAnAssignment(ValueError):
    """A file `grade` cannot grade: not a notebook, or no (or an unknown) assignment id. One line."""


def strip_solutions(source: str) -> str:
    def blank(m: re.Match) -> str:
        names = dict.fromkeys((ind, name) for ind, name in _ASSIGN.findall(m.group(0)))
        return "".join(f"{ind}{name} = ...  # YOUR ANSWER\n" for ind, name in names)
    return _BLOCK.sub(blank, source)


def strip_hidden_tests(source: str) -> str:
    """The test cell as a student gets it: nbgrader's hidden-test blocks cut, markers and all."""
    return _HIDDEN.sub("\n", source).rstrip("\n")


def answer_names(source: str) -> set[str]:
    """The names a cell with a solution block gives the student to fill in: its functions and its top-level
    assignments (what later cells use)."""
    return {a or b for a, b in _DEFINED.findall(source)}


def is_solution_cell(cell) -> bool:
    return cell.cell_type == "code" and BEGIN in cell.source


def is_graded(cell) -> bool:
    return bool(cell.metadata.get("nbgrader", {}).get("grade"))


def is_locked(cell) -> bool:
    return bool(cell.metadata.get("nbgrader", {}).get("locked"))


def grade_id(cell) -> str | None:
    return cell.metadata.get("nbgrader", {}).get("grade_id")


def solution_answers(nb) -> set[str]:
    return set().union(*(answer_names(c.source) for c in nb.cells if is_solution_cell(c)))


def uses_answers(cell, answers: set[str]) -> bool:
    """A code cell left as the student gets it whose output depends on their answers."""
    return (cell.cell_type == "code" and "# YOUR ANSWER" not in cell.source
            and bool(answers & set(re.findall(r"\w+", cell.source))))


def assignment_id(nb) -> str | None:
    return nb.metadata.get("assignment", {}).get("id")


def mark_solution_cells(nb, assignment: str) -> None:
    """nbgrader's metadata: every cell with a solution block a solution cell (nbgrader refuses a solution
    region outside one), its grade_id naming the answers; every other code cell read-only (locked), so the
    givens a check uses are the assignment's when it is graded; the notebook's assignment id. Graded cells
    are marked by the author."""
    nb.metadata["assignment"] = {"id": assignment}
    for cell in nb.cells:
        if is_solution_cell(cell):
            inside = answer_names("".join(m.group(0) for m in _BLOCK.finditer(cell.source)))
            names = "_".join(sorted(inside or answer_names(cell.source))) or "answer"
            cell.metadata["nbgrader"] = {"grade": False, "grade_id": f"answer_{names}", "locked": False,
                                         "schema_version": SCHEMA, "solution": True, "task": False}
        elif cell.cell_type == "code" and not is_graded(cell):
            cell.metadata["nbgrader"] = {"grade": False, "grade_id": f"given_{cell.id}", "locked": True,
                                         "schema_version": SCHEMA, "solution": False, "task": False}


def graded_cell(grade_id: str, points: int = 1) -> dict:
    return {"grade": True, "grade_id": grade_id, "locked": True, "points": points,
            "schema_version": SCHEMA, "solution": False, "task": False}


def problems(nb) -> list[str]:
    """What keeps a solution notebook from being an nbgrader source notebook (empty: nothing)."""
    found, ids = [], []
    graded = [c for c in nb.cells if is_graded(c)]
    if not graded:
        found.append("no autograded test cell (metadata nbgrader.grade = true)")
    if not assignment_id(nb):
        found.append("no assignment id (metadata assignment.id)")
    for cell in nb.cells:
        meta = cell.metadata.get("nbgrader")
        if BEGIN in cell.source and not (meta and meta.get("solution")):
            found.append(f"a solution region outside a solution cell: {cell.source[:60]!r}")
        if HIDDEN_BEGIN in cell.source and not is_graded(cell):
            found.append(f"hidden tests outside a graded cell: {cell.source[:60]!r}")
        if is_graded(cell) and HIDDEN_BEGIN not in cell.source:
            found.append(f"{meta['grade_id']}: a graded cell without hidden tests (what decides its score)")
        if cell.cell_type == "code" and not meta:
            found.append(f"a code cell neither an answer, a test nor read-only: {cell.source[:60]!r}")
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
    """The exercise notebook to save at `target`: solution blocks blanked, hidden tests cut, and the outputs of
    those cells and of every cell that uses an answer cleared (`make_exercises` reruns the notebook unanswered
    to fill them); other outputs stay the solution's run. Its Colab badge opens the exercise."""
    ex = copy.deepcopy(nb)
    answers = solution_answers(nb)
    for cell in ex.cells:
        if is_solution_cell(cell):
            cell.source = strip_solutions(cell.source)
            cell.metadata["nbgrader"]["checksum"] = checksum(cell.source)
            cell.outputs, cell.execution_count = [], None
        elif is_graded(cell):
            cell.source = strip_hidden_tests(cell.source)
            cell.outputs, cell.execution_count = [], None
        elif uses_answers(cell, answers):
            cell.outputs, cell.execution_count = [], None
    return colab.with_setup(ex, target)


def checksum(source: str) -> str:
    """What an answer cell held when it was written (nbgrader keeps such a checksum in a cell's metadata too)."""
    return hashlib.sha256(source.encode()).hexdigest()[:16]


def answered_cells(exercise, solution) -> list[str]:
    """The answer cells of a saved exercise that hold a student's work: neither the stub they were written with
    (their checksum) nor the blank stub `solution` makes now."""
    blank = {grade_id(c): strip_solutions(c.source) for c in solution.cells if is_solution_cell(c)}
    return [f"{gid} ({cell.source.strip().splitlines()[0][:50] if cell.source.strip() else 'emptied'})"
            for cell in exercise.cells if (gid := grade_id(cell)) in blank and cell.source != blank[gid]
            and _edited(cell)]


def _edited(cell) -> bool:
    """An exercise's answer cell whose source is no longer the stub it was written with (its checksum)."""
    meta = cell.metadata.get("nbgrader", {})
    return bool(meta.get("solution")) and checksum(cell.source) != meta.get("checksum")


@dataclass
class Made:
    path: Path
    status: str        # "written", "current", "stale", or "kept" (it holds answers: not overwritten)
    detail: str = ""


def make_exercises(run_unanswered, force: bool = False, check: bool = False, only: list[str] = ()) -> list[Made]:
    """exercises/ from solutions/ (marking each solution for nbgrader first).

    `run_unanswered(nb, path)` executes a notebook in place: the outputs of cells that use an answer (and of
    the tests) come from it, so they show what a student sees before answering. An exercise whose answer
    cells differ from the blank stubs holds someone's work: it is kept unless `force`. With `check`, nothing is
    written or run: each exercise is "current" or "stale" (its cells' sources or nbgrader metadata differ from
    what the solution makes). `only`: these assignments (ids, or any part of one), not all."""
    import nbformat
    made = []
    for sol in sorted(SOLUTIONS.glob("*.ipynb")):
        if only and not any(name in sol.stem for name in only):
            continue
        target = EXERCISES / sol.name
        solution = nbformat.read(sol, as_version=4)
        before = nbformat.writes(solution)
        mark_solution_cells(solution, sol.stem)
        wrong = problems(solution)
        if wrong:
            raise ValueError(f"{sol.name}: " + "; ".join(wrong))
        ex = exercise_from_solution(solution, ROOT / "exercises" / sol.name)  # its badge: the repository's path
        old = nbformat.read(target, as_version=4) if target.exists() else None
        if check:
            why = "missing" if old is None else differences(old, ex) or (
                f"solutions/{sol.name} lacks its nbgrader metadata" if nbformat.writes(solution) != before else "")
            made.append(Made(target, "stale" if why else "current", why))
            continue
        answered = answered_cells(old, solution) if old is not None else []
        if answered and not force:
            made.append(Made(target, "kept", "answered: " + ", ".join(answered)))
            continue
        if nbformat.writes(solution) != before:
            nbformat.write(solution, sol)
        ran = copy.deepcopy(ex)
        run_unanswered(ran, target)
        answers = solution_answers(solution)
        for cell, done in zip(ex.cells, ran.cells):
            if uses_answers(cell, answers) or is_graded(cell):
                cell.outputs, cell.execution_count = done.outputs, done.execution_count
        nbformat.write(ex, target)
        made.append(Made(target, "written", "over answers: " + ", ".join(answered) if answered else ""))
    return made


def differences(old, new) -> str:
    """How a saved exercise differs from what its solution makes, in cells' sources and nbgrader metadata
    (outputs aside: they come from a run; an answer a student wrote aside: its stub's checksum still says
    what it was made from); "" when it does not."""
    if assignment_id(old) != assignment_id(new):
        return f"assignment id {assignment_id(old)!r}, not {assignment_id(new)!r}"
    if len(old.cells) != len(new.cells):
        return f"{len(old.cells)} cells, not {len(new.cells)}"
    for i, (a, b) in enumerate(zip(old.cells, new.cells)):
        if (a.source != b.source and not _edited(a)) or a.metadata.get("nbgrader") != b.metadata.get("nbgrader"):
            return f"cell {i} ({grade_id(b) or b.cell_type}) differs"
    return ""


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
    assignment: str = ""
    tasks: list[Task] = field(default_factory=list)
    flags: list[str] = field(default_factory=list)   # what an instructor should know, beside the score

    @property
    def score(self) -> float:
        return sum(t.score for t in self.tasks)

    @property
    def points(self) -> float:
        return sum(t.points for t in self.tasks)

    def table(self) -> str:
        width = max([len(t.grade_id) for t in self.tasks] + [5])
        lines = [f"{self.path} (assignment {self.assignment})"]
        lines += [f"  {t.grade_id:<{width}}  {t.score:g}/{t.points:g}  {t.feedback}" for t in self.tasks]
        lines.append(f"  {'score':<{width}}  {self.score:g}/{self.points:g}")
        lines += [f"  flag: {f}" for f in self.flags]
        return "\n".join(lines)


def cell_score(cell, points: float) -> tuple[float, str]:
    """nbgrader's rule for a test cell: an error, or anything on stderr, scores 0; else full points. The
    feedback: the checker's line (a NotYet's message), the error, or the checker's last line."""
    out = "".join(o.get("text", "") for o in cell.get("outputs", []) if o.output_type == "stream" and o.name == "stdout")
    said = [line for line in out.splitlines() if line.strip()]
    errors = [o for o in cell.get("outputs", []) if o.output_type == "error"]
    if errors:
        e = errors[0]
        return 0, (e.evalue if e.ename == "NotYet" else f"{e.ename}: {e.evalue}")[:300]
    stderr = "".join(o.get("text", "") for o in cell.get("outputs", []) if o.output_type == "stream" and o.name == "stderr")
    if stderr.strip():
        return 0, f"wrote to stderr (nbgrader scores that 0): {stderr.strip().splitlines()[-1][:200]}"
    return points, said[-1] if said else "ran without error"


def execute(nb, path: Path, timeout: int, **options) -> None:
    """Run notebook `nb` (saved at `path`) in place, from its folder, as a student's kernel would (lessons,
    exercises run unanswered, and notebooks being graded). The kernel process's own log (ipykernel's transport
    warning, say) goes nowhere instead of into the terminal; what a cell prints comes back in its outputs."""
    import nbclient
    nbclient.NotebookClient(nb, timeout=timeout, kernel_name="python3",
                            resources={"metadata": {"path": str(path.parent)}}, **options).execute(
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def read_submission(path: Path):
    """A student's notebook and the assignment it is (its solution notebook), or NotAnAssignment in one line."""
    import nbformat
    if not path.is_file():
        raise NotAnAssignment(f"{path}: no such file")
    try:
        nb = nbformat.read(path, as_version=4)
    except (json.JSONDecodeError, UnicodeDecodeError, nbformat.reader.NotJSONError) as e:
        raise NotAnAssignment(f"{path}: not a notebook ({type(e).__name__})") from None
    except Exception as e:  # nbformat's validation and version errors
        raise NotAnAssignment(f"{path}: not a readable notebook ({type(e).__name__}: {str(e).splitlines()[0][:80]})") from None
    aid = assignment_id(nb)
    known = sorted(p.stem for p in SOLUTIONS.glob("*.ipynb"))
    if not aid:
        raise NotAnAssignment(f"{path}: not an assignment notebook (no assignment id in its metadata; "
                              "exercises/*.ipynb carry one)")
    if aid not in known:
        raise NotAnAssignment(f"{path}: unknown assignment id {aid!r}; known: {', '.join(known)}")
    return nb, nbformat.read(SOLUTIONS / f"{aid}.ipynb", as_version=4)


_SUSPECT = re.compile(r"\bladder\.exercises\b|\bgrading\b|\bNotYet\b|GRADING|NBGRADER|\bsys\.modules\b|\bbuiltins\b|"
                      r"\bsetattr\b|\bcheck\.\w+\s*=", re.M)


def bound_names(source: str) -> set[str]:
    """The names a cell's top-level statements bind (assignments, imports, defs, loop variables); none if it does
    not parse (IPython magics, a syntax error: the run says what is wrong with those)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return set()
    names = set()
    for stmt in tree.body:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(stmt.name)
        elif isinstance(stmt, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in stmt.names)
        else:
            names.update(n.id for n in ast.walk(stmt) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store))
    return names


def _reaches_in(cell, givens: set[str]) -> str | None:
    """What in a student's cell reaches into the checking: a given it rebinds, or the checker's machinery."""
    rebound = sorted(bound_names(cell.source) & givens)
    if rebound:
        return f"rebinds {', '.join(rebound)}, given by the assignment"
    found = _SUSPECT.search(cell.source)
    return f"uses {found.group(0).strip()!r}" if found else None


def assemble(student, master) -> tuple[list, list[str]]:
    """The cells that are graded, and the flags: the student's cells in their order with every locked cell
    (tests, hidden tests and givens) as the assignment has it, matched by grade_id whatever the file is called.
    A locked given the student removed comes back after the cell that precedes it in the assignment; a graded
    cell removed stays out (it scores 0); a second copy of a cell, or a cell claiming an id the assignment does
    not have, is dropped. Cells that reach into the checker are flagged for a look by hand."""
    by_id = {grade_id(c): c for c in master.cells if grade_id(c)}
    givens = set().union(*(bound_names(c.source) for c in master.cells if is_locked(c) and not is_graded(c)))
    seen, cells, flags = Counter(), [], []
    for cell in student.cells:
        gid = grade_id(cell)
        if gid is None:
            own = copy.deepcopy(cell)
            own.metadata.pop("nbgrader", None)
            cells.append(own)
            if own.cell_type == "code" and (why := _reaches_in(own, givens)):
                flags.append(f"a cell of the student's own {why} (review by hand)")
            continue
        seen[gid] += 1
        if gid not in by_id:
            flags.append(f"{gid}: no such cell in the assignment; dropped")
            continue
        if seen[gid] > 1:
            flags.append(f"{gid}: duplicated; the copy was dropped")
            continue
        given = by_id[gid]
        if is_locked(given):
            cells.append(copy.deepcopy(given))
        else:
            answer = copy.deepcopy(cell)
            answer.metadata["nbgrader"] = copy.deepcopy(given.metadata["nbgrader"])
            cells.append(answer)
            if why := _reaches_in(answer, givens):
                flags.append(f"{gid}: the answer {why} (review by hand)")
    for i, given in enumerate(master.cells):
        gid = grade_id(given)
        if gid is None or seen[gid]:
            continue
        if is_graded(given):
            flags.append(f"{gid}: the graded cell was removed (scores 0)")
            continue
        before = [grade_id(c) for c in master.cells[:i] if grade_id(c)]
        at = next((j + 1 for j in range(len(cells) - 1, -1, -1) if grade_id(cells[j]) in before), 0)
        cells.insert(at, copy.deepcopy(given))
        flags.append(f"{gid}: removed from the notebook; restored from the assignment")
    return cells, flags


def grade(path: Path, timeout: int = 900) -> Grade:
    """Execute a student's notebook (every cell, errors and all) with grading on, and score each graded
    cell. The assignment is the one the notebook's metadata names, whatever the file is called; its locked
    cells (tests with their hidden tests, and givens) run as the assignment has them."""
    path = Path(path)
    nb, master = read_submission(path)
    nb.cells, flags = assemble(nb, master)
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    saved = os.environ.get(GRADING_ENV)
    os.environ[GRADING_ENV] = "1"  # the kernel inherits it: a check that does not pass raises
    try:
        execute(nb, path, timeout, allow_errors=True)
    finally:
        if saved is None:
            os.environ.pop(GRADING_ENV, None)
        else:
            os.environ[GRADING_ENV] = saved
    ran = {grade_id(c): c for c in nb.cells if is_graded(c)}
    result = Grade(path, assignment_id(master), flags=flags)
    for given in master.cells:
        if not is_graded(given):
            continue
        gid, points = grade_id(given), float(given.metadata["nbgrader"]["points"])
        if gid not in ran:
            result.tasks.append(Task(gid, points, 0, "the graded cell is missing from the notebook"))
        else:
            result.tasks.append(Task(gid, points, *cell_score(ran[gid], points)))
    return result
