"""What every checker shares: a Result that passes or says why not, printed as one line of feedback.

A checker prints its feedback ("(1) FLOPs: correct (1e+09 FLOP)", "...: not quite: ...") and returns a
Result. While a notebook is being graded (nbgrader's autograde or validate set NBGRADER_EXECUTION;
`python -m ladder grade` sets KERNEL_LADDER_GRADING) a Result that did not pass is also raised, as
NotYet (an AssertionError), so the graded cell fails and scores 0, which is how nbgrader scores a test
cell. A student running the notebook sees only the line, no traceback.
"""
from __future__ import annotations

import ast
import inspect
import math
import os
import textwrap
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass


GRADING_ENV = "KERNEL_LADDER_GRADING"
NOT_ANSWERED = "not answered yet"
_HIDDEN = ContextVar("hidden", default=False)


def grading() -> bool:
    """True while an autograder runs the notebook: a check that does not pass then raises."""
    return bool(os.environ.get(GRADING_ENV) or os.environ.get("NBGRADER_EXECUTION"))


class NotYet(AssertionError):
    """A check that did not pass, raised only while grading; its message is the feedback line."""


@dataclass(frozen=True)
class Result:
    task: str          # e.g. "(1) FLOPs"
    passed: bool
    reason: str        # the feedback after "task: "
    answered: bool = True

    def __bool__(self) -> bool:
        return self.passed

    def __str__(self) -> str:
        return f"{self.task}: {self.reason}"

    def _ipython_display_(self) -> None:
        """Nothing: the checker printed the feedback already (and nbgrader reads a displayed number as
        partial credit)."""


@contextmanager
def hidden():
    """nbgrader's hidden tests (`### BEGIN HIDDEN TESTS` in a solution's graded cell, cut from the exercise):
    checks run inside print nothing and raise NotYet on any answer that does not pass, graded or not, so the
    score is decided by a checker the hidden block builds itself, not by the `check` a student's cell could
    rebind. The NotYet names the task only: what was wrong is the visible check's feedback."""
    token = _HIDDEN.set(True)
    try:
        yield
    finally:
        _HIDDEN.reset(token)


def verdict(task: str, passed: bool, reason: str, answered: bool = True) -> Result:
    """Print the feedback line and return it as a Result; while grading, raise one that did not pass."""
    result = Result(task, passed, reason, answered)
    if _HIDDEN.get():
        if not passed:
            raise NotYet(f"{task}: not passed by the hidden test")
        return result
    print(result, flush=True)
    if grading() and not passed:
        raise NotYet(str(result))
    return result


def passed(task: str, reason: str) -> Result:
    return verdict(task, True, reason)


def not_yet(task: str, reason: str) -> Result:
    return verdict(task, False, reason)


def not_answered(task: str) -> Result:
    return verdict(task, False, NOT_ANSWERED, answered=False)


def unanswered(answer) -> bool:
    """The stub's `...` (or None): not an answer yet."""
    return answer is ... or answer is None


def close(answer, want: float, rel: float = 0.02) -> bool:
    try:
        return math.isclose(float(answer), want, rel_tol=rel)
    except (TypeError, ValueError, OverflowError):
        return False


def check_number(task: str, answer, want: float, hints: list[tuple[float, str]], unit: str,
                 rel: float = 0.02) -> Result:
    """A numeric answer: correct within `rel`; a known wrong value gets its hint."""
    if unanswered(answer):
        return not_answered(task)
    if close(answer, want, rel):
        return passed(task, f"correct ({want:.4g}{' ' + unit if unit else ''})")
    hint = next((h for wrong, h in hints if close(answer, wrong, rel)), None)
    return not_yet(task, f"not quite: {hint}" if hint else f"not quite ({answer!r} is not it); recount step by step")


def first_line(e: BaseException) -> str:
    """An exception of the student's code, in one line: what broke, not where."""
    return f"{type(e).__name__}: {(str(e).strip().splitlines() or [''])[0][:200]}"


class Fail(Exception):
    """Why an answer is not right yet, raised from inside a check (see `judge`)."""


def judge(task: str, answers: tuple, body) -> Result:
    """Run `body()` on answers that are all given: what it returns is the reason it passed; a Fail it raises
    is why not; any other exception comes from the student's code and is named in one line."""
    if any(unanswered(a) or (callable(a) and still_blank(a)) for a in answers):
        return not_answered(task)
    try:
        reason = body()
    except Fail as f:
        return not_yet(task, str(f))
    except Exception as e:  # the answer is the student's code: say what broke, not where
        return not_yet(task, f"your code fails ({first_line(e)})")
    return passed(task, reason)


def still_blank(fn) -> bool:
    """The exercise's stub: the function's source still holds a `...`."""
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(getattr(fn, "fn", fn))))
    except (OSError, TypeError, SyntaxError):
        return False
    return any(isinstance(node, ast.Constant) and node.value is Ellipsis for node in ast.walk(tree))
