"""Assignment 15, attention backward's D and dS: the right answers pass (NumPy and Triton), each typical wrong one
(no softmax scale, D from the unnormalized output, the causal mask on dS but not on P, no mask, no D, D along the
wrong axis, dS scaled, base 2) is named by the mistake it makes, feedback never holds the answer's lines or the
expected numbers, the exercise's stubs are "not answered yet", nothing the checker module exports passes, and the
notebook is graded by its hidden tests: the solution scores full marks, the untouched exercise 0."""
import importlib.util
from pathlib import Path

import ladder  # noqa: F401  (first: without a GPU it turns on Triton's interpreter, before Triton loads)
import nbformat
import numpy as np
import pytest
import triton
import triton.language as tl

from ladder.exercises import AttentionBackwardDs, NotYet, a15_attention_backward_ds, notebooks, strip_solutions
from ladder.exercises.grading import hidden

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOK = "15_attention_backward_ds.ipynb"
ANSWER_LINES = ("[:, None]", "axis=1", "tl.where(keep", "np.triu", "(do * O)", "o * do", "- lse")  # never in feedback
CORRECT = "correct"


# ---------------------------------------------------------------- NumPy answers

def _forward(q, k, v, scale, causal, mask_p=True):
    s = q @ k.T * scale
    above = np.triu(np.ones(s.shape, dtype=bool), 1) & causal
    if mask_p:
        s = np.where(above, -np.inf, s)
    e = np.exp(s - s.max(axis=1, keepdims=True))
    return e, e / e.sum(axis=1, keepdims=True), above


def np_good(q, k, v, do, scale, causal):
    _, P, _ = _forward(q, k, v, scale, causal)
    D = (do * (P @ v)).sum(axis=1)
    return D, P * (do @ v.T - D[:, None])


def np_d_from_dp(q, k, v, do, scale, causal):      # D = rowsum(P ∘ dP): the same number, the long way
    _, P, _ = _forward(q, k, v, scale, causal)
    dP = do @ v.T
    D = (P * dP).sum(axis=1)
    return D, P * (dP - D[:, None])


def np_no_scale(q, k, v, do, scale, causal):
    return np_good(q, k, v, do, 1.0, causal)


def np_sqrt_scale(q, k, v, do, scale, causal):     # 1/sqrt(d) where the scale given is another
    return np_good(q, k, v, do, 1 / np.sqrt(q.shape[1]), causal)


def np_unnormalized(q, k, v, do, scale, causal):   # D from exp(s - m)·V, before the division by ℓ
    e, P, _ = _forward(q, k, v, scale, causal)
    D = (do * (e @ v)).sum(axis=1)
    return D, P * (do @ v.T - D[:, None])


def np_mask_ds_not_p(q, k, v, do, scale, causal):
    _, P, above = _forward(q, k, v, scale, causal, mask_p=False)
    D = (do * (P @ v)).sum(axis=1)
    return D, np.where(above, 0.0, P * (do @ v.T - D[:, None]))


def np_no_mask(q, k, v, do, scale, causal):
    return np_good(q, k, v, do, scale, False)


def np_no_d(q, k, v, do, scale, causal):
    D, _ = np_good(q, k, v, do, scale, causal)
    _, P, _ = _forward(q, k, v, scale, causal)
    return D, P * (do @ v.T)


def np_columns(q, k, v, do, scale, causal):
    _, P, _ = _forward(q, k, v, scale, causal)
    D = (do * (P @ v)).sum(axis=1)
    return D, P * (do @ v.T - D[None, :])


def np_no_scale_unnormalized(q, k, v, do, scale, causal):   # two mistakes at once: both named
    return np_unnormalized(q, k, v, do, 1.0, causal)


def np_column_vector(q, k, v, do, scale, causal):
    D, dS = np_good(q, k, v, do, scale, causal)
    return D[:, None], dS


def np_nan(q, k, v, do, scale, causal):            # -inf probabilities where masked
    D, dS = np_good(q, k, v, do, scale, causal)
    return D, np.where(np.triu(np.ones(dS.shape, dtype=bool), 1) & causal, -np.inf, dS)


def np_off(q, k, v, do, scale, causal):            # right D, dS off in one place
    D, dS = np_good(q, k, v, do, scale, causal)
    dS = dS.copy()
    dS[-1, 0] += 1.0
    return D, dS


def np_one_thing(q, k, v, do, scale, causal):
    return np_good(q, k, v, do, scale, causal)[1]


def np_fails(q, k, v, do, scale, causal):
    return np_good(q, k.T, v, do, scale, causal)


