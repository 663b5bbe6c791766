"""The assignment: exercises are the solutions with answers blanked, and the checkers give feedback."""
from pathlib import Path

import nbformat
import pytest

from ladder.exercises import VectorAddIntensity, exercise_from_solution, strip_solutions

ROOT = Path(__file__).resolve().parent.parent
SOLUTIONS = sorted((ROOT / "solutions").glob("*.ipynb"))


@pytest.mark.parametrize("solution", SOLUTIONS, ids=lambda p: p.name)
def test_exercise_is_the_solution_with_answers_blanked(solution):
    exercise = ROOT / "exercises" / solution.name
    assert exercise.exists(), f"run `python -m ladder exercises` to create {exercise.name}"
    want = [c.source for c in exercise_from_solution(nbformat.read(solution, as_version=4)).cells]
    got = [c.source for c in nbformat.read(exercise, as_version=4).cells]
    assert got == want, "exercises/ is out of date: run `python -m ladder exercises`"
    assert any("# YOUR ANSWER" in s for s in got) and not any("# BEGIN SOLUTION" in s for s in got)


def test_strip_keeps_the_names_to_fill_in():
    src = "x = 1\n# BEGIN SOLUTION\nflops = N  # one add\nflops = N * 1\nbytes_moved = 6 * N\n# END SOLUTION\nprint(x)\n"
    assert strip_solutions(src) == "x = 1\nflops = ...  # YOUR ANSWER\nbytes_moved = ...  # YOUR ANSWER\nprint(x)\n"


@pytest.mark.parametrize("method, answer, expect", [
    ("check_flops", ..., "not answered yet"),
    ("check_flops", 1e9, "correct"),
    ("check_flops", 2e9, "no multiply"),
    ("check_bytes", 6e9, "correct"),
    ("check_bytes", 4e9, "counted only the reads"),
    ("check_bytes", 3e9, "elements, not bytes"),
    ("check_bytes", 12e9, "2 bytes per element"),
    ("check_bytes", "lots", "not quite"),
    ("check_intensity", 1 / 6, "correct"),
    ("check_intensity", 6.0, "FLOPs per byte, not bytes per FLOP"),
    ("check_intensity", 0.25, "reads only"),
])
def test_feedback(capsys, method, answer, expect):
    getattr(VectorAddIntensity(), method)(answer)
    assert expect in capsys.readouterr().out


def test_bound_and_time_feedback(capsys):
    task = VectorAddIntensity()
    task.check_bound("compute", ridge_flop_per_byte=20)
    task.check_bound("memory", ridge_flop_per_byte=20)
    task.check_min_time_ms(1.791, 3.35)
    task.check_min_time_ms(1791.0, 3.35)
    task.check_min_time_ms(None, 3.35)
    out = capsys.readouterr().out.splitlines()
    assert "not quite" in out[0] and "correct" in out[1] and "correct" in out[2]
    assert "microseconds" in out[3] and "not answered yet" in out[4]
