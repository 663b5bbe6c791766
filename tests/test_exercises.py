"""The assignment: exercises are the solutions with answers blanked, and the checkers give feedback."""
import importlib.util
from pathlib import Path

import nbformat
import pytest
import torch

# ladder first: without a GPU it turns on Triton's interpreter, which must happen before Triton loads
from ladder.exercises import TileMasks, VectorAddIntensity, exercise_from_solution, strip_solutions
import triton
import triton.language as tl
from triton.runtime.jit import JITFunction

from kernels.triton import exercises as masks_kernels
from ladder import sass

ROOT = Path(__file__).resolve().parent.parent
SOLUTIONS = sorted((ROOT / "solutions").glob("*.ipynb"))


@pytest.mark.parametrize("solution", SOLUTIONS, ids=lambda p: p.name)
def test_exercise_is_the_solution_with_answers_blanked(solution):
    exercise = ROOT / "exercises" / solution.name
    assert exercise.exists(), f"run `python -m ladder make-exercises` to create {exercise.name}"
    want = [c.source for c in exercise_from_solution(nbformat.read(solution, as_version=4), exercise).cells]
    got = [c.source for c in nbformat.read(exercise, as_version=4).cells]
    assert got == want, "exercises/ is out of date: run `python -m ladder make-exercises`"
    assert any("# YOUR ANSWER" in s for s in got) and not any("BEGIN SOLUTION" in s for s in got)


def test_strip_keeps_the_names_to_fill_in():
    src = "x = 1\n### BEGIN SOLUTION\nflops = N  # one add\nflops = N * 1\nbytes_moved = 6 * N\n### END SOLUTION\nprint(x)\n"
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
    result = getattr(VectorAddIntensity(), method)(answer)
    assert expect in capsys.readouterr().out and expect in str(result)
    assert result.passed == (expect.startswith("correct"))


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


# ---------------------------------------------------------------- assignment 04: masks for ragged tiles

@triton.jit
def exact_masks(rows, cols, ks, M, N, K):
    return ((rows[:, None] < M) & (ks[None, :] < K), (ks[:, None] < K) & (cols[None, :] < N),
            (rows[:, None] < M) & (cols[None, :] < N))


@triton.jit
def no_k_masks(rows, cols, ks, M, N, K):
    return rows[:, None] < M, cols[None, :] < N, (rows[:, None] < M) & (cols[None, :] < N)


@triton.jit
def no_c_mask(rows, cols, ks, M, N, K):
    return ((rows[:, None] < M) & (ks[None, :] < K), (ks[:, None] < K) & (cols[None, :] < N),
            tl.full((16, 16), True, tl.int1))


@triton.jit
def off_by_one_masks(rows, cols, ks, M, N, K):
    return ((rows[:, None] <= M) & (ks[None, :] <= K), (ks[:, None] <= K) & (cols[None, :] <= N),
            (rows[:, None] <= M) & (cols[None, :] <= N))


@triton.jit
def no_a_row_mask(rows, cols, ks, M, N, K):  # C comes out right: only the masks show the reads past A
    return (ks[None, :] < K, (ks[:, None] < K) & (cols[None, :] < N),
            (rows[:, None] < M) & (cols[None, :] < N))


@pytest.mark.parametrize("answer, expect", [
    (None, ["tile masks: not answered yet"]),
    (exact_masks, ["tile masks: correct", "5 shapes"]),
    (no_k_masks, ["C differs from A·B", "a_mask lets ks >= K through", "last K step", "other=0.0"]),
    (no_c_mask, ["stored past the end of C", "c_mask lets rows >= M through"]),
    (off_by_one_masks, ["c_mask lets rows == M through", "not <="]),
    (no_a_row_mask, ["C is right, but a_mask lets rows >= M through", "past the end of A"]),
    (exact_masks.fn, ["@triton.jit"]),
], ids=["unanswered", "exact", "no-K-mask", "no-C-mask", "off-by-one", "no-A-row-mask", "not-jit"])
def test_tile_masks_feedback(capsys, answer, expect):
    result = TileMasks().check(answer)
    out = capsys.readouterr().out
    assert len(out.splitlines()) == 1 and all(e in out for e in expect), out
    assert result.passed == (answer is exact_masks) and out.strip() == str(result)


NOTEBOOK_04 = "04_matmul_triton_masks.ipynb"


@pytest.mark.parametrize("folder, expect", [("solutions", "tile masks: correct"),
                                            ("exercises", "tile masks: not answered yet")])