def np_stub(q, k, v, do, scale, causal):
    D = ...  # YOUR ANSWER
    dS = ...  # YOUR ANSWER
    return D, dS


@pytest.mark.parametrize("fn, expect", [
    (np_good, CORRECT),
    (np_d_from_dp, CORRECT),
    (np_no_scale, "without the scale: the scores are scale·Q·Kᵀ (did you scale the scores?)"),
    (np_sqrt_scale, "use the `scale` argument"),
    (np_unnormalized, "D comes from the unnormalized output"),
    (np_mask_ds_not_p, "the causal mask is applied to dS but not to P"),
    (np_no_mask, "no causal mask"),
    (np_no_d, "dS is P ∘ dP"),
    (np_columns, "D is subtracted along the wrong axis"),
    (np_no_scale_unnormalized, "without the scale"),
    (np_column_vector, "D is one number per query, shape (S,)"),
    (np_nan, "NaN or inf in dS"),
    (np_off, "D is right, but dS is not P ∘ (dP − D) in 1 of"),
    (np_one_thing, "return two things: D and dS"),
    (np_fails, "your function fails at S = 6"),
    (np_stub, "not answered yet"),
], ids=lambda v: v if isinstance(v, str) else v.__name__)
def test_numpy_feedback(capsys, fn, expect):
    result = AttentionBackwardDs().check_numpy(fn)
    out = capsys.readouterr().out
    assert expect in str(result) and result.passed == (expect == CORRECT), result
    assert out.splitlines() == [str(result)]
    assert result.answered == (expect != "not answered yet")
    if not result.passed:
        assert not any(piece in result.reason for piece in ANSWER_LINES), result.reason
    if fn is np_no_scale_unnormalized:
        assert "unnormalized output" in result.reason


def test_numpy_feedback_never_holds_the_expected_numbers(capsys):
    """The right D and dS of the check's first head, and a few of their entries printed as the feedback could
    print them: none of it is in any wrong answer's feedback."""
    S, d, causal, scale = a15_attention_backward_ds.NUMPY_CASES[0]
    rng = np.random.default_rng(15)
    q, k, v, do = (rng.standard_normal((S, d)) * f for f in (2.0, 2.0, 1.0, 1.0))
    D, dS = np_good(q, k, v, do, scale, causal)
    numbers = [f"{x:{f}}" for x in (*D, *dS.ravel()[:8]) for f in (".4g", ".3g", ".3f", ".2f")]
    for fn in (np_no_scale, np_unnormalized, np_mask_ds_not_p, np_columns, np_off, np_no_d):
        said = str(AttentionBackwardDs().check_numpy(fn))
        assert not any(n in said for n in numbers if len(n) > 3), (fn.__name__, said)


# ---------------------------------------------------------------- Triton answers

@triton.jit
def delta_good(o, do):
    return tl.sum(o * do, axis=1)


@triton.jit
def delta_do_only(o, do):
    return tl.sum(do, axis=1)


@triton.jit
def delta_axis0(o, do):                # [HEAD_DIM] = [16]: broadcasts, silently wrong
    return tl.sum(o * do, axis=0)


@triton.jit
def pds_good(qk, lse, dp, D, keep, scale):
    p = tl.where(keep, tl.exp(qk * scale - lse[:, None]), 0.0)
    return p, p * (dp - D[:, None])


@triton.jit
def pds_mask_scores(qk, lse, dp, D, keep, scale):     # -inf scores where masked: e^-inf = 0, as right
    s = tl.where(keep, qk * scale, float("-inf"))
    p = tl.exp(s - lse[:, None])
    return p, p * (dp - D[:, None])


@triton.jit
def pds_no_scale(qk, lse, dp, D, keep, scale):
    p = tl.where(keep, tl.exp(qk - lse[:, None]), 0.0)
    return p, p * (dp - D[:, None])


@triton.jit
def pds_mask_ds_not_p(qk, lse, dp, D, keep, scale):
    p = tl.exp(qk * scale - lse[:, None])
    return p, tl.where(keep, p * (dp - D[:, None]), 0.0)


@triton.jit
def pds_no_mask(qk, lse, dp, D, keep, scale):
    p = tl.exp(qk * scale - lse[:, None])
    return p, p * (dp - D[:, None])


@triton.jit
def pds_no_d(qk, lse, dp, D, keep, scale):
    p = tl.where(keep, tl.exp(qk * scale - lse[:, None]), 0.0)
    return p, p * dp


