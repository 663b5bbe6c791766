"""Checkers that grade: each returns a Result and prints its line; typical wrong answers are "not yet";
while grading, a Result that did not pass is raised; nbgrader's metadata; `python -m ladder grade`."""
import copy
import math
from pathlib import Path

import nbformat
import pytest

from ladder.exercises import NotYet, TileIntensity, check_mapping, grading
from ladder.exercises import a02_coalescing, notebooks
from ladder.exercises.grading import GRADING_ENV, verdict

ROOT = Path(__file__).resolve().parent.parent
SOLUTIONS = sorted((ROOT / "solutions").glob("*.ipynb"))
ROW, COL = "blockIdx.y * blockDim.y + threadIdx.y", "blockIdx.x * blockDim.x + threadIdx.x"


# ---------------------------------------------------------------- the Result, and grading mode

def test_a_result_is_printed_and_raised_only_while_grading(capsys, monkeypatch):
    monkeypatch.delenv(GRADING_ENV, raising=False)
    monkeypatch.delenv("NBGRADER_EXECUTION", raising=False)
    assert not grading()
    result = verdict("(1) task", False, "not quite: why")
    assert not result and result.reason == "not quite: why" and capsys.readouterr().out == "(1) task: not quite: why\n"
    for env in (GRADING_ENV, "NBGRADER_EXECUTION"):
        with monkeypatch.context() as m:
            m.setenv(env, "autograde")
            assert verdict("(1) task", True, "correct")
            with pytest.raises(NotYet, match="not quite: why"):
                verdict("(1) task", False, "not quite: why")


# ---------------------------------------------------------------- assignment 02: the whole grid

@pytest.mark.parametrize("row, col, expect", [
    ("0", "threadIdx.x", "computed by 288 threads"),                       # every block computes row 0
    ("threadIdx.y", "threadIdx.x", "computed by 9 threads"),                # every block computes block 0's elements
    (ROW, "blockIdx.x + threadIdx.x", "computed by 2 threads"),            # blocks overlap by 31 columns
    (COL, ROW, "not yet coalesced"),                                       # rung 1: a warp spans 32 rows
    (ROW, COL + " - 1", "negative index"),
    ("(" + ROW + ") / 2", COL, "computed by 2 threads"),                   # C's integer division
    (ROW + " +", COL, "cannot evaluate"),
    (ROW, "blockIdx.x * blockDim.x + threadIdx.x % 16", "computed by 2 threads"),
], ids=["row-0", "block-0-everywhere", "overlapping-blocks", "naive", "negative", "halved-rows", "syntax", "mod-16"])
def test_mapping_rejects(capsys, row, col, expect):
    result = check_mapping(row, col, run_on_gpu=False)
    out = capsys.readouterr().out
    assert not result and expect in result.reason and out.splitlines()[-1] == str(result), out


def test_mapping_passes_the_solution_and_a_transposed_grid(capsys):
    assert check_mapping(ROW, COL, run_on_gpu=False)
    assert check_mapping("blockIdx.x * blockDim.y + threadIdx.y", "blockIdx.y * blockDim.x + threadIdx.x", run_on_gpu=False)
    assert not check_mapping(..., COL) and "not answered yet" in capsys.readouterr().out


def test_mapping_is_correct_only_if_the_gpu_agrees(capsys, monkeypatch):
    """Where a GPU exists, its comparison gates the verdict (the GPU here is a fake)."""
    monkeypatch.setattr(a02_coalescing, "gpu_here", lambda: True)
    monkeypatch.setattr(a02_coalescing, "gpu_run", lambda defines: (False, "at 1000x37x1000: wrong: rel. error 1.0"))
    result = check_mapping(ROW, COL)
    assert not result and "on the GPU C is wrong: at 1000x37x1000" in result.reason
    ran = []
    monkeypatch.setattr(a02_coalescing, "gpu_run", lambda defines: (ran.append(defines), (True, "ok"))[1])
    assert check_mapping(ROW, COL) and ran == [{"ROW": f"({ROW})", "COL": f"({COL})"}]


# ---------------------------------------------------------------- assignment 03: tiles that fit

