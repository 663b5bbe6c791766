"""What an instructor must be able to trust: no student's work overwritten, a submission graded by its identity
(not its file name) with the assignment's own checks, hidden tests that decide the score, no answer readable off
a checker, and one line for a file that is not an assignment."""
import copy
import math
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from ladder import cli
from ladder.exercises import notebooks

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOK_01 = "01_vector_add_intensity.ipynb"


def _cell(nb, grade_id: str):
    return next(c for c in nb.cells if notebooks.grade_id(c) == grade_id)


def _answer(nb, name: str, value: str) -> None:
    cell = next(c for c in nb.cells if c.source.startswith(f"{name} = ...  # YOUR ANSWER"))
    cell.source = f"{name} = {value}"


# ---------------------------------------------------------------- the exercise writer never loses work

@pytest.fixture
def course(tmp_path, monkeypatch):
    """A copy of one assignment (solution and exercise) that make_exercises works on."""
    for folder in ("solutions", "exercises"):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / NOTEBOOK_01).write_bytes((ROOT / folder / NOTEBOOK_01).read_bytes())
    monkeypatch.setattr(notebooks, "SOLUTIONS", tmp_path / "solutions")
    monkeypatch.setattr(notebooks, "EXERCISES", tmp_path / "exercises")
    return tmp_path


def _no_run(nb, path):  # the unanswered run: its outputs do not matter here
    pass


def test_an_exercise_is_current_as_committed(course):
    assert [(m.status, m.detail) for m in notebooks.make_exercises(_no_run, check=True)] == [("current", "")]


def test_every_committed_exercise_is_current():
    """`make-exercises --check` over the repository: nothing written, every exercise what its solution makes."""
    made = notebooks.make_exercises(_no_run, check=True)
    assert len(made) == 15 and [(m.path.name, m.detail) for m in made if m.status != "current"] == []


def test_the_writer_leaves_a_notebook_with_an_answer_untouched(course):
    path = course / "exercises" / NOTEBOOK_01
    nb = nbformat.read(path, as_version=4)
    _answer(nb, "flops", "N")
    nbformat.write(nb, path)
    saved = path.read_bytes()
    made = notebooks.make_exercises(_no_run)
    assert [m.status for m in made] == ["kept"] and "answer_flops (flops = N)" in made[0].detail
    assert path.read_bytes() == saved
    made = notebooks.make_exercises(_no_run, force=True)
    assert made[0].status == "written" and "over answers: answer_flops" in made[0].detail
    assert "flops = ...  # YOUR ANSWER" in path.read_text()


def test_check_finds_a_stale_exercise_and_writes_nothing(course):
    solution = course / "solutions" / NOTEBOOK_01
    nb = nbformat.read(solution, as_version=4)
    nb.cells[0].source += "\nA new sentence."
    nbformat.write(nb, solution)
    exercise = (course / "exercises" / NOTEBOOK_01).read_bytes()
    made = notebooks.make_exercises(_no_run, check=True)
    assert made[0].status == "stale" and "cell 0 (markdown) differs" in made[0].detail
    assert (course / "exercises" / NOTEBOOK_01).read_bytes() == exercise


def test_the_cli_says_which_notebook_it_kept(course, capsys, monkeypatch):
    monkeypatch.setattr(cli.colab, "write_setup_cells", lambda: [])
    path = course / "exercises" / NOTEBOOK_01
    nb = nbformat.read(path, as_version=4)
    _answer(nb, "bytes_moved", "6 * N")
    nbformat.write(nb, path)
    monkeypatch.setattr(cli, "execute", lambda nb, path, timeout: None)
    assert cli.main(["make-exercises"]) == 1
    captured = capsys.readouterr()
    assert "kept" in captured.out and "answer_bytes_moved" in captured.out and "--force overwrites" in captured.err
    assert cli.main(["make-exercises", "--check"]) == 0