@triton.jit
def pds_columns(qk, lse, dp, D, keep, scale):
    p = tl.where(keep, tl.exp(qk * scale - lse[:, None]), 0.0)
    return p, p * (dp - D[None, :])


@triton.jit
def pds_scaled_ds(qk, lse, dp, D, keep, scale):       # the scale again in dS: the kernel applies it
    p = tl.where(keep, tl.exp(qk * scale - lse[:, None]), 0.0)
    return p, p * (dp - D[:, None]) * scale


@triton.jit
def pds_exp2(qk, lse, dp, D, keep, scale):
    p = tl.where(keep, tl.exp2(qk * scale - lse[:, None]), 0.0)
    return p, p * (dp - D[:, None])


@triton.jit
def pds_one_tile(qk, lse, dp, D, keep, scale):        # returns one tile, not two
    return tl.where(keep, tl.exp(qk * scale - lse[:, None]), 0.0)


@triton.jit
def pds_stub(qk, lse, dp, D, keep, scale):
    p = ...  # YOUR ANSWER
    ds = ...  # YOUR ANSWER
    return p, ds


@triton.jit
def delta_stub(o, do):
    d = ...  # YOUR ANSWER
    return d


@pytest.mark.parametrize("delta, pds, expect", [
    (delta_good, pds_good, CORRECT),
    (delta_good, pds_mask_scores, CORRECT),
    (delta_good, pds_no_scale, "without the scale: the scores are scale·Q·Kᵀ (did you scale the scores?)"),
    (delta_good, pds_mask_ds_not_p, "the causal mask is applied to dS but not to P: p must be 0"),
    (delta_good, pds_no_mask, "no mask: p is 0 wherever keep is False"),
    (delta_good, pds_no_d, "dS is P ∘ dP"),
    (delta_good, pds_columns, "D is subtracted along the wrong axis"),
    (delta_good, pds_scaled_ds, "dS is off by a factor ≈ the softmax scale"),
    (delta_good, pds_exp2, "P uses base 2"),
    (delta_good, pds_one_tile, "return two tiles shaped like qk"),
    (delta_do_only, pds_good, "D is the row sum of dO alone"),
    (delta_axis0, pds_good, "D from your delta is not rowsum(dO ∘ O)"),
    (delta_good, pds_stub, "not answered yet"),
    (delta_stub, pds_good, "not answered yet"),
    (delta_good, pds_good.fn, "decorate p_and_ds with @triton.jit"),
], ids=lambda v: v if isinstance(v, str) else getattr(getattr(v, "fn", v), "__name__", "?"))
def test_triton_feedback(capsys, delta, pds, expect):
    result = AttentionBackwardDs().check_triton(delta, pds)
    out = capsys.readouterr().out
    assert expect in str(result) and result.passed == (expect == CORRECT), result
    assert out.splitlines()[-1] == str(result)
    assert result.answered == (expect != "not answered yet")
    if not result.passed:
        assert not any(piece in result.reason for piece in ANSWER_LINES), result.reason


def test_the_kernels_take_the_students_functions_on_a_gpu_too():
    """Compiled for sm_80 (no GPU needed): p_and_ds inlines into the dK/dV kernel (its exp on the SFU: MUFU) and
    delta into the preprocess; under the interpreter the checks above ran them."""
    from triton.runtime.jit import JITFunction
    from kernels.triton import exercises as kernels
    from ladder import sass
    sig = {name: "*fp32" for name in ("q_ptr", "k_ptr", "v_ptr", "do_ptr", "lse_ptr", "delta_ptr", "dk_ptr", "dv_ptr")}
    sig.update(S="i32", scale="fp32", p_and_ds="constexpr", HEAD_DIM="constexpr", BLOCK_M="constexpr",
               BLOCK_N="constexpr", CAUSAL="constexpr")
    constexprs = dict(p_and_ds=JITFunction(pds_good.fn), HEAD_DIM=16, BLOCK_M=16, BLOCK_N=16, CAUSAL=True)
    assert sass.triton_sass(kernels.ds_dkdv_kernel, sig, constexprs, "sm_80").count("MUFU") > 0
    sig = {"o_ptr": "*fp32", "do_ptr": "*fp32", "delta_ptr": "*fp32", "S": "i32", "delta": "constexpr",
           "HEAD_DIM": "constexpr", "BLOCK_M": "constexpr"}
    constexprs = dict(delta=JITFunction(delta_good.fn), HEAD_DIM=16, BLOCK_M=16)
    assert sass.triton_sass(kernels.ds_delta_kernel, sig, constexprs, "sm_80").count("STG") > 0


