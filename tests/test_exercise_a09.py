"""Assignment 09, the linear layer's fused epilogue: the right answer passes, every typical wrong one is named by
the tile it leaves (without the answer line), the exercise's stub is "not answered yet", and nothing the checker
module exports passes for an answer."""
import importlib.util
from pathlib import Path

import pytest

import ladder  # noqa: F401  (first: without a GPU it turns on Triton's interpreter)
from ladder.exercises import BiasReluEpilogue, NotYet, a09_epilogue, strip_solutions
from ladder.exercises.grading import hidden

import epilogue_answers as epi  # a file: Triton reads a @triton.jit function's source

ROOT = Path(__file__).resolve().parent.parent
SOLUTION = ROOT / "solutions" / "09_matmul_bias_relu_epilogue.ipynb"
ANSWER_LINES = ("cols < N", "[None, :]", "tl.maximum(", "other=0")   # pieces of the answer: never in feedback


@pytest.mark.parametrize("fn, expect", [
    (epi.good, "correct"),
    (epi.good_where, "correct"),                       # a 2-D load, tl.where, no `other`: as right
    (epi.fp16_after, "correct"),                       # rounded once, after the sum: no worse than the store
    (epi.no_relu, "the ReLU is missing"),
    (epi.relu_first, "C is relu(x·Wᵀ) + b"),
    (epi.no_bias, "the bias never reached the tile"),
    (epi.subtracted, "the bias is subtracted"),
    (epi.by_row, "changes down the rows"),
    (epi.by_row_n, "changes down the rows"),
    (epi.column_vector, "must broadcast to its shape"),
    (epi.first_tile, "every tile of 16 columns got the bias of columns 0 to 15"),
    (epi.no_mask, "reads b past its end"),
    (epi.mask_m, "the load's mask stops at M"),
    (epi.floor_one, "the ReLU's floor is wrong"),
    (epi.relu6, "the ReLU has no ceiling"),
    (epi.inverted, "the ReLU is inverted"),
    (epi.fp16_early, "rounded to fp16 before the bias was added"),
    (epi.returns_nothing, "returns one tile shaped like acc"),
    (epi.stub, "not answered yet"),
    (epi.good.fn, "@triton.jit"),
], ids=lambda v: v if isinstance(v, str) else getattr(getattr(v, "fn", v), "__name__", "?"))
def test_epilogue_feedback(capsys, fn, expect):
    result = BiasReluEpilogue().check(fn)
    out = capsys.readouterr().out
    assert expect in str(result) and result.passed == (expect == "correct"), result
    assert out.splitlines()[-1] == str(result)
    if not result.passed:
        assert not any(piece in result.reason for piece in ANSWER_LINES), result.reason


def test_hidden_check_is_silent_and_raises_on_a_wrong_answer(capsys):
    with hidden():
        assert BiasReluEpilogue().check(epi.good)
        with pytest.raises(NotYet, match="not passed by the hidden test"):
            BiasReluEpilogue().check(epi.no_mask)
    assert capsys.readouterr().out == ""


def _answer_cell(tmp_path: Path, blank: bool):
    """The solution's answer cell (blanked as the exercise gets it, or not) as a module: Triton reads its source."""
    import nbformat
    nb = nbformat.read(SOLUTION, as_version=4)
    cell = next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == "answer_epilogue")
    source = strip_solutions(cell.source) if blank else cell.source
    path = tmp_path / f"answer_{'stub' if blank else 'solution'}.py"
    path.write_text("import triton\nimport triton.language as tl\n\n\n" + source + "\n")
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return source, module.epilogue


def test_the_notebooks_answer_passes_and_its_stub_is_not_answered(tmp_path, capsys):
    source, stub = _answer_cell(tmp_path, blank=True)
    assert "# YOUR ANSWER" in source and not any(piece in source for piece in ANSWER_LINES), source
    result = BiasReluEpilogue().check(stub)
    assert not result and not result.answered and "not answered yet" in str(result)
    _, solution = _answer_cell(tmp_path, blank=False)
    assert BiasReluEpilogue().check(solution)


def test_nothing_the_checker_exports_is_a_passing_epilogue(capsys):
    """The answer is not in the checker's module: no @triton.jit function there but the kernels (which do not pass
    as an epilogue), no public attribute of the checker, and no docstring spells it."""
    jitted = {name: obj for name, obj in vars(a09_epilogue).items() if hasattr(obj, "fn")}
    assert "bias_relu_matmul_kernel" in jitted and len(jitted) <= 2, sorted(jitted)
    for name, fn in jitted.items():
        assert not BiasReluEpilogue().check(fn), name
    checker = BiasReluEpilogue()
    assert [a for a in dir(checker) if not a.startswith("_")] == ["check"]
    own = [getattr(obj, "fn", obj) for obj in vars(a09_epilogue).values()]
    docs = [a09_epilogue.__doc__, BiasReluEpilogue.check.__doc__] + \
           [obj.__doc__ for obj in own if getattr(obj, "__module__", None) == a09_epilogue.__name__]
    for doc in filter(None, docs):
        assert not any(piece in doc for piece in ANSWER_LINES), doc
