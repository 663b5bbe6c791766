"""Assignment 14, the vector add as a torch.library operator: the right answer passes all three checks, each typical
wrong one (a fake of the wrong shape, dtype or device, a fake that launches the kernel or reads data, an op that
writes into or returns its input, no fake, no kernel, a short grid, no length check) is named by the check that
catches it, the exercise's stub is "not answered yet", nothing the checker module exports passes, and the notebook
is graded by its hidden tests (one run of the solution's notebook with a wrong fake in place)."""
import importlib.util
from pathlib import Path

import ladder  # noqa: F401  (first: without a GPU it turns on Triton's interpreter, before Triton loads)
import nbformat
import pytest
import torch
import triton

from kernels.triton.vector_add import vector_add_kernel
from ladder.exercises import NotYet, VectorAddOp, a14_vector_add_op, notebooks, strip_solutions
from ladder.exercises.grading import hidden

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOK = "14_vector_add_op.ipynb"
ANSWER_LINES = ("empty_like", "cdiv", "new_empty(a.shape)")   # pieces of the answer: never in feedback


def _same(a, b):
    if a.dim() != 1 or a.shape != b.shape:
        raise ValueError("not vectors of one length")


def _launch(a, b, out, programs=None):
    n = a.numel()
    vector_add_kernel[(programs or triton.cdiv(n, 256),)](a, b, out, n, BLOCK=256)