@pytest.mark.parametrize("fn, expect", [
    (lambda bm, bn, bk: bm * bn * bk / (bm * bk + bk * bn) / 2, "a multiply-add is 2 FLOPs"),
    (lambda bm, bn, bk: 2 * bm * bn * bk / (bm * bk + bk * bn), "2 bytes"),
    (lambda bm, bn, bk: 2 * bm * bn * bk / (2 * (bm + bn)), "BK cancels"),
    (lambda bm, bn, bk: 2 * bm * bn * bk / (2 * (bm * bk + bk * bn + bm * bn)), "C stays in registers"),
    (lambda bm, bn: bm * bn / (bm + bn), "your function fails"),
], ids=["fma-1-flop", "elements", "bk-in-bytes", "counts-C", "two-arguments"])
def test_tile_intensity_rejects(capsys, fn, expect):
    result = TileIntensity().check_intensity(fn)
    assert not result and expect in result.reason


@pytest.mark.parametrize("tile, expect", [
    ((1024, 1024, 16), "4096 KiB of fp32 accumulators"),   # the old solution: 4 MiB of sums
    ((256, 256, 32), "256 KiB of fp32 accumulators"),      # the whole register file
    ((128, 256, 256), "384 KiB of shared memory"),         # fits the registers, not the shared memory
    ((128, 128, 64), "well short of the best that fits"),           # fits, but squarer and larger does better
    ((64, 512, 32), "well short of the best that fits"),            # as many sums, but a thin tile
    ((100, 200, 32), "multiples of 16"),
], ids=["old-solution", "whole-register-file", "shared-memory", "too-small", "too-thin", "not-16"])
def test_tile_choice_rejects(capsys, tile, expect):
    result = TileIntensity().check_choice(*tile, smem_bytes=227 * 1024)
    assert not result and expect in result.reason, result


@pytest.mark.parametrize("tile", [(128, 256, 64), (256, 128, 32), (176, 176, 64)])
def test_tile_choice_passes(capsys, tile):
    assert TileIntensity().check_choice(*tile, smem_bytes=227 * 1024)


