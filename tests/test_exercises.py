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
    TileMasks().check(answer)
    out = capsys.readouterr().out
    assert len(out.splitlines()) == 1 and all(e in out for e in expect), out


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