def test_the_notebooks_answer_cell(tmp_path, capsys, folder, expect):
    """The cell with tile_masks, run as a module: the exercise's stub is valid Python, keeps no mask of
    the solution's, and is reported unanswered."""
    nb = nbformat.read(ROOT / folder / NOTEBOOK_04, as_version=4)
    cell = next(c.source for c in nb.cells if "def tile_masks" in c.source)
    if folder == "exercises":
        assert "<" not in cell and "&" not in cell and cell.count("...  # YOUR ANSWER") == 3
    path = tmp_path / f"answer_{folder}.py"
    path.write_text("import triton\nimport triton.language as tl\n\n" + cell + "\n")
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    TileMasks().check(module.tile_masks)
    assert capsys.readouterr().out.startswith(expect)


def test_masked_matmul_takes_its_masks_as_a_constexpr_on_a_gpu_too():
    """Compiled for sm_80 (no GPU needed): the student's function inlines into the kernel, tl.dot on HMMA."""
    sig = {"a_ptr": "*fp16", "b_ptr": "*fp16", "c_ptr": "*fp16", "M": "i32", "N": "i32", "K": "i32",
           "masks": "constexpr", "BLOCK_M": "constexpr", "BLOCK_N": "constexpr", "BLOCK_K": "constexpr"}
    constexprs = dict(masks=JITFunction(exact_masks.fn), BLOCK_M=16, BLOCK_N=16, BLOCK_K=16)
    assert sass.triton_sass(masks_kernels.masked_matmul_kernel, sig, constexprs, "sm_80").count("HMMA") > 0
    probe_sig = {"a_out": "*i8", "b_out": "*i8", "c_out": "*i8", **{k: v for k, v in sig.items() if "ptr" not in k}}
    assert sass.triton_sass(masks_kernels.masks_kernel, probe_sig, constexprs, "sm_80").count("STG") > 0


def test_masked_matmul_names_bad_operands():
    a = torch.zeros(4, 5, dtype=torch.float16)
    with pytest.raises(ValueError, match="inner dimensions"):
        masks_kernels.masked_matmul(a, torch.zeros(4, 5, dtype=torch.float16), exact_masks)


# ---------------------------------------------------------------- assignment 05: the online softmax

import numpy as np  # noqa: E402

from ladder.exercises import OnlineSoftmax  # noqa: E402

NOTEBOOK_05 = "05_attention_online_softmax.ipynb"


def _answer_cells(folder: str, tmp_path) -> tuple:
    """The two answer cells of notebook 05, run as a module (Triton reads a @triton.jit function's source
    from its file): (online_softmax_update, online_update, the cells' sources)."""
    nb = nbformat.read(ROOT / folder / NOTEBOOK_05, as_version=4)
    cells = [c.source for c in nb.cells if c.cell_type == "code"
             and ("def online_softmax_update" in c.source or "def online_update" in c.source)]
    path = tmp_path / f"answers_05_{folder}.py"
    path.write_text("import numpy as np\nimport triton\nimport triton.language as tl\n\n" + "\n\n".join(cells) + "\n")
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.online_softmax_update, module.online_update, cells


def _update_np(m, l, acc, scores, values, rescale_l=True, rescale_acc=True, shift=True, guard=True):
    """The NumPy update, right by default; each flag off is one mistake."""
    m_new = np.maximum(m, scores.max(axis=1))
    m_sub = np.where(np.isneginf(m_new), 0.0, m_new) if guard else m_new
    alpha = np.exp(m - m_sub) if shift else np.ones_like(m)
    p = np.exp(scores - m_sub[:, None]) if shift else np.exp(scores)
    return (m_new, l * alpha + p.sum(axis=1) if rescale_l else l + p.sum(axis=1),
            acc * alpha[:, None] + p @ values if rescale_acc else acc + p @ values)


def np_no_acc_rescale(m, l, acc, scores, values):
    return _update_np(m, l, acc, scores, values, rescale_acc=False)


def np_no_l_rescale(m, l, acc, scores, values):
    return _update_np(m, l, acc, scores, values, rescale_l=False)


def np_no_rescale(m, l, acc, scores, values):
    return _update_np(m, l, acc, scores, values, rescale_l=False, rescale_acc=False)


def np_no_max(m, l, acc, scores, values):
    return _update_np(m, l, acc, scores, values, shift=False)