@pytest.mark.parametrize("fn, expect", [
    (lambda M, N, K, bm, bn: 24e9, "recount"),
    (lambda M, N, K, bm, bn: 2 * (M * K + K * N), "fewest bytes"),
    (lambda M, N, K, bm, bn: 2 * M * K * N / bn, "A's loads alone"),
    (lambda M, N, K, bm, bn: M * K * N / bn + K * N * M / bm, "2 bytes"),
    (lambda M, N, K, bm, bn: 2 * (M * K * (N // 256) + K * N * (M // 128)), "in 64x256 tiles"),   # one tile's count
    (lambda M, N: 0, "your function fails"),
    (..., "not answered yet")], ids=["constant", "once", "a-only", "elements", "one-tile", "args", "blank"])
def test_tile_load_bytes(capsys, fn, expect):
    result = TileIntensity().check_load_bytes(fn)
    assert not result and expect in result.reason, result
    assert TileIntensity().check_load_bytes(lambda M, N, K, bm, bn: 2 * (M * K * (N / bn) + K * N * (M / bm)))


# ---------------------------------------------------------------- nbgrader's conventions

@pytest.mark.parametrize("solution", SOLUTIONS, ids=lambda p: p.name)
def test_solutions_are_nbgrader_source_notebooks(solution):
    nb = nbformat.read(solution, as_version=4)
    assert notebooks.problems(nb) == []
    for cell in nb.cells:
        meta = cell.metadata.get("nbgrader")
        if notebooks.BEGIN in cell.source:
            assert meta["solution"] and not meta["grade"] and not meta["locked"]
            assert cell.source.count(notebooks.BEGIN) == cell.source.count(notebooks.END)
        if meta and meta["grade"]:
            assert meta["locked"] and not meta["solution"] and meta["points"] > 0 and "check" in cell.source
    exercise = nbformat.read(ROOT / "exercises" / solution.name, as_version=4)
    unmarked = [{k: v for k, v in c.metadata.get("nbgrader", {}).items() if k != "checksum"} for c in exercise.cells]
    assert unmarked == [c.metadata.get("nbgrader", {}) for c in nb.cells]


def test_a_solution_region_outside_a_solution_cell_is_refused():
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("### BEGIN SOLUTION\nx = 1\n### END SOLUTION")])
    assert any("outside a solution cell" in p for p in notebooks.problems(nb))
    notebooks.mark_solution_cells(nb, "99_example")
    assert nb.cells[0].metadata["nbgrader"]["grade_id"] == "answer_x"
    assert notebooks.problems(nb) == ["no autograded test cell (metadata nbgrader.grade = true)"]


# ---------------------------------------------------------------- python -m ladder grade

NOTEBOOK_01 = "01_vector_add_intensity.ipynb"


def _answer(nb, name: str, value: str) -> None:
    cell = next(c for c in nb.cells if c.source.startswith(f"{name} = ...  # YOUR ANSWER"))
    cell.source = f"{name} = {value}"


def test_grade_scores_each_task(tmp_path):
    """Notebook 01 three ways: answered right (full marks), with two wrong answers, untouched (zero)."""
    exercise = nbformat.read(ROOT / "exercises" / NOTEBOOK_01, as_version=4)
    right, two_wrong = copy.deepcopy(exercise), copy.deepcopy(exercise)
    for nb in (right, two_wrong):
        for name, value in [("flops", "N"), ("bytes_moved", "3 * N * BYTES_PER_ELEMENT"),
                            ("intensity", "flops / bytes_moved"), ("bound", '"memory"'),
                            ("min_time_ms", "bytes_moved / (H100.hbm_TBps * 1e12) * 1e3"),
                            ("min_time_measured_ms", "bytes_moved / (copy_TBps * 1e12) * 1e3")]:
            _answer(nb, name, value)
    next(c for c in two_wrong.cells if c.source.startswith("min_time_measured_ms =")).source = \
        "min_time_measured_ms = bytes_moved / (copy_TBps * 1e12) * 1e6"
    next(c for c in two_wrong.cells if c.source.startswith("bound =")).source = 'bound = "compute"'
    graded = {}
    for name, nb in [("right", right), ("two_wrong", two_wrong), ("untouched", exercise)]:
        path = tmp_path / name / NOTEBOOK_01
        path.parent.mkdir()
        nbformat.write(nb, path)
        graded[name] = notebooks.grade(path, timeout=300)
    assert (graded["right"].score, graded["right"].points) == (6, 6), graded["right"].table()
    wrong = {t.grade_id: t for t in graded["two_wrong"].tasks if t.score == 0}
    assert graded["two_wrong"].score == 4 and set(wrong) == {"check_min_time_measured", "check_bound"}
    assert "microseconds" in wrong["check_min_time_measured"].feedback
    assert graded["untouched"].score == 0
    assert all(t.feedback.endswith("not answered yet") for t in graded["untouched"].tasks)
    assert "score                    0/6" in graded["untouched"].table()


def test_grade_runs_the_graded_cells_as_the_solution_has_them(tmp_path):
    """A student who edits a graded cell (or deletes one) gains nothing."""
    nb = nbformat.read(ROOT / "exercises" / NOTEBOOK_01, as_version=4)
    check = next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == "check_flops")
    check.source = "print('(1) FLOPs: correct')"
    nb.cells.remove(next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == "check_bytes"))
    path = tmp_path / NOTEBOOK_01
    nbformat.write(nb, path)
    tasks = {t.grade_id: t for t in notebooks.grade(path, timeout=300).tasks}
    assert tasks["check_flops"].score == 0 and tasks["check_flops"].feedback.endswith("not answered yet")
    assert tasks["check_bytes"].score == 0 and "missing" in tasks["check_bytes"].feedback


# ---------------------------------------------------------------- assignments 06-10: typical mistakes

from ladder.exercises import CausalSkip, GroupOrder, PipelineStages  # noqa: E402
from ladder.exercises import a07_group_order, a08_causal_skip  # noqa: E402


@pytest.mark.parametrize("answer, expect", [
    ((lambda t, s: t % s, lambda t, s: t + s - 1, lambda s: s - 2), "correct"),
    ((lambda t, s: (t + 1) % s, lambda t, s: t + s - 1, lambda s: s - 2), "correct"),   # another rotation of the ring
    ((lambda t, s: t % 2, lambda t, s: t + s - 1, lambda s: s - 2), "overwrites buffer 0, which holds tile 0"),
    ((lambda t, s: t % s, lambda t, s: t + s, lambda s: s - 2), "never fetched before the math reads it"),
    ((lambda t, s: t % s, lambda t, s: t + 1, lambda s: s - 2), "already fetched"),
    ((lambda t, s: t % s, lambda t, s: t + s - 1, lambda s: s - 1), "still be in flight"),
    ((lambda t, s: t % s, lambda t, s: t + s - 1, lambda s: 0), "waits for copies the math does not need yet"),
    ((..., lambda t, s: t + 1, lambda s: 0), "not answered yet"),
], ids=["right", "rotated", "two-buffers", "one-too-far", "one-ahead", "wait-one-too-few", "wait-all", "blank"])
def test_pipeline_stages(capsys, answer, expect):
    result = PipelineStages().check(*answer)
    assert expect in str(result) and result.passed == expect.startswith("correct"), result