def good(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    _same(a, b)
    out = torch.empty_like(a)
    if out.numel():
        _launch(a, b, out)
    return out


def good_fake(a, b):
    _same(a, b)
    return torch.empty_like(a)


def writes_a(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:       # the sum into a, a copy returned
    _same(a, b)
    _launch(a, b, a)
    return a.clone()


def returns_a(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:      # in place, and a returned: aliasing
    _same(a, b)
    _launch(a, b, a)
    return a


def torch_add(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:      # right values, but no Triton kernel
    _same(a, b)
    return a + b


def short_grid(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:     # n // BLOCK programs: the ragged tail left out
    _same(a, b)
    out = torch.zeros_like(a)
    _launch(a, b, out, programs=max(a.numel() // 256, 1))
    return out


def fp32_out(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    _same(a, b)
    out = torch.empty(a.shape, device=a.device)
    _launch(a, b, out)
    return out


def unchecked(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:     # takes vectors of different lengths
    out = torch.empty_like(a)
    _launch(a, b, out)
    return out


def fake_launches(a, b):                                            # the real kernel in the fake
    _same(a, b)
    out = torch.empty_like(a)
    _launch(a, b, out)
    return out


def fake_reads(a, b):                                               # a value of the data in the fake
    _same(a, b)
    return a.new_empty(a.shape[0] + int(a.sum().item() * 0))


def stub(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    out = ...  # YOUR ANSWER
    return out


def stub_fake(a, b):
    out = ...  # YOUR ANSWER
    return out


def _op(name: str, impl, fake):
    op = torch.library.custom_op(f"a14_test::{name}", impl, mutates_args=())
    if fake is not None:
        op.register_fake(fake)
    return op


OPS = {name: _op(name, impl, fake) for name, impl, fake in [
    ("good", good, good_fake),
    ("fake_shape", good, lambda a, b: (_same(a, b), a.new_empty(a.shape[0] + 1))[1]),
    ("fake_scalar", good, lambda a, b: (_same(a, b), torch.empty(()))[1]),
    ("fake_fp32", good, lambda a, b: (_same(a, b), torch.empty_like(a, dtype=torch.float32))[1]),
    ("fake_cpu", good, lambda a, b: (_same(a, b), torch.empty(a.shape, dtype=a.dtype, device="cpu"))[1]),
    ("fake_launches", good, fake_launches),
    ("fake_reads", good, fake_reads),
    ("fake_returns_a", good, lambda a, b: (_same(a, b), a)[1]),
    ("fake_unchecked", good, lambda a, b: torch.empty_like(a)),
    ("writes_a", writes_a, good_fake),
    ("returns_a", returns_a, good_fake),
    ("torch_add", torch_add, good_fake),
    ("short_grid", short_grid, good_fake),
    ("fp32_out", fp32_out, good_fake),
    ("unchecked", unchecked, good_fake),
    ("no_fake", good, None),
    ("stub", stub, stub_fake),
    ("stub_fake", good, stub_fake),
]}
RESULT, OPCHECK, FAKE = "check_result", "check_opcheck", "check_fake"
CORRECT = "correct"


@pytest.mark.parametrize("name, check, expect", [
    ("good", RESULT, CORRECT), ("good", OPCHECK, CORRECT), ("good", FAKE, CORRECT),
    ("fake_shape", OPCHECK, "differ in shape"),
    ("fake_shape", FAKE, "at n = 1 your fake's output has shape (2,), the op's (1,)"),
    ("fake_scalar", FAKE, "your fake's output has shape ()"),
    ("fake_fp32", OPCHECK, "differ in dtype"),
    ("fake_fp32", FAKE, "your fake's output is torch.float32, the op's torch.float16"),
    ("fake_cpu", FAKE, "your fake's output is on cpu"),   # on the meta device; opcheck on a CPU cannot see it
    ("fake_launches", OPCHECK, "your fake launches vector_add_kernel"),
    ("fake_launches", FAKE, "your fake launches vector_add_kernel"),
    ("fake_reads", OPCHECK, "your fake reads its inputs' data"),
    ("fake_reads", FAKE, "your fake reads its inputs' data"),
    ("fake_returns_a", OPCHECK, "differ in aliasing"),
    ("fake_returns_a", FAKE, "your fake returns a (or a view of it)"),
    ("fake_unchecked", FAKE, "with a of 7 elements and b of 6 your fake returns a tensor"),
    ("writes_a", RESULT, "your op writes into a"),
    ("writes_a", OPCHECK, "your op writes into an input, and its schema (mutates_args=()) says it does not"),
    ("returns_a", RESULT, "your op returns a (or a view of it)"),
    ("returns_a", OPCHECK, "your op returns one of its inputs"),
    ("returns_a", FAKE, "the op itself fails at n = 1"),
    ("torch_add", RESULT, "your op does not launch vector_add_kernel"),
    ("short_grid", RESULT, "at n = 4097 the elements from index 4096 on are not a + b"),
    ("fp32_out", RESULT, "your op returns torch.float32"),
    ("fp32_out", OPCHECK, "differ in dtype"),
    ("unchecked", RESULT, "with a of 7 elements and b of 6 your op returns a result"),
    ("no_fake", OPCHECK, "vector_add has no fake implementation"),
    ("no_fake", FAKE, "vector_add has no fake implementation"),
    ("stub", RESULT, "not answered yet"), ("stub", OPCHECK, "not answered yet"), ("stub", FAKE, "not answered yet"),
    ("stub_fake", OPCHECK, "not answered yet"), ("stub_fake", FAKE, "not answered yet"),
], ids=lambda v: v)
def test_vector_add_op_feedback(capsys, name, check, expect):
    result = getattr(VectorAddOp(), check)(OPS[name])
    out = capsys.readouterr()
    assert expect in str(result) and result.passed == (expect == CORRECT), result
    assert out.out.splitlines() == [str(result)] and out.err == ""           # one line, nothing on stderr
    assert result.answered == (expect != "not answered yet")
    if not result.passed:
        assert not any(piece in result.reason for piece in ANSWER_LINES), result.reason


@pytest.mark.parametrize("answer, expect", [
    (good, "is a function, not a torch.library operator"),
    (torch.ops.a14_test.good, CORRECT),                    # the operator as torch.ops has it: as good
    (..., "not answered yet"),
], ids=["plain-function", "torch-ops", "ellipsis"])
def test_what_is_not_an_op_and_what_is(capsys, answer, expect):
    for check in (RESULT, OPCHECK, FAKE):
        result = getattr(VectorAddOp(), check)(answer)
        assert expect in str(result) and result.passed == (expect == CORRECT), result


def test_the_kernel_is_itself_again_after_a_check(capsys):
    """The checks watch vector_add_kernel's launches by shadowing its `run`, and put it back, even on a Fail."""
    for name in ("good", "fake_launches", "returns_a"):
        VectorAddOp().check_fake(OPS[name])
        assert "run" not in vars(vector_add_kernel)


def test_hidden_check_is_silent_and_raises_on_a_wrong_answer(capsys):
    with hidden():
        assert VectorAddOp().check_fake(OPS["good"])
        with pytest.raises(NotYet, match="not passed by the hidden test"):
            VectorAddOp().check_fake(OPS["fake_cpu"])
    assert capsys.readouterr().out == ""


def _answer_cell(tmp_path: Path, blank: bool):
    """The solution's answer cell (blanked as the exercise has it, or not) as a module, so that its functions have
    source (the stub is told by its `...`), under a namespace of its own."""
    nb = nbformat.read(ROOT / "solutions" / NOTEBOOK, as_version=4)
    cell = next(c for c in nb.cells if notebooks.is_solution_cell(c))
    source = strip_solutions(cell.source) if blank else cell.source
    name = f"answer_{'stub' if blank else 'solution'}"
    path = tmp_path / f"{name}.py"
    path.write_text("import torch\nimport triton\nfrom kernels.triton.vector_add import vector_add_kernel\n\n\n"
                    + source.replace('"a14::vector_add"', f'"a14_{name}::vector_add"') + "\n")
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return source, module.vector_add


def test_the_notebooks_answer_passes_and_its_stub_is_not_answered(tmp_path, capsys):
    source, stub_op = _answer_cell(tmp_path, blank=True)
    assert "# YOUR ANSWER" in source and not any(piece in source for piece in ("empty_like", "cdiv", "raise"))
    for check in (RESULT, OPCHECK, FAKE):
        result = getattr(VectorAddOp(), check)(stub_op)
        assert not result and not result.answered, result
    _, solution = _answer_cell(tmp_path, blank=False)
    assert all(getattr(VectorAddOp(), check)(solution) for check in (RESULT, OPCHECK, FAKE))


def test_nothing_the_checker_exports_is_a_passing_op(capsys):
    """The answer is not in the checker's module: no public function or attribute of it, or of the checker, passes
    any check, and no docstring spells the answer's lines."""
    reachable = {f"module.{n}": getattr(a14_vector_add_op, n) for n in dir(a14_vector_add_op) if not n.startswith("_")}
    checker = VectorAddOp()
    assert [a for a in dir(checker) if not a.startswith("_")] == sorted([RESULT, OPCHECK, FAKE])
    reachable.update({f"checker.{n}": getattr(checker, n) for n in (RESULT, OPCHECK, FAKE)})
    for name, value in reachable.items():
        if callable(value) or isinstance(value, torch.library.CustomOpDef):
            assert not any(getattr(checker, check)(value) for check in (RESULT, OPCHECK, FAKE)), name
    docs = [a14_vector_add_op.__doc__] + [getattr(v, "__doc__", None) for v in vars(a14_vector_add_op).values()
                                          if getattr(v, "__module__", None) == a14_vector_add_op.__name__]
    for doc in filter(None, docs):
        assert not any(piece in doc for piece in ("empty_like", "cdiv(")), doc


def test_grade_the_solution_with_a_fake_that_checks_nothing(tmp_path):
    """One run of the notebook through `grade`: the solution's answer with its fake's length check taken out scores
    4/6, the fake's check saying what it let through (the hidden tests decide; the visible line is the feedback).
    The solution's own 6/6 and the exercise's 0 are nbval's and `python -m ladder grade`'s."""
    solution = nbformat.read(ROOT / "solutions" / NOTEBOOK, as_version=4)
    nb = nbformat.read(ROOT / "exercises" / NOTEBOOK, as_version=4)
    right = next(c for c in solution.cells if notebooks.is_solution_cell(c))
    op, fake = right.source.split("@vector_add.register_fake")
    unchecked = "\n".join(line for line in fake.splitlines() if not line.lstrip().startswith(("if a.dim()", "raise")))
    assert unchecked != fake and "empty_like" in unchecked
    answer = next(c for c in nb.cells if notebooks.grade_id(c) == notebooks.grade_id(right))
    answer.source = op + "@vector_add.register_fake" + unchecked
    path = tmp_path / NOTEBOOK
    nbformat.write(nb, path)
    graded = notebooks.grade(path, timeout=300)
    scores = {t.grade_id: (t.score, t.feedback) for t in graded.tasks}
    assert (graded.score, graded.points) == (4, 6), graded.table()
    assert scores["check_fake"][0] == 0 and "b of 6 your fake returns a tensor" in scores["check_fake"][1]
    assert scores["check_result"][0] == scores["check_opcheck"][0] == 2 and not graded.flags