def np_no_guard(m, l, acc, scores, values):
    return _update_np(m, l, acc, scores, values, guard=False)


def np_normalized(m, l, acc, scores, values):
    m_new, l_new, acc_new = _update_np(m, l, acc, scores, values)
    alpha = np.exp(m - np.where(np.isneginf(m_new), 0.0, m_new))
    return m_new, l_new, (acc * (l * alpha)[:, None] + (acc_new - acc * alpha[:, None])) / np.maximum(l_new, 1e-300)[:, None]


def np_inverted_alpha(m, l, acc, scores, values):
    m_new = np.maximum(m, scores.max(axis=1))
    m_sub = np.where(np.isneginf(m_new), 0.0, m_new)
    alpha, p = np.exp(m_sub - m), np.exp(scores - m_sub[:, None])
    return m_new, l * alpha + p.sum(axis=1), acc * alpha[:, None] + p @ values


def np_block_max(m, l, acc, scores, values):  # m is the block's max, not the running max
    m_new = scores.max(axis=1)
    alpha, p = np.exp(m - m_new), np.exp(scores - m_new[:, None])
    return m_new, np.nan_to_num(l * alpha) + p.sum(axis=1), np.nan_to_num(acc * alpha[:, None]) + p @ values


def np_wrong_axis(m, l, acc, scores, values):
    return np.maximum(m, scores.max(axis=0)), l, acc


def np_sum_all(m, l, acc, scores, values):  # l sums over every key of every row
    m_new = np.maximum(m, scores.max(axis=1))
    m_sub = np.where(np.isneginf(m_new), 0.0, m_new)
    alpha, p = np.exp(m - m_sub), np.exp(scores - m_sub[:, None])
    return m_new, l * alpha + p.sum(), acc * alpha[:, None] + p @ values


def np_partial(m, l, acc, scores, values):
    m_new = np.maximum(m, scores.max(axis=1))
    p = np.exp(scores - m_new[:, None])
    l_new = l + p.sum(axis=1)
    acc_new = ...  # YOUR ANSWER
    return m_new, l_new, acc_new


def np_stub(m, l, acc, scores, values):
    m_new = ...  # YOUR ANSWER
    l_new = ...  # YOUR ANSWER
    acc_new = ...  # YOUR ANSWER
    return m_new, l_new, acc_new


@pytest.mark.parametrize("answer, expect", [
    (None, ["online softmax (NumPy): not answered yet"]),
    (np_stub, ["online softmax (NumPy): not answered yet"]),
    (_update_np, ["online softmax (NumPy): correct", "blocks of 1, 5, 8 keys"]),
    (np_no_acc_rescale, ["a max that grows", "forgot to rescale acc", "alpha = np.exp(m - m_new)"]),
    (np_no_l_rescale, ["a max that grows", "forgot to rescale l"]),
    (np_no_rescale, ["a max that grows", "right while the max stays", "rescale both"]),
    (np_no_max, ["large scores", "overflows to inf (past 709 in float64)", "subtract the running max"]),
    (np_no_guard, ["a first block whose keys are all masked", "-inf - (-inf) is NaN", "subtract 0 instead"]),
    (np_normalized, ["one block", "acc is already normalized", "once, at the end"]),
    (np_inverted_alpha, ["one block", "already after the first block", "0 · inf is NaN"]),
    (np_block_max, ["masked keys", "block whose keys are all masked", "running max"]),
    (np_sum_all, ["wrong already for one block", "l_new = l · alpha + the sum of p over the keys (axis=1)"]),
    (np_wrong_axis, ["your function fails at one block", "ValueError"]),
    (np_partial, ["not finished: acc_new is still `...`"]),
], ids=["None", "stub", "right", "no-acc-rescale", "no-l-rescale", "no-rescale", "no-max", "-inf--inf",
        "normalized", "inverted-alpha", "block-max", "sum-all", "wrong-axis", "partial"])
def test_online_softmax_numpy_feedback(capsys, answer, expect):
    result = OnlineSoftmax().check_numpy(answer)
    out = capsys.readouterr().out
    assert len(out.splitlines()) == 1 and all(e in out for e in expect), out
    assert result.passed == (answer is _update_np)


@triton.jit
def tl_update(m, l, acc, s, v):
    m_new = tl.maximum(m, tl.max(s, axis=1))
    m_sub = tl.where(m_new == float("-inf"), 0.0, m_new)
    alpha = tl.exp2(m - m_sub)
    p = tl.exp2(s - m_sub[:, None])
    return m_new, l * alpha + tl.sum(p, axis=1), acc * alpha[:, None] + tl.dot(p, v, input_precision="ieee")