def _no_short_group(t, m, n, g):
    first = (t // (g * n)) * g
    return first + (t % (g * n)) % g, (t % (g * n)) // g


def _across_first(t, m, n, g):
    first = (t // (g * n)) * g
    return first + (t % (g * n)) // n, (t % (g * n)) % n


@pytest.mark.parametrize("order, expect", [
    (a07_group_order._reference, "correct"),
    (lambda t, m, n, g: (t // n, t % n), "not (1, 0): within a group, walk down"),     # row-major whatever group_m
    (_no_short_group, "outside the grid: the last group has only"),
    (_across_first, "walk down the group's rows first"),
    (lambda t, m, n, g: (t % m, t // m), "not (0, 1)"),                                # column-major
    (lambda t, m, n: (0, 0), "your code fails"),
], ids=["right", "row-major", "no-short-group", "across-first", "column-major", "three-arguments"])
def test_group_order(capsys, order, expect):
    result = GroupOrder().check_order(order)
    assert expect in str(result) and result.passed == (expect == "correct"), result


@pytest.mark.parametrize("answer, expect", [
    (35651584 / 2, "2 bytes"), (a07_group_order._panel_bytes(4096, 4096, 4096, 128, 256, 1, 132), "row-major order"),
    (2 * 4096 * 16 * 128, "count B's column panels too")])
def test_group_panels(capsys, answer, expect):
    result = GroupOrder().check_panels(answer, 4096, 4096, 4096, 128, 256, 16, 132)
    assert not result and expect in result.reason
    assert GroupOrder().check_panels(35651584, 4096, 4096, 4096, 128, 256, 16, 132)


@pytest.mark.parametrize("ranges, expect", [
    (a08_causal_skip._reference, "correct"),
    (lambda s, b, S: (s + b, min(S, s + b)), "after query 0"),           # the diagonal block unmasked
    (lambda s, b, S: (s, s + b), "past S"),                              # ragged S not clipped
    (lambda s, b, S: (0, min(S, s + b)), "compares are wasted"),         # everything masked
    (lambda s, b, S: (s, S), "past the last query"),                     # no skipping
    (lambda s, b, S: (s, s), "skips key"),                               # the diagonal skipped
], ids=["right", "diagonal-unmasked", "past-S", "all-masked", "no-skip", "no-diagonal"])
def test_causal_ranges(capsys, ranges, expect):
    result = CausalSkip().check_ranges(ranges)
    assert expect in str(result) and result.passed == (expect == "correct"), result


@pytest.mark.parametrize("answer, expect", [(0.5, "a little more than half"), (1.0, "without skipping"),
                                            (0.75, "recount"), (1056 / 2048, "correct")])
def test_causal_fraction(capsys, answer, expect):
    assert expect in str(CausalSkip().check_fraction(answer, 4096, 128, 64))


# ---------------------------------------------------------------- assignments 11-12: register block, mma fragments

from ladder.exercises import MmaFragments, RegisterBlock  # noqa: E402
from ladder.exercises import a11_register_block, a12_mma_fragments  # noqa: E402


def _block(row0, col0, row_step=1, col_step=1):
    """A thread map from its corner's formulas (of tid, BM, BN, TM, TN), rows and columns `step` apart."""
    def thread_block(t, bm, bn, tm, tn):
        r, c = row0(t, bm, bn, tm, tn), col0(t, bm, bn, tm, tn)
        return [r + i * row_step(bm, tm) if callable(row_step) else r + i for i in range(tm)], \
               [c + j * col_step(bn, tn) if callable(col_step) else c + j for j in range(tn)]
    return thread_block


@pytest.mark.parametrize("thread_block, expect", [
    (a11_register_block._reference, "correct"),
    (_block(lambda t, bm, bn, tm, tn: t // (bn // tn) * tm, lambda t, bm, bn, tm, tn: t % (bn // tn) * tn), "correct"),
    (_block(lambda t, bm, bn, tm, tn: t % (bm // tm) * tm, lambda t, bm, bn, tm, tn: t // (bm // tm) * tn),
     "one-to-one map, but not the kernel's"),                                         # warps walk down a column
    (_block(lambda t, bm, bn, tm, tn: t // (bm // tm) * tm, lambda t, bm, bn, tm, tn: t % (bm // tm) * tn),
     "outside the 32x128 tile"),                                                      # BM/TM where BN/TN belongs
    (_block(lambda t, bm, bn, tm, tn: t // (bn // tn), lambda t, bm, bn, tm, tn: t % (bn // tn) * tn),
     "both hold element (1, 0)"),                                                     # row index not scaled by TM
    (_block(lambda t, bm, bn, tm, tn: t // (bn // tn), lambda t, bm, bn, tm, tn: t % (bn // tn),
            lambda bm, tm: bm // tm, lambda bn, tn: bn // tn), "rows and columns are contiguous"),  # strided map
    (lambda t, bm, bn, tm, tn: a11_register_block._reference(t, bm, bn, tm, tn)[::-1], "not the kernel's"),
    (lambda t, bm, bn, tm, tn: (a11_register_block._reference(t, bm, bn, tm, tn)[0][::-1],
                                a11_register_block._reference(t, bm, bn, tm, tn)[1]), "in another order"),
    (lambda t, bm, bn, tm, tn: a11_register_block._reference(t, bm, bn, tm, tn)[0], "return (rows, cols)"),
    (lambda t, bm, bn: ([0], [0]), "your code fails"),
], ids=["reference", "right", "column-major", "bm-for-bn", "unscaled-rows", "strided", "rows-cols-swapped",
        "reversed", "rows-only", "three-arguments"])
def test_register_block_map(capsys, thread_block, expect):
    result = RegisterBlock().check_map(thread_block)
    assert expect in str(result) and result.passed == (expect == "correct"), result


def test_register_block_is_the_kernels():
    """The checker's map is the .cu's: its #defines and its own `tm`, `tn` expressions."""
    assert a11_register_block.kernel_constants() == {"BM": 128, "BN": 128, "BK": 8, "TM": 8, "TN": 8}
    assert a11_register_block.kernel_expressions() == {"tm": "(tid / (BN / TN)) * TM", "tn": "(tid % (BN / TN)) * TN"}
    assert a11_register_block._reference(17, 128, 128, 8, 8) == (list(range(8, 16)), list(range(8, 16)))
    assert a11_register_block._warp_values(128, 128, 8, 8) == (16, 128)


@pytest.mark.parametrize("answer, expect", [
    (0.25, "correct"), (2.0, "that is rung 3"), (4.0, "FMAs per load"), (1 / 8, "count the TN values of B"),
    (1 / 16, "not LDS.128 instructions"), (0.3, "recount"), (..., "not answered yet")])
def test_register_block_loads_per_fma(capsys, answer, expect):
    result = RegisterBlock().check_loads_per_fma(answer, 8, 8)
    assert expect in str(result) and result.passed == (expect == "correct"), result


@pytest.mark.parametrize("answer, expect", [
    (144, "correct"), (512, "every thread's loads"), (256, "only 2 rows of threads"), (16, "one thread's"),
    (128, "count the A values too"), (100, "recount")])
def test_register_block_warp_values(capsys, answer, expect):
    result = RegisterBlock().check_warp_values(answer, 128, 128, 8, 8)
    assert expect in str(result) and result.passed == (expect == "correct"), result


_C, _A, _B = a12_mma_fragments._c_reference, a12_mma_fragments._a_reference, a12_mma_fragments._b_reference


@pytest.mark.parametrize("operand, element, expect", [
    ("c", _C, "correct"),
    ("c", lambda l, i: (l % 4 + 8 * (i // 2), 2 * (l // 4) + i % 2), "lane / 4 (groupID) and lane % 4"),
    ("c", lambda l, i: (l // 4, 2 * (l % 4) + i), "c2, c3 are 8 rows down"),
    ("c", lambda l, i: _C(l, i)[::-1], "row and column are swapped"),
    ("c", lambda l, i: (l // 4 + 8 * (i % 2), 2 * (l % 4) + i // 2), "not (8, 0)"),
    ("a", _A, "correct"),
    ("a", lambda l, i: (l // 4 + 8 * (i // 4), 2 * (l % 4) + i % 2 + 8 * ((i // 2) % 2)), "the registers' order"),
    ("a", lambda l, i: (l // 4 + 8 * (i // 2), 2 * (l % 4) + i % 2), "a4..a7 the same, 8 columns right"),
    ("a", lambda l, i: _A(l, i)[::-1], "row and column are swapped"),
    ("a", lambda l, i: (l % 4 + 8 * ((i // 2) % 2), 2 * (l // 4) + i % 2 + 8 * (i // 4)), "lane / 4 (groupID)"),
    ("b", _B, "correct"),
    ("b", _C, "that is C's layout"),
    ("b", lambda l, i: (2 * (l % 4) + i, l // 4), "b2, b3 are 8 rows (k) further down"),
    ("b", lambda l, i: _B(l, i)[::-1], "row and column are swapped"),
    ("b", lambda l, i: (2 * (l // 4) + i % 2 + 8 * (i // 2), l % 4), "lane / 4 (groupID)"),
    ("b", lambda l, i: 0, "return (row, col)"),
    ("c", lambda l, i: (..., ...), "not answered yet"),
], ids=["c-right", "c-group-swapped", "c-across", "c-transposed", "c-halves-swapped", "a-right", "a-register-order",
        "a-like-c", "a-transposed", "a-group-swapped", "b-right", "b-like-c", "b-next-rows", "b-transposed",
        "b-group-swapped", "b-not-a-pair", "c-blank"])
def test_mma_fragments(capsys, operand, element, expect):
    result = getattr(MmaFragments(), f"check_{operand}")(element)
    assert expect in str(result) and result.passed == (expect == "correct"), result


def test_mma_reference_is_what_rung_4_loads_and_stores():
    """The PTX layout in the checker agrees with tensor_core.cuh: its epilogue's (row, col) for c0..c3, and
    the A quarters its ldmatrix.x4 addresses deliver to registers 0-3."""
    import re
    from ladder.runtime import cuda
    row, col = a12_mma_fragments.epilogue_expressions()
    for lane in range(32):
        for half_ in range(2):
            at = [eval(e.replace("/", "//"), {"lane": lane, "half_": half_}) for e in (row, col)]  # noqa: S307
            assert _C(lane, 2 * half_) == tuple(at) and _C(lane, 2 * half_ + 1) == (at[0], at[1] + 1)
    m = re.search(r"ldmatrix_x4\(a\[mi\], As \+ \(mi \* 16 \+ ([^)]+)\) \* LDA \+ kk \+ ([^)]+)\);",
                  cuda.source("matmul/tensor_core.cuh"))
    a_row, a_col = m.groups()
    for lane in range(32):
        for q in range(4):            # ldmatrix.x4: matrix q's 8 row addresses come from lanes 8q .. 8q+7
            giver = 8 * q + lane // 4  # ... and lane `lane` gets row lane / 4, columns 2 (lane % 4), +1 of it
            r0, c0 = (eval(e.replace("/", "//"), {"lane": giver}) for e in (a_row, a_col))  # noqa: S307
            for j in range(2):
                assert _A(lane, 2 * q + j) == (r0, c0 + 2 * (lane % 4) + j)


@pytest.mark.parametrize("name, points", [("11_matmul_register_block.ipynb", 4), ("12_matmul_mma_fragments.ipynb", 3)])
def test_grade_new_assignments(tmp_path, name, points):
    """The solution scores full marks; the untouched exercise scores 0, every task 'not answered yet'."""
    for folder in ("solutions", "exercises"):
        path = tmp_path / folder / name
        path.parent.mkdir()
        path.write_bytes((ROOT / folder / name).read_bytes())
        graded = notebooks.grade(path, timeout=300)
        assert graded.points == points, graded.table()
        if folder == "solutions":
            assert graded.score == points, graded.table()
        else:
            assert graded.score == 0 and all(t.feedback.endswith("not answered yet") for t in graded.tasks), graded.table()


# ---------------------------------------------------------------- assignment 13: the capstone's decision table

from ladder.capstone import costs, decision  # noqa: E402
from ladder.exercises import CapstoneDecision  # noqa: E402
from ladder.exercises import a13_capstone_decision  # noqa: E402

CAPSTONE = CapstoneDecision()    # the attention output projection, from the recorded capstone run
_ANSWERS = CAPSTONE._answers()
_F, _S, _N = _ANSWERS.share, _ANSWERS.x_floor, CAPSTONE.per_forward


def test_capstone_decision_is_the_recordings_and_decision_pys():
    """Every expected answer comes from the recording, by decision.py's rules; the op has room above its floor but is
    hot by neither the checks' 5% nor the conditions' tenth (a "don't write it" case)."""
    from ladder import results
    row = results.load_having("capstone").capstone("gpt2-small")
    line = next(l for l in decision.headroom_table(row).splitlines() if l.startswith(a13_capstone_decision.OP))
    count, alone_us, floor_us, x_floor, pct = line.split()[-5:]
    assert int(count) == _N == 12 and float(alone_us) == round(1e3 * CAPSTONE.alone_ms, 1)
    assert float(floor_us) == round(1e3 * CAPSTONE.floor_ms, 1) and float(x_floor) == round(_S, 2)
    assert float(pct.rstrip("%")) == round(100 * _F, 1)
    assert _ANSWERS.amdahl == costs.amdahl(_F, _S) and _ANSWERS.room == (_S >= decision.ROOM)
    assert (_ANSWERS.hot_10, _ANSWERS.hot_5) == (_F >= decision.HOT_CONDITION, _F > decision.HOT_CHECK)
    assert _ANSWERS.room and not _ANSWERS.hot_10 and not _ANSWERS.hot_5 and not _ANSWERS.two_x
    assert not _ANSWERS.write_it
    with pytest.raises(ValueError, match="no op"):
        CapstoneDecision("softmax")


def test_capstone_decision_has_a_margin_no_timing_noise_flips():
    """Each measured row at least 15% from its threshold in every recording of the capstone, so neither re-recording
    nor another GPU's recording can make the assignment a coin toss (layer norm, by contrast, sits near the 5% bar)."""
    from ladder import results
    rows = [r for r in (results.load(p.stem).capstone("gpt2-small") for p in sorted(results.RESULTS_DIR.glob("*.json")))
            if r is not None]
    assert rows
    for row in rows:
        margins = CapstoneDecision(row=row).margins()
        assert min(margins.values()) >= a13_capstone_decision.MARGIN, (row["recorded"], margins)
    assert CapstoneDecision("layer norm").margins()["hot_5"] < a13_capstone_decision.MARGIN


def test_capstone_checker_keeps_no_answer():
    """The checker holds the givens (time alone, runs, floor, eager pass), never an answer."""
    numbers = [v for v in vars(CAPSTONE).values() if isinstance(v, (int, float)) and not isinstance(v, bool)]
    for answer in (_F, _S, _ANSWERS.amdahl, 100 * _F):
        assert not any(math.isclose(v, answer, rel_tol=1e-3) for v in numbers)
    assert not [n for n in dir(CAPSTONE) if not n.startswith("_") and n in _ANSWERS._fields]


@pytest.mark.parametrize("method, answer, expect", [
    ("check_share", _F, "correct"),
    ("check_share", _F / _N, "one run of the op"),                                        # one layer's, not all µs
    ("check_share", 100 * _F, "not a percent"),
    ("check_share", 1 / _F, "forward pass over the op's time"),
    ("check_share", ..., "not answered yet"),
    ("check_x_floor", _S, "correct"),
    ("check_x_floor", 1 / _S, "floor / time, inverted"),
    ("check_x_floor", _S - 1, "excess over the floor"),
    ("check_x_floor", _S * _N, "do not multiply one"),
    ("check_x_floor", None, "not answered yet"),
    ("check_amdahl", 1 / ((1 - _F) + _F / _S), "correct"),
    ("check_amdahl", _S, "to the whole run"),                                             # s applied to everything
    ("check_amdahl", 1 / ((1 - _S) + _S / _F), "f and s are swapped"),
    ("check_amdahl", 1 / ((1 - _F) + _F * _S), "not floor / time"),
    ("check_amdahl", 1 / (1 - _F), "infinitely fast"),
    ("check_amdahl", costs.amdahl(_F / _N, _S), "share of one run"),
    ("check_amdahl", 1.2, "recount"),
    ("check_room", True, "correct"),
    ("check_room", False, "time / floor >= 1.5"),
    ("check_hot_10", False, "correct"),
    ("check_hot_10", True, "share >= decision.HOT_CONDITION"),
    ("check_hot_5", False, "correct"),
    ("check_hot_5", "yes", "not the conditions' tenth"),
    ("check_hot_5", 1, "answer True or False"),
    ("check_two_x", False, "correct"),
    ("check_two_x", True, "applies only to its share"),                                   # the op's own speed-up
    ("check_verdict", False, "correct"),
    ("check_verdict", "no", "correct"),
    ("check_verdict", True, "write it only if every measured row"),
    ("check_verdict", ..., "not answered yet"),
], ids=lambda v: v if isinstance(v, str) else type(v).__name__)
def test_capstone_decision_feedback(capsys, method, answer, expect):
    result = getattr(CAPSTONE, method)(answer)
    out = capsys.readouterr().out
    assert expect in str(result) and out.strip() == str(result), out
    assert result.passed == (expect == "correct") and result.answered == (expect != "not answered yet")
    if not result.passed:  # a wrong answer's feedback does not print another task's answer
        for shown in (f"{_S:.2f}", f"{100 * _F:.1f}%", f"{100 * _F:.2f}%", f"{_ANSWERS.amdahl:.3f}", f"{_F:.4g}"):
            assert shown not in out.replace(repr(answer), ""), (shown, out)


def test_capstone_decision_names_the_5_percent_bar_taken_for_the_tenth():
    """For an op hot by the checks' 5% but not the conditions' tenth (the MLP up-projection), answering the tenth's
    row by the 5% bar is named as that slip."""
    up = CapstoneDecision("MLP up (d -> 4d)")
    assert up._answers().hot_5 and not up._answers().hot_10, up.margins()
    assert "> 5% is the six checks' bar" in str(up.check_hot_10(True))
    assert "> 5% is the six checks' bar" not in str(CAPSTONE.check_hot_10(True))   # the op is not over 5%


def test_capstone_decision_for_an_op_that_passes_every_row(capsys):
    """The same checker for another op: the vocabulary projection (far above its floor, most of the run) passes
    every measured row, so the verdict is True, and False is the slip."""
    vocab = CapstoneDecision("vocabulary projection")
    assert vocab._answers().write_it
    assert vocab.check_verdict(True) and vocab.check_two_x(True)
    assert "write it when every measured row" in str(vocab.check_verdict(False))


NOTEBOOK_13 = "13_capstone_decision.ipynb"


def test_grade_capstone_decision(tmp_path):
    """Solution: 8/8. Untouched exercise: 0, every task 'not answered yet'. The exercise answered with three
    typical slips (one layer's share, the floor ratio inverted, 'write it' for an op no row favours) and the rest
    right (from the given numbers, not from the slips): exactly those three tasks score 0, each with its hint."""
    exercise = nbformat.read(ROOT / "exercises" / NOTEBOOK_13, as_version=4)
    slips = copy.deepcopy(exercise)
    f, s = "(alone_ms * per_forward / eager_ms)", "(alone_ms / floor_ms)"
    for name, value in [("share", "alone_ms / eager_ms"), ("x_floor", "floor_ms / alone_ms"),
                        ("speedup", f"1 / ((1 - {f}) + {f} / {s})"), ("room", f"{s} >= decision.ROOM"),
                        ("hot_10", f"{f} >= decision.HOT_CONDITION"), ("hot_5", f"{f} > decision.HOT_CHECK"),
                        ("two_x", "speedup >= decision.END_TO_END"), ("write_it", "True")]:
        _answer(slips, name, value)
    graded = {}
    for name, nb in [("solution", nbformat.read(ROOT / "solutions" / NOTEBOOK_13, as_version=4)),
                     ("untouched", exercise), ("slips", slips)]:
        path = tmp_path / name / NOTEBOOK_13
        path.parent.mkdir()
        nbformat.write(nb, path)
        graded[name] = notebooks.grade(path, timeout=300)
    assert (graded["solution"].score, graded["solution"].points) == (8, 8), graded["solution"].table()
    assert graded["untouched"].score == 0, graded["untouched"].table()
    assert all(t.feedback.endswith("not answered yet") for t in graded["untouched"].tasks)
    wrong = {t.grade_id: t.feedback for t in graded["slips"].tasks if t.score == 0}
    assert graded["slips"].score == 5 and set(wrong) == {"check_share", "check_x_floor", "check_verdict"}, \
        graded["slips"].table()
    assert "one run of the op" in wrong["check_share"] and "inverted" in wrong["check_x_floor"]
    assert "write it only if every measured row" in wrong["check_verdict"]