def test_exercises_lists_the_assignments(capsys):
    assert cli.main(["exercises"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split()[:2] == ["id", "points"] and len(out) == 1 + 15 + 1
    assert any(line.startswith("13_capstone_decision") and " 8 " in line for line in out)


# ---------------------------------------------------------------- nbgrader's conventions, kept

@pytest.mark.parametrize("folder", ["solutions", "exercises"])
def test_every_assignment_carries_its_id_and_locks_its_givens(folder):
    for path in sorted((ROOT / folder).glob("*.ipynb")):
        nb = nbformat.read(path, as_version=4)
        assert notebooks.assignment_id(nb) == path.stem
        for cell in nb.cells:
            if cell.cell_type == "code":
                assert notebooks.grade_id(cell), (path.name, cell.source[:60])
                assert notebooks.is_locked(cell) != notebooks.is_solution_cell(cell) or folder == "exercises"
            hidden = notebooks.HIDDEN_BEGIN in cell.source
            assert hidden == (folder == "solutions" and notebooks.is_graded(cell)), (path.name, cell.source[:60])


def test_hidden_tests_are_cut_as_nbgrader_cuts_them():
    source = "check.x(a)\n### BEGIN HIDDEN TESTS\nassert a == 1\n### END HIDDEN TESTS"
    assert notebooks.strip_hidden_tests(source) == "check.x(a)"
    assert notebooks.strip_hidden_tests("### BEGIN HIDDEN TESTS\nz()\n### END HIDDEN TESTS\ncheck.y(b)") == "\ncheck.y(b)"


# ---------------------------------------------------------------- grading by identity

def test_a_renamed_submission_is_graded_by_its_assignment_with_its_own_checks(tmp_path):
    """Alice's download is `01_vector_add_intensity-alice (1).ipynb`. She replaced a check cell with a line
    that prints 'correct', rebound `check` to a checker that always passes, duplicated one graded cell, removed
    another and removed the set-up cell. The assignment's checks and hidden tests decide; each trick is flagged;
    the kernel's transport warning stays out of the table (the grade runs as the CLI, in a subprocess)."""
    nb = nbformat.read(ROOT / "exercises" / NOTEBOOK_01, as_version=4)
    for name, value in [("flops", "2 * N"), ("bytes_moved", "4 * N * BYTES_PER_ELEMENT"),
                        ("intensity", "1 / 6"), ("min_time_ms", "1.0"), ("min_time_measured_ms", "1.0")]:
        _answer(nb, name, value)
    _cell(nb, "check_flops").source = 'print("(1) FLOPs: correct (1e+09 FLOP)")'
    fake = nbformat.v4.new_code_cell(
        'class Always:\n    def __getattr__(self, name):\n        return lambda *a: print("correct")\ncheck = Always()')
    nb.cells.insert(nb.cells.index(_cell(nb, "check_bytes")), fake)
    copied = copy.deepcopy(_cell(nb, "check_intensity"))
    copied.id = "c0ffee00"  # Jupyter gives a pasted cell an id of its own
    nb.cells.append(copied)
    nb.cells.remove(_cell(nb, "check_bound"))
    setup = next(c for c in nb.cells if "check = VectorAddIntensity" in c.source)
    nb.cells.remove(setup)
    path = tmp_path / "01_vector_add_intensity-alice (1).ipynb"
    nbformat.write(nb, path)
    done = subprocess.run([sys.executable, "-m", "ladder", "grade", str(path), "--timeout", "300"],
                          capture_output=True, text=True, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "without encryption" not in done.stdout + done.stderr and "Traceback" not in done.stderr
    rows = {line.split()[0]: line for line in done.stdout.splitlines() if line.startswith("  ")}
    assert "(assignment 01_vector_add_intensity)" in done.stdout.splitlines()[0]
    assert " 0/1 " in rows["check_flops"] and "no multiply" in rows["check_flops"]
    assert " 0/1 " in rows["check_bytes"] and "hidden test" in rows["check_bytes"]
    assert " 1/1 " in rows["check_intensity"]
    assert " 0/1 " in rows["check_bound"] and "missing" in rows["check_bound"]
    assert rows["score"].split()[1] == "1/6", done.stdout
    flags = [line for line in done.stdout.splitlines() if line.startswith("  flag: ")]
    assert any("rebinds check" in f for f in flags)
    assert any("check_intensity: duplicated" in f for f in flags)
    assert any("check_bound: the graded cell was removed" in f for f in flags)
    assert any(f"given_{setup.id}: removed from the notebook; restored" in f for f in flags)


@pytest.mark.parametrize("make, says", [
    (lambda p: p.write_text("# Kernel Ladder\n"), "not a notebook"),
    (lambda p: nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("1")]), p),
     "not an assignment notebook (no assignment id"),
    (lambda p: nbformat.write(nbformat.v4.new_notebook(metadata={"assignment": {"id": "99_nothing"}}), p),
     "unknown assignment id '99_nothing'"),
    (None, "no such file"),
], ids=["readme", "no-id", "unknown-id", "missing"])
def test_grade_says_in_one_line_what_is_not_an_assignment(tmp_path, capsys, make, says):
    path = tmp_path / "README.md"
    if make:
        make(path)
    code = cli.main(["grade", str(path)])
    captured = capsys.readouterr()
    assert code == 2 and captured.out == "" and len(captured.err.strip().splitlines()) == 1, captured.err
    assert says in captured.err


# ---------------------------------------------------------------- no answer readable off a checker