@triton.jit
def tl_update_broadcast(m, l, acc, s, v):  # p @ v as a broadcast sum: right too
    m_new = tl.maximum(m, tl.max(s, axis=1))
    m_sub = tl.where(m_new == float("-inf"), 0.0, m_new)
    alpha = tl.exp2(m - m_sub)
    p = tl.exp2(s - m_sub[:, None])
    return m_new, l * alpha + tl.sum(p, axis=1), acc * alpha[:, None] + tl.sum(p[:, :, None] * v[None, :, :], axis=1)


@triton.jit
def tl_no_acc_rescale(m, l, acc, s, v):
    m_new = tl.maximum(m, tl.max(s, axis=1))
    m_sub = tl.where(m_new == float("-inf"), 0.0, m_new)
    alpha = tl.exp2(m - m_sub)
    p = tl.exp2(s - m_sub[:, None])
    return m_new, l * alpha + tl.sum(p, axis=1), acc + tl.dot(p, v, input_precision="ieee")


@triton.jit
def tl_no_l_rescale(m, l, acc, s, v):
    m_new = tl.maximum(m, tl.max(s, axis=1))
    m_sub = tl.where(m_new == float("-inf"), 0.0, m_new)
    alpha = tl.exp2(m - m_sub)
    p = tl.exp2(s - m_sub[:, None])
    return m_new, l + tl.sum(p, axis=1), acc * alpha[:, None] + tl.dot(p, v, input_precision="ieee")


@triton.jit
def tl_no_max(m, l, acc, s, v):
    p = tl.exp2(s)
    return tl.maximum(m, tl.max(s, axis=1)), l + tl.sum(p, axis=1), acc + tl.dot(p, v, input_precision="ieee")


@triton.jit
def tl_no_guard(m, l, acc, s, v):
    m_new = tl.maximum(m, tl.max(s, axis=1))
    alpha = tl.exp2(m - m_new)
    p = tl.exp2(s - m_new[:, None])
    return m_new, l * alpha + tl.sum(p, axis=1), acc * alpha[:, None] + tl.dot(p, v, input_precision="ieee")


@triton.jit
def tl_natural_exp(m, l, acc, s, v):
    m_new = tl.maximum(m, tl.max(s, axis=1))
    m_sub = tl.where(m_new == float("-inf"), 0.0, m_new)
    alpha = tl.exp(m - m_sub)
    p = tl.exp(s - m_sub[:, None])
    return m_new, l * alpha + tl.sum(p, axis=1), acc * alpha[:, None] + tl.dot(p, v, input_precision="ieee")


@triton.jit
def tl_stub(m, l, acc, s, v):
    m_new = ...  # YOUR ANSWER
    l_new = ...  # YOUR ANSWER
    acc_new = ...  # YOUR ANSWER
    return m_new, l_new, acc_new


@pytest.mark.parametrize("answer, expect", [
    (None, ["online softmax (Triton): not answered yet"]),
    (tl_stub, ["online softmax (Triton): not answered yet"]),
    (tl_update, ["online softmax (Triton): correct", "4 shapes", "sliding window"]),
    (tl_update_broadcast, ["online softmax (Triton): correct"]),
    (tl_no_acc_rescale, ["a max that grows", "forgot to rescale acc", "tl.exp2(m - m_new)"]),
    (tl_no_l_rescale, ["a max that grows", "forgot to rescale l"]),
    (tl_no_max, ["large scores", "overflows to inf (past 128 in fp32)"]),
    (tl_no_guard, ["a first block whose keys are all masked", "-inf - (-inf) is NaN"]),
    (tl_natural_exp, ["base 2", "use tl.exp2, not tl.exp"]),
    (tl_update.fn, ["@triton.jit"]),
], ids=["None", "stub", "right", "broadcast-sum", "no-acc-rescale", "no-l-rescale", "no-max", "-inf--inf",
        "natural-exp", "not-jit"])
def test_online_softmax_triton_feedback(capsys, answer, expect):
    OnlineSoftmax().check_triton(answer)
    out = capsys.readouterr().out
    assert len(out.splitlines()) == 1 and all(e in out for e in expect), out