def test_hidden_check_is_silent_and_raises_on_a_wrong_answer(capsys):
    with hidden():
        assert AttentionBackwardDs().check_numpy(np_good)
        with pytest.raises(NotYet, match="not passed by the hidden test"):
            AttentionBackwardDs().check_numpy(np_mask_ds_not_p)
        with pytest.raises(NotYet, match="not passed by the hidden test"):
            AttentionBackwardDs().check_triton(delta_good, pds_no_scale)
    assert capsys.readouterr().out == ""


# ---------------------------------------------------------------- the notebook

def _answer_cells(tmp_path: Path, blank: bool):
    """The solution's three answer cells (blanked as the exercise has them, or not) as one module: Triton reads a
    @triton.jit function's source."""
    nb = nbformat.read(ROOT / "solutions" / NOTEBOOK, as_version=4)
    cells = [c.source for c in nb.cells if notebooks.is_solution_cell(c)]
    sources = [strip_solutions(s) if blank else s for s in cells]
    path = tmp_path / f"answer15_{'stub' if blank else 'solution'}.py"
    header = "import numpy as np\nimport triton\nimport triton.language as tl\n\n\n"
    path.write_text(header + "\n\n\n".join(sources) + "\n")
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return "\n".join(sources), module


def test_the_notebooks_answers_pass_and_their_stubs_are_not_answered(tmp_path, capsys):
    source, stub = _answer_cells(tmp_path, blank=True)
    assert source.count("# YOUR ANSWER") >= 4 and not any(piece in source for piece in ANSWER_LINES), source
    for result in (AttentionBackwardDs().check_numpy(stub.delta_and_ds),
                   AttentionBackwardDs().check_triton(stub.delta, stub.p_and_ds)):
        assert not result and not result.answered, result
    _, solution = _answer_cells(tmp_path, blank=False)
    assert AttentionBackwardDs().check_numpy(solution.delta_and_ds)
    assert AttentionBackwardDs().check_triton(solution.delta, solution.p_and_ds)


def test_nothing_the_checker_exports_passes(capsys):
    """The answer is not in the checker's module: no public function of it, of the checker, or of the kernels'
    module passes either check, and no docstring spells the answer's lines."""
    from kernels.triton import exercises as kernels
    checker = AttentionBackwardDs()
    assert [a for a in dir(checker) if not a.startswith("_")] == ["check_numpy", "check_triton"]
    reachable = {f"module.{n}": getattr(a15_attention_backward_ds, n) for n in dir(a15_attention_backward_ds)
                 if not n.startswith("_")}
    reachable.update({f"kernels.{n}": getattr(kernels, n) for n in dir(kernels) if n.startswith(("ds_", "p_and"))})
    for name, value in reachable.items():
        if callable(value):
            assert not checker.check_numpy(value), name
            if hasattr(value, "fn"):
                assert not checker.check_triton(value, value), name
                assert not checker.check_triton(delta_good, value), name
    docs = [a15_attention_backward_ds.__doc__] + [getattr(v, "__doc__", None) for v in
                                                  vars(a15_attention_backward_ds).values()]
    for doc in filter(None, docs):
        assert not any(piece in doc for piece in ("[:, None]", "tl.where(keep", "axis=1")), doc


def test_grade_the_solution_and_the_untouched_exercise(tmp_path):
    """One run each through `grade`: the solution scores 4/4, the exercise as written 0/4, every task 'not
    answered yet' (nothing crashes)."""
    for folder in ("solutions", "exercises"):
        path = tmp_path / folder / NOTEBOOK
        path.parent.mkdir()
        path.write_bytes((ROOT / folder / NOTEBOOK).read_bytes())
        graded = notebooks.grade(path, timeout=300)
        assert graded.points == 4 and not graded.flags, graded.table()
        if folder == "solutions":
            assert graded.score == 4, graded.table()
        else:
            assert graded.score == 0 and all(t.feedback.endswith("not answered yet") for t in graded.tasks), \
                graded.table()


def test_a_triton_kernel_handed_to_the_numpy_task_is_named_and_not_called():
    """Called from Python, a @triton.jit function runs in Triton's interpreter, which (3.6) patches
    triton.language for the rest of the process: every later compile of a kernel then fails."""
    import triton.language as tl
    result = AttentionBackwardDs().check_numpy(delta_good)
    assert not result and "@triton.jit function" in str(result)
    assert "__bool__" not in vars(tl.core.tensor) or "interpreter" not in tl.core.tensor.__bool__.__code__.co_filename