from ladder.exercises import (AttentionBackwardDs, CausalSkip, GroupOrder, MmaFragments, OnlineSoftmax,  # noqa: E402
                              PipelineStages, RegisterBlock, SearchPrune, TileIntensity, TileMasks, VectorAddIntensity,
                              a03_tile_intensity, a04_masks, a05_online_softmax, a06_pipeline_stages, a07_group_order,
                              a08_causal_skip, a10_search_prune, a11_register_block, a12_mma_fragments,
                              a15_attention_backward_ds)


def _public(*things):
    return {f"{type(t).__name__}.{n}" if not hasattr(t, "__file__") else f"{t.__name__}.{n}": getattr(t, n)
            for t in things for n in dir(t) if not n.startswith("_")}


# each task: the checker call with the answer in place of `answer`, the expected answer, the objects a student
# reaches from the notebook (the checker instance, the module it imports)
NUMERIC = [
    ("A1 flops", lambda c, a: c.check_flops(a), 1e9, VectorAddIntensity(), None),
    ("A1 bytes", lambda c, a: c.check_bytes(a), 6e9, VectorAddIntensity(), None),
    ("A1 intensity", lambda c, a: c.check_intensity(a), 1 / 6, VectorAddIntensity(), None),
    ("A1 time", lambda c, a: c.check_min_time_ms(a, 3.35), 6e9 / 3.35e12 * 1e3, VectorAddIntensity(), None),
    ("A7 panels", lambda c, a: c.check_panels(a, 4096, 4096, 4096, 128, 256, 16, 132), 35651584, GroupOrder(),
     a07_group_order),
    ("A8 fraction", lambda c, a: c.check_fraction(a, 4096, 128, 64), 1056 / 2048, CausalSkip(), a08_causal_skip),
    ("A11 loads", lambda c, a: c.check_loads_per_fma(a, 8, 8), 0.25, RegisterBlock(), a11_register_block),
    ("A11 warp values", lambda c, a: c.check_warp_values(a, 128, 128, 8, 8), 144, RegisterBlock(), a11_register_block),
]
FUNCTIONS = [
    ("A3 intensity", lambda c, a: c.check_intensity(a), TileIntensity(), a03_tile_intensity),
    ("A4 masks", lambda c, a: c.check(a), TileMasks(), a04_masks),
    ("A5 numpy", lambda c, a: c.check_numpy(a), OnlineSoftmax(), a05_online_softmax),
    ("A6 ring", lambda c, a: c.check(a, a, a), PipelineStages(), a06_pipeline_stages),
    ("A3 loads", lambda c, a: c.check_load_bytes(a), TileIntensity(), a03_tile_intensity),
    ("A7 order", lambda c, a: c.check_order(a), GroupOrder(), a07_group_order),
    ("A8 ranges", lambda c, a: c.check_ranges(a), CausalSkip(), a08_causal_skip),
    ("A11 map", lambda c, a: c.check_map(a), RegisterBlock(), a11_register_block),
    ("A12 c", lambda c, a: c.check_c(a), MmaFragments(), a12_mma_fragments),
    ("A12 a", lambda c, a: c.check_a(a), MmaFragments(), a12_mma_fragments),
    ("A12 b", lambda c, a: c.check_b(a), MmaFragments(), a12_mma_fragments),
    ("A10 prune", lambda c, a: c.check(a), SearchPrune(), a10_search_prune),
    ("A15 numpy", lambda c, a: c.check_numpy(a), AttentionBackwardDs(), a15_attention_backward_ds),
]


@pytest.mark.parametrize("task, check, want, checker, module", NUMERIC, ids=[t[0] for t in NUMERIC])
def test_no_attribute_or_feedback_holds_a_numeric_answer(capsys, task, check, want, checker, module):
    assert check(checker, want), task
    reachable = _public(checker, *([module] if module else []))
    numbers = {n: v for n, v in reachable.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
    assert not [n for n, v in numbers.items() if math.isclose(v, want, rel_tol=1e-6)], task
    capsys.readouterr()
    for wrong in (want * 2, want / 3, want * 1.5, -1, "lots"):
        assert not check(checker, wrong)
        said = capsys.readouterr().out.replace(repr(wrong), "")
        assert not any(f"{want:{f}}" in said for f in (".4g", ".3g", ".3f", ".2f", "g")), (task, said)


@pytest.mark.parametrize("task, check, checker, module", FUNCTIONS, ids=[t[0] for t in FUNCTIONS])
def test_no_attribute_is_a_passing_answer(capsys, task, check, checker, module):
    """Every function a student can reach on the checker or in the module the notebook imports is tried as the
    answer: none passes."""
    passing = [name for name, value in _public(checker, module).items() if callable(value) and check(checker, value)]
    assert passing == [], (task, passing)