@pytest.mark.parametrize("folder, expect", [("solutions", "correct"), ("exercises", "not answered yet")])
def test_the_online_softmax_answer_cells(tmp_path, capsys, folder, expect):
    """Both answer cells of notebook 05, run as a module: the solution's pass both checks; the exercise's
    stubs are valid Python, keep nothing of the solution, and are reported unanswered."""
    numpy_fn, triton_fn, cells = _answer_cells(folder, tmp_path)
    if folder == "exercises":
        for cell in cells:
            body = [line for line in cell.splitlines()[1:] if not line.lstrip().startswith(("def ", "return "))]
            assert body and all(line.endswith("= ...  # YOUR ANSWER") for line in body), cell
            assert not any(word in "\n".join(body) for word in ("exp", "max", "sum", "@", "dot", "where", "np.", "tl."))
    check = OnlineSoftmax()
    check.check_numpy(numpy_fn)
    check.check_triton(triton_fn)
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 2, out
    assert out[0].startswith(f"online softmax (NumPy): {expect}") and out[1].startswith(f"online softmax (Triton): {expect}")


def test_a_blank_that_is_never_used_is_no_matter(tmp_path, capsys):
    """A stub's `name = ...` left in place but unused: the answer is judged, not reported unfinished."""
    path = tmp_path / "unused_blank.py"
    path.write_text("import numpy as np\n\n\ndef update(m, l, acc, scores, values):\n"
                    "    m_new = np.maximum(m, scores.max(axis=1))\n"
                    "    m_safe = ...  # YOUR ANSWER\n"
                    "    shift = np.where(np.isneginf(m_new), 0.0, m_new)\n"
                    "    alpha, p = np.exp(m - shift), np.exp(scores - shift[:, None])\n"
                    "    return m_new, l * alpha + p.sum(axis=1), acc * alpha[:, None] + p @ values\n")
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    OnlineSoftmax().check_numpy(module.update)
    assert capsys.readouterr().out.startswith("online softmax (NumPy): correct")


def test_online_attention_matches_flash_kernel_and_the_reference():
    """The given kernel with a right update is the fused attention of kernels/triton/attention.py."""
    from kernels.attention import reference
    from kernels.triton import attention
    from ladder.check import compare
    gen = torch.Generator().manual_seed(7)
    q, k, v = (torch.randn(1, 2, 33, 64, generator=gen).half() for _ in range(3))
    for causal in (False, True):
        ours = masks_kernels.online_attention(q, k, v, tl_update, causal=causal)
        assert compare(ours, reference(q, k, v, causal)).ok
        assert compare(ours, attention.fused(q, k, v, causal)).ok
    with pytest.raises(ValueError, match="power of two"):
        masks_kernels.online_attention(q[..., :24].contiguous(), k[..., :24].contiguous(), v[..., :24].contiguous(),
                                       tl_update)
    with pytest.raises(ValueError, match="window"):
        masks_kernels.online_attention(q, k, v, tl_update, causal=True, window=0)


def test_online_attention_takes_its_update_as_a_constexpr_on_a_gpu_too():
    """Compiled for sm_80 (no GPU needed): the student's update inlines into the kernel, exp2 on MUFU.EX2."""
    sig = {"q_ptr": "*fp16", "k_ptr": "*fp16", "v_ptr": "*fp16", "o_ptr": "*fp16", "S": "i32", "qk_scale": "fp32",
           "WINDOW": "i32", "update": "constexpr", "HEAD_DIM": "constexpr", "BLOCK_M": "constexpr",
           "BLOCK_N": "constexpr", "CAUSAL": "constexpr"}
    constexprs = dict(update=JITFunction(tl_update.fn), HEAD_DIM=64, BLOCK_M=64, BLOCK_N=32, CAUSAL=True)
    assert sass.triton_sass(masks_kernels.online_attention_kernel, sig, constexprs, "sm_80").count("MUFU.EX2") > 0
    probe_sig = {"m_ptr": "*fp32", "l_ptr": "*fp32", "acc_ptr": "*fp32", "s_ptr": "*fp32", "v_ptr": "*fp32",
                 "update": "constexpr", "BLOCK_M": "constexpr", "BLOCK_N": "constexpr", "HEAD_DIM": "constexpr"}
    probe = dict(update=JITFunction(tl_update.fn), BLOCK_M=16, BLOCK_N=16, HEAD_DIM=16)
    assert sass.triton_sass(masks_kernels.online_update_probe_kernel, probe_sig, probe, "sm_80").count("STG") > 0
