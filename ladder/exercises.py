"""Exercises: answer checkers with feedback, and exercise notebooks made from solutions.

One source of truth: each solutions/*.ipynb is complete; exercises/*.ipynb is the same notebook
with every block between `# BEGIN SOLUTION` and `# END SOLUTION` blanked: each assignment
`name = ...` in it stays as `name = ...  # YOUR ANSWER`, every other line goes
(`python -m ladder exercises` rewrites them; tests/test_exercises.py checks they agree).
A checker never raises on an unanswered `...`: it prints "not answered yet".
"""
from __future__ import annotations

import math
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
_BLOCK = re.compile(r"^([ \t]*)# BEGIN SOLUTION\n.*?^[ \t]*# END SOLUTION\n?", re.M | re.S)


_ASSIGN = re.compile(r"^([ \t]*)(\w+)\s*=(?!=)", re.M)


def strip_solutions(source: str) -> str:
    def blank(m: re.Match) -> str:
        names = dict.fromkeys((ind, name) for ind, name in _ASSIGN.findall(m.group(0)))
        return "".join(f"{ind}{name} = ...  # YOUR ANSWER\n" for ind, name in names)
    return _BLOCK.sub(blank, source)


_DEFINED = re.compile(r"^(?:[ \t]*def\s+(\w+)|(\w+)\s*=(?!=))", re.M)


def answer_names(source: str) -> set[str]:
    """The names a cell with a solution block gives the student to fill in: its functions and its top-level
    assignments (what later cells use)."""
    return {a or b for a, b in _DEFINED.findall(source)}


def solution_answers(nb) -> set[str]:
    return set().union(*(answer_names(c.source) for c in nb.cells
                         if c.cell_type == "code" and "# BEGIN SOLUTION" in c.source))


def uses_answers(cell, answers: set[str]) -> bool:
    """A code cell left as the student gets it whose output depends on their answers."""
    return (cell.cell_type == "code" and "# YOUR ANSWER" not in cell.source
            and bool(answers & set(re.findall(r"\w+", cell.source))))


def exercise_from_solution(nb, target: Path):
    """The exercise notebook to save at `target`: solution blocks blanked, and the outputs of those cells
    and of every cell that uses an answer cleared (`python -m ladder exercises` reruns the notebook
    unanswered to fill them); other outputs stay the solution's run. Its Colab badge opens the exercise."""
    import copy
    from ladder import colab
    ex = copy.deepcopy(nb)
    answers = solution_answers(nb)
    for cell in ex.cells:
        if cell.cell_type == "code" and "# BEGIN SOLUTION" in cell.source:
            cell.source = strip_solutions(cell.source)
            cell.outputs, cell.execution_count = [], None
        elif uses_answers(cell, answers):
            cell.outputs, cell.execution_count = [], None
    return colab.with_setup(ex, target)


def write_exercises(run_unanswered) -> list[Path]:
    """Write exercises/ from solutions/. `run_unanswered(nb, path)` executes a notebook in place: the outputs
    of cells that use an answer come from it, so they show what a student sees before answering."""
    import copy
    import nbformat
    written = []
    for sol in sorted((ROOT / "solutions").glob("*.ipynb")):
        target = ROOT / "exercises" / sol.name
        solution = nbformat.read(sol, as_version=4)
        ex = exercise_from_solution(solution, target)
        ran = copy.deepcopy(ex)
        run_unanswered(ran, target)
        answers = solution_answers(solution)
        for cell, done in zip(ex.cells, ran.cells):
            if uses_answers(cell, answers):
                cell.outputs, cell.execution_count = done.outputs, done.execution_count
        nbformat.write(ex, target)
        written.append(target)
    return written


# ---------------------------------------------------------------- answer checking

def _unanswered(answer) -> bool:
    return answer is ... or answer is None


def _close(answer, want: float, rel: float = 0.02) -> bool:
    try:
        return math.isclose(float(answer), want, rel_tol=rel)
    except (TypeError, ValueError):
        return False


def _report(name: str, answer, want, hints: list[tuple[float, str]], unit: str, rel: float = 0.02) -> None:
    if _unanswered(answer):
        print(f"{name}: not answered yet")
    elif _close(answer, want, rel):
        print(f"{name}: correct ({want:.4g} {unit})")
    else:
        hint = next((h for wrong, h in hints if _close(answer, wrong, rel)), None)
        print(f"{name}: not quite: {hint}" if hint else f"{name}: not quite ({answer!r} is not it); recount step by step")


class VectorAddIntensity:
    """C = A + B with N fp16 elements: FLOPs, bytes, intensity, bound, minimum time."""

    def __init__(self, n: float = 1e9, bytes_per_element: int = 2):
        self.n, self.size = n, bytes_per_element
        self.flops = n
        self.bytes = 3 * n * bytes_per_element
        self.intensity = self.flops / self.bytes

    def check_flops(self, answer) -> None:
        _report("(1) FLOPs", answer, self.flops, [
            (2 * self.n, "an add is one floating-point operation per element; there is no multiply here"),
            (3 * self.n, "count operations, not memory accesses: one add per output element")], "FLOP")

    def check_bytes(self, answer) -> None:
        n, s = self.n, self.size
        return _report("(2) bytes moved", answer, self.bytes, [
            (2 * n * s, "you counted only the reads; C must be written back too"),
            (n * s, "you counted one array; A and B are read and C is written"),
            (3 * n, "you counted elements, not bytes: an fp16 element is 2 bytes"),
            (3 * n * 4, "fp16 is 2 bytes per element, not 4"),
            (4 * n * s, "C is written, not read: 3 arrays cross the bus once each")], "bytes")

    def check_intensity(self, answer) -> None:
        _report("(3) arithmetic intensity", answer, self.intensity, [
            (self.n / (2 * self.n * self.size), "that divides by the reads only; the write of C counts"),
            (self.bytes / self.flops, "intensity is FLOPs per byte, not bytes per FLOP"),
            (self.n / (3 * self.n), "divide by bytes, not elements (2 bytes each)")], "FLOP/byte")

    def check_bound(self, answer, ridge_flop_per_byte: float) -> None:
        want = "memory" if self.intensity < ridge_flop_per_byte else "compute"
        if _unanswered(answer):
            print("(3b) memory- or compute-bound: not answered yet")
        elif str(answer).strip().lower().startswith(want):
            print(f"(3b) {want}-bound: correct ({self.intensity:.3f} FLOP/B is far left of the "
                  f"ridge point at {ridge_flop_per_byte:.0f} FLOP/B)")
        else:
            print(f"(3b) not quite: compare {self.intensity:.3f} FLOP/B with the ridge point "
                  f"{ridge_flop_per_byte:.0f} FLOP/B; left of it, bandwidth limits the speed")

    def min_time_ms(self, bandwidth_TBps: float) -> float:
        return self.bytes / (bandwidth_TBps * 1e12) * 1e3

    def check_min_time_ms(self, answer, bandwidth_TBps: float) -> None:
        want = self.min_time_ms(bandwidth_TBps)
        _report(f"(4) minimum time at {bandwidth_TBps:.2f} TB/s", answer, want, [
            (want * 1e3, "that is in microseconds; the question asks for milliseconds"),
            (want * 2 / 3, "that moves only the reads; the write of C takes time too"),
            (self.flops / (bandwidth_TBps * 1e12) * 1e3, "divide bytes (not FLOPs) by bandwidth")], "ms")


# ---------------------------------------------------------------- matmul: one warp's addresses

SECTOR_BYTES = 32


class _Dim3:
    def __init__(self, x=0, y=0, z=0):
        self.x, self.y, self.z = x, y, z


def warp_indices(row_expr: str, col_expr: str, block=(32, 32)) -> list[tuple[int, int]]:
    """(row, col) of the 32 threads of warp 0 of block (0, 0), from the C expressions (valid Python too)."""
    out = []
    for lane in range(32):
        names = {"threadIdx": _Dim3(lane % block[0], lane // block[0]), "blockIdx": _Dim3(),
                 "blockDim": _Dim3(*block), "__builtins__": {}}
        out.append((int(eval(row_expr, names)), int(eval(col_expr, names))))  # noqa: S307 (the student's own expression)
    return out


def sectors_per_request(byte_addresses: list[int]) -> int:
    """32-byte sectors one warp-wide access touches: 1-2 when coalesced, up to 32 when strided."""
    return len({a // SECTOR_BYTES for a in byte_addresses})


def warp_access_report(row_expr: str, col_expr: str, K: int = 4096, N: int = 4096) -> dict[str, int]:
    """Sectors per request of the first iteration's loads (A[row][0], B[0][col]) and the store of C."""
    rc = warp_indices(row_expr, col_expr)
    return {"load A": sectors_per_request([2 * (r * K) for r, _ in rc]),
            "load B": sectors_per_request([2 * c for _, c in rc]),
            "store C": sectors_per_request([2 * (r * N + c) for r, c in rc])}


def check_mapping(row_expr, col_expr, run_on_gpu: bool = True) -> None:
    """Exercise 02: the model of one warp's accesses, a compile for sm_80, and (on a GPU) a run."""
    if _unanswered(row_expr) or _unanswered(col_expr):
        print("mapping: not answered yet")
        return
    try:
        rc = warp_indices(row_expr, col_expr)
    except Exception as e:  # the expression itself is the student's: say what is wrong with it
        print(f"mapping: cannot evaluate it ({type(e).__name__}: {e}); use threadIdx.x, blockIdx.y, blockDim.x, ...")
        return
    if len(set(rc)) != 32:
        print(f"mapping: two threads of one warp compute the same element: {rc[:4]} ...")
        return
    report = warp_access_report(row_expr, col_expr)
    print("sectors per warp request (model, K = N = 4096): "
          + ", ".join(f"{k} {v}" for k, v in report.items()))
    from ladder import cuda
    from ladder.world import NotAvailable
    defines = {"ROW": f"({row_expr})", "COL": f"({col_expr})"}
    try:
        cuda.compile_cubin("exercises/matmul_mapping.cu", "sm_80", tuple(sorted(defines.items())))
        print("compiles for sm_80: yes")
    except (cuda.CompileError, NotAvailable) as e:
        print(f"does not compile: {str(e).splitlines()[-3:]}")
        return
    coalesced = report["load B"] <= 4 and report["store C"] <= 4
    if run_on_gpu:
        _run_mapping(defines)
    print("mapping: correct: a warp now reads neighbouring columns of B and writes neighbouring elements of C"
          if coalesced else
          "mapping: not yet coalesced: the 32 threads of a warp (consecutive threadIdx.x) should take "
          "consecutive columns, so that B and C are read and written in a few sectors")


def _run_mapping(defines: dict) -> None:
    from ladder.world import WORLD
    if not WORLD.gpu:
        print("GPU run: no GPU here (the model and the compile above are the check)")
        return
    import numpy as np
    import torch
    import kernels.matmul as mm
    from ladder import cuda
    from ladder.check import compare
    from ladder.timing import bench

    def run(a, b, out=None):
        M, K = a.shape
        N = b.shape[1]
        out = torch.empty(M, N, dtype=torch.float16, device="cuda") if out is None else out
        side = -(-max(M, N) // 32)
        cuda.launch(cuda.load("exercises/matmul_mapping.cu", defines), "matmul", (side, side), (32, 32),
                    (a, b, out, np.int32(M), np.int32(N), np.int32(K)))
        return out

    gen = torch.Generator("cuda").manual_seed(3)
    a, b = mm.PROBLEM.make_inputs((1000, 1000, 1000), "cuda", gen)
    verdict = compare(run(a, b), mm.reference(a, b))
    print(f"GPU run at 1000x1000x1000: {verdict}")
    a, b = mm.PROBLEM.make_inputs((2048, 2048, 2048), "cuda", gen)
    yours, naive = bench(lambda: run(a, b)).median_ms, bench(lambda: mm.naive(a, b)).median_ms
    print(f"GPU time at 2048^3: yours {yours:.2f} ms, rung 1 (naive) {naive:.2f} ms: {naive / yours:.1f}x")


# ---------------------------------------------------------------- matmul: the intensity of a tile

class TileIntensity:
    """Exercise 03: FLOPs per byte of one BM x BN x BK step of a tiled fp16 matmul, and a tile past the ridge."""

    @staticmethod
    def intensity(bm: int, bn: int, bk: int) -> float:
        return 2 * bm * bn * bk / (2 * (bm * bk + bk * bn))  # FMAs x 2 over the fp16 A and B tiles loaded

    def check_intensity(self, fn) -> None:
        if _unanswered(fn):
            print("tile intensity: not answered yet")
            return
        cases = [(32, 32, 32), (128, 128, 32), (128, 256, 64), (64, 256, 16)]
        for bm, bn, bk in cases:
            want, got = self.intensity(bm, bn, bk), fn(bm, bn, bk)
            if _unanswered(got) or not _close(got, want):
                hint = ("it does not depend on BK: BK cancels" if _close(got, want * bk) or _close(got, want / bk)
                        else "count 2 FLOPs per multiply-add, and 2 bytes per fp16 element of the A and B tiles")
                print(f"tile intensity: not quite at {bm}x{bn}x{bk}: {got!r} (want {want:.4g}); {hint}")
                return
        print("tile intensity: correct: BM*BN/(BM+BN) FLOP/byte, whatever BK is")

    def check_choice(self, bm, bn, bk, ridge: float, smem_bytes: int, stages: int = 2) -> None:
        if _unanswered(bm) or _unanswered(bn) or _unanswered(bk):
            print("tile choice: not answered yet")
            return
        got, smem = self.intensity(bm, bn, bk), 2 * stages * bk * (bm + bn)
        if got < ridge:
            print(f"tile choice: {bm}x{bn} gives {got:.0f} FLOP/byte, left of the ridge ({ridge:.0f}): bigger tiles")
        elif smem > smem_bytes:
            print(f"tile choice: past the ridge ({got:.0f} FLOP/byte), but {stages} stages of it need "
                  f"{smem // 1024} KiB of shared memory (> {smem_bytes // 1024} KiB): the intensity does not "
                  f"depend on BK, the shared memory does")
        else:
            print(f"tile choice: correct: {bm}x{bn}x{bk} gives {got:.0f} FLOP/byte >= ridge {ridge:.0f}, "
                  f"and {stages} stages fit in {smem // 1024} KiB of shared memory")


# ---------------------------------------------------------------- Triton: masks for ragged tiles

def _still_blank(fn) -> bool:
    """The exercise's stub: the function's source still holds a `...`."""
    import ast
    import inspect
    import textwrap
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(getattr(fn, "fn", fn))))
    except (OSError, TypeError, SyntaxError):
        return False
    return any(isinstance(node, ast.Constant) and node.value is Ellipsis for node in ast.walk(tree))


# Why a mask that lets indices past an edge through is wrong, per (mask, axis of its tile).
_PAST_EDGE = {
    ("c_mask", 0): "those rows lie past the end of C",
    ("c_mask", 1): "those columns land in C's next row, or past its end",
    ("a_mask", 0): "those rows lie past the end of A (the store drops their sums, but the loads are out of bounds)",
    ("a_mask", 1): "in the last K step those are the next row's elements, or past the end of A: masked off, "
                   "they load as other=0.0 and add nothing",
    ("b_mask", 0): "in the last K step those rows lie past the end of B: masked off, they load as other=0.0 "
                   "and add nothing",
    ("b_mask", 1): "those are the next row's elements, or past the end of B (the store drops their sums, "
                   "but the loads are out of bounds)",
}


class TileMasks:
    """Exercise 04: the A, B and C masks of a tiled Triton matmul (kernels/triton/exercises.py).

    Each shape runs the matmul with fresh data. C is a view at the start of a longer buffer whose
    tail holds SENTINEL, so a store past C's end shows, and C starts as NaN, so an element never
    stored shows. A and B are views too, their tails GUARD: a load past an edge changes the sums but
    never reads memory that is not ours. Then the masks the kernel used say which one is wrong where.
    """
    SHAPES = [(1, 1, 1), (17, 33, 65), (33, 47, 31), (16, 16, 16), (32, 48, 40)]  # the last: only K ragged
    BLOCK = (16, 16, 16)
    GUARD, SENTINEL = 8.0, -1000.0

    def check(self, masks_fn) -> None:
        if _unanswered(masks_fn) or _still_blank(masks_fn):
            print("tile masks: not answered yet")
            return
        if not hasattr(masks_fn, "fn"):  # the interpreter would call a plain function; a GPU compile would not
            print("tile masks: decorate your function with @triton.jit: the kernel calls it from GPU code")
            return
        for shape in self.SHAPES:
            try:
                symptom, fault = self._run(masks_fn, shape), self._fault(masks_fn, shape)
            except Exception as e:  # the masks are the student's: say what broke, not where in Triton
                first = (str(e).strip().splitlines() or [""])[0][:200]
                print(f"tile masks: the kernel fails with your masks at {'x'.join(map(str, shape))} "
                      f"({type(e).__name__}: {first}); return three boolean tensors shaped like (or "
                      f"broadcasting to) the A, B and C tiles, made with <, & and [:, None]")
                return
            if symptom or fault:
                lead = f"{symptom}: " if symptom else "C is right, but "
                print(f"tile masks: not quite at {'x'.join(map(str, shape))}: {lead}{fault or 'check your masks'}")
                return
        print(f"tile masks: correct: C = A·B on {len(self.SHAPES)} shapes with ragged edges, "
              f"and no load or store outside A, B or C")

    def _run(self, masks_fn, shape) -> str | None:
        import torch
        from kernels.triton.exercises import masked_matmul
        from ladder.check import compare
        from ladder.world import device
        M, N, K = shape
        BM, BN, BK = self.BLOCK
        gen = torch.Generator().manual_seed(4)

        def guarded(rows, cols, block_rows, block_cols, fill):
            """A rows x cols view at the start of a buffer that also holds every element the
            kernel's tiles can address (rows and columns rounded up to whole tiles)."""
            whole_rows, whole_cols = -(-rows // block_rows) * block_rows, -(-cols // block_cols) * block_cols
            buf = torch.full(((whole_rows - 1) * cols + whole_cols,), fill, dtype=torch.float16, device=device())
            return buf, buf[:rows * cols].view(rows, cols)

        _, a = guarded(M, K, BM, BK, self.GUARD)
        _, b = guarded(K, N, BK, BN, self.GUARD)
        a.copy_(torch.randn(M, K, generator=gen).half())
        b.copy_(torch.randn(K, N, generator=gen).half())
        c_buf, c = guarded(M, N, BM, BN, self.SENTINEL)
        c.fill_(float("nan"))
        masked_matmul(a, b, masks_fn, out=c, block=self.BLOCK)
        if (c_buf[M * N:] != self.SENTINEL).any():
            return "the kernel stored past the end of C"
        result = compare(c, a.double() @ b.double())
        if result.non_finite:
            return "elements of C were never stored (they are still NaN)"
        return None if result.ok else "C differs from A·B"

    def _fault(self, masks_fn, shape) -> str | None:
        """How the first mask that is not exact (true inside its matrix, false outside) is wrong."""
        import torch
        from kernels.triton.exercises import tile_masks_used
        M, N, K = shape
        a, b, c = tile_masks_used(masks_fn, shape, self.BLOCK)
        for name, used, axes in (("c_mask", c, (("rows", "M", M), ("columns", "N", N))),
                                 ("a_mask", a, (("rows", "M", M), ("ks", "K", K))),
                                 ("b_mask", b, (("ks", "K", K), ("columns", "N", N)))):
            used = used.reshape(-1, *used.shape[-2:])
            inside = ((torch.arange(used.shape[1]) < axes[0][2])[:, None]
                      & (torch.arange(used.shape[2]) < axes[1][2])[None, :])
            outside = (used & ~inside).any(0)
            for axis, (index, bound, size) in enumerate(axes):
                past = outside.any(1 - axis)[size:]  # per index from the edge on: touched in some tile?
                if past.any():
                    if past.nonzero().flatten().tolist() == [0] and len(past) > 1:
                        return (f"{name} lets {index} == {bound} through: {index} run from 0 to {bound} - 1, "
                                f"so compare with <, not <=")
                    return f"{name} lets {index} >= {bound} through: {_PAST_EDGE[name, axis]}"
            if (inside & ~used).any():
                return (f"{name} masks off elements inside the matrix: "
                        + ("they are never stored" if name == "c_mask" else "their products are missing from the sums"))
        return None


# ---------------------------------------------------------------- attention: the online softmax

def _blanks(fn) -> tuple[list[str], bool] | None:
    """What is left of a stub in the function's source, in words: the names assigned `...` that it goes
    on to use, and a `...` anywhere else; and whether anything else is assigned. None without source."""
    import ast
    import inspect
    import textwrap
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(getattr(fn, "fn", fn))))
    except (OSError, TypeError, SyntaxError):
        return None
    blank, placed, real = {}, set(), False
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign):
            is_blank = isinstance(node.value, ast.Constant) and node.value.value is Ellipsis
            if is_blank:
                placed.add(id(node.value))
            for target in node.targets:
                if is_blank and isinstance(target, ast.Name):
                    blank.setdefault(target.id, node.lineno)
                else:
                    real = True
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            real = True
    used = {node.id for node in ast.walk(tree) if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load)}
    stray = any(isinstance(node, ast.Constant) and node.value is Ellipsis and id(node) not in placed
                for node in ast.walk(tree))
    still = sorted((n for n in blank if n in used), key=blank.get)
    parts = ([f"{', '.join(still)} {'is' if len(still) == 1 else 'are'} still `...`"] if still else []) \
        + (["a `...` is left in an expression"] if stray else [])
    return parts, real


class _Verdict(Exception):
    """The rest of one verdict line (after "name: "), raised from deep inside a check."""


class OnlineSoftmax:
    """Exercise 05: the online softmax, one block of keys at a time, in NumPy and in a Triton kernel.

    The contract, per query row: m is the largest score seen so far, l the sum of exp(score - m) over
    the keys seen so far, acc the same sum of exp(score - m) · value (unnormalized); they start at
    -inf, 0, 0, and acc / l at the end is softmax(scores) @ values. A masked key's score is -inf.

    Each kind of score stream runs block by block through the student's update; a stream is right when
    acc / l matches softmax(scores) @ values in float64. The first that is not says why: the states
    after each block show whether m is the running max, and whether l and acc agree with m.
    The Triton function runs on the same streams in 16x16 tiles (kernels/triton/exercises.py's probe
    kernel, scores in base 2), then inside the fused attention kernel at a few shapes.
    """
    NUMPY, TRITON = "online softmax (NumPy)", "online softmax (Triton)"
    NUMPY_BLOCKS = (1, 5, 8)
    TRITON_TILE = 16
    LARGE = 300.0  # scores of a few hundred: exp overflows float64 past 709, exp2 overflows fp32 past 128
    # (B, H, S, D, causal, window, scale of Q): ragged S, causal, a sliding window, scores past exp2's range
    ATTENTION_SHAPES = [(1, 2, 37, 16, False, None, 1.0), (1, 1, 45, 32, True, None, 1.0),
                        (1, 1, 50, 16, True, 6, 1.0), (1, 1, 24, 16, False, None, 60.0)]

    # ------------------------------------------------------------ the two checks

    def check_numpy(self, fn) -> None:
        if self._not_ready(self.NUMPY, fn):
            return
        try:
            self._streams(fn, base=math.e, rows=6, D=5, blocks=self.NUMPY_BLOCKS, tol=1e-9, triton=False)
        except _Verdict as v:
            print(f"{self.NUMPY}: {v}")
            return
        print(f"{self.NUMPY}: correct: acc / l = softmax(scores) @ values, block by block (blocks of "
              f"{', '.join(map(str, self.NUMPY_BLOCKS))} keys), with masked keys, a wholly masked first "
              f"block, and scores of ±{self.LARGE * 3:.0f}")

    def check_triton(self, fn) -> None:
        if self._not_ready(self.TRITON, fn):
            return
        if not hasattr(fn, "fn"):  # the interpreter would call a plain function; a GPU compile would not
            print(f"{self.TRITON}: decorate your function with @triton.jit: the kernel calls it from GPU code")
            return
        try:
            self._streams(self._probe(fn), base=2.0, rows=self.TRITON_TILE, D=self.TRITON_TILE,
                          blocks=(self.TRITON_TILE,), tol=2e-3, triton=True)
            for shape in self.ATTENTION_SHAPES:
                self._attention(fn, shape)
        except _Verdict as v:
            print(f"{self.TRITON}: {v}")
            return
        print(f"{self.TRITON}: correct: block by block in 16x16 tiles, and fused attention at "
              f"{len(self.ATTENTION_SHAPES)} shapes (ragged S, causal, a sliding window, scores past "
              f"exp2's range) matches fp32 math attention")

    @staticmethod
    def _not_ready(name: str, fn) -> bool:
        """Print "not answered yet" for the stub (nothing but `name = ...` assignments), "not finished"
        when a `...` the function still uses is left; a `name = ...` that is never used is no matter."""
        if _unanswered(fn):
            print(f"{name}: not answered yet")
            return True
        left = _blanks(fn)
        if left is None or not left[0]:
            return False
        still, answered_any = left
        print(f"{name}: not finished: " + "; ".join(still) if answered_any
              else f"{name}: not answered yet")
        return True

    # ------------------------------------------------------------ the score streams

    def _cases(self, rows: int, D: int, blocks: tuple, rng) -> list:
        """(what, scores [rows, S], values [S, D], block sizes): the kinds of stream, in checking order."""
        import numpy as np
        block = max(blocks)
        S = 3 * block
        values = rng.standard_normal((S, D))
        stays = rng.standard_normal((rows, S))
        stays[:, 0] += 8.0                                  # every row's max is its first key
        grows = rng.standard_normal((rows, S)) + np.linspace(0.0, 40.0, S)  # each block's max is higher
        holes = rng.standard_normal((rows, S))
        holes[rng.random((rows, S)) < 0.3] = -np.inf        # masked keys, but never key 0: m is finite at once
        holes[np.arange(S)[None, :] > np.arange(rows)[:, None] + S // 2] = -np.inf  # and a causal-like tail
        holes[:, 0] = rng.standard_normal(rows)
        first = rng.standard_normal((rows, S))
        half, masked = rows // 2, block + block // 4
        first[:half, :masked] = -np.inf                     # these rows: the first block(s) wholly masked
        first[half:, block:2 * block] = -np.inf             # these: a wholly masked block in the middle
        large = rng.standard_normal((rows, S)) * self.LARGE
        return [("one block", rng.standard_normal((rows, block)), values[:block], (block,)),
                ("a max that stays in the first block", stays, values, blocks),
                ("a max that grows from block to block", grows, values, blocks),
                ("masked keys (-inf)", holes, values, blocks),
                ("a first block whose keys are all masked", first, values, blocks),
                (f"large scores (±{self.LARGE * 3:.0f})", large, values, blocks)]

    def _streams(self, fn, base: float, rows: int, D: int, blocks: tuple, tol: float, triton: bool) -> None:
        import warnings
        import numpy as np
        for what, scores, values, sizes in self._cases(rows, D, blocks, np.random.default_rng(5)):
            for block in sizes:
                with np.errstate(all="ignore"), warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    states = self._stream(fn, scores, values, block, what)
                    m, l, acc = states[-1]
                    out = acc / l[:, None]
                ref = self._softmax_values(scores, values, base)
                if np.isfinite(out).all() and self._rel(out, ref) <= tol:
                    continue
                at = f"{what}, blocks of {block} key{'s' if block > 1 else ''}"
                with np.errstate(all="ignore"):
                    raise _Verdict(f"not quite at {at}: "
                                   + self._diagnose(what, states, scores, values, block, base, tol, triton, ref))

    @staticmethod
    def _stream(fn, scores, values, block: int, what: str) -> list:
        import numpy as np
        rows, S = scores.shape
        D = values.shape[1]
        m, l, acc = np.full(rows, -np.inf), np.zeros(rows), np.zeros((rows, D))
        states = []
        for start in range(0, S, block):
            try:
                got = fn(m.copy(), l.copy(), acc.copy(), scores[:, start:start + block].copy(),
                         values[start:start + block].copy())
            except _Verdict:
                raise
            except Exception as e:  # the function is the student's: say what broke, not where
                first = (str(e).strip().splitlines() or [""])[0][:200]
                raise _Verdict(f"your function fails at {what}, keys {start} to {min(start + block, S) - 1} "
                               f"({type(e).__name__}: {first})") from None
            if not isinstance(got, (tuple, list)) or len(got) != 3:
                raise _Verdict("return three things: the new m, l and acc")
            if any(_unanswered(x) for x in got):
                raise _Verdict("not answered yet")
            try:
                m, l, acc = (np.array(x, dtype=np.float64) for x in got)
            except (TypeError, ValueError) as e:
                raise _Verdict(f"return arrays of numbers: m, l, acc ({e})") from None
            want = {"m": (rows,), "l": (rows,), "acc": (rows, D)}
            shapes = {"m": m.shape, "l": l.shape, "acc": acc.shape}
            if shapes != want:
                raise _Verdict("return m, l of shape (rows,) and acc of shape (rows, D); got "
                               + ", ".join(f"{k} {s}" for k, s in shapes.items())
                               + f" for {rows} rows and D = {D} (reduce over the keys: axis=1)")
            states.append((m, l, acc))
        return states

    @staticmethod
    def _softmax_values(scores, values, base: float):
        import numpy as np
        x = scores * math.log(base)
        w = np.exp(x - x.max(axis=1, keepdims=True))
        return (w / w.sum(axis=1, keepdims=True)) @ values

    @staticmethod
    def _rel(got, want) -> float:
        import numpy as np
        if not np.isfinite(got).all():
            return math.inf
        return float(np.linalg.norm(got - want) / max(np.linalg.norm(want), 1e-300))

    def _diagnose(self, what, states, scores, values, block, base, tol, triton, ref) -> str:
        import numpy as np
        exp = "tl.exp2" if triton else "np.exp"
        mx = "tl.maximum(m, tl.max(s, axis=1))" if triton else "np.maximum(m, scores.max(axis=1))"
        rows, S = scores.shape
        # 1. NaN or inf: at the first block that makes any
        for t, (m, l, acc) in enumerate(states):
            end = min((t + 1) * block, S)
            out = acc / l[:, None]
            bad = (np.isnan(m) | ~np.isfinite(l) | ~np.isfinite(acc).all(axis=1)
                   | (t == len(states) - 1) & ~np.isfinite(out).all(axis=1))
            if not bad.any():
                continue
            seen = np.isfinite(scores[:, :end]).any(axis=1)      # rows with a key that is not masked, so far
            this = np.isfinite(scores[:, t * block:end]).any(axis=1)
            if not seen[bad].any():
                return (f"NaN in rows whose keys so far are all masked: there m_new is -inf, and "
                        f"-inf - (-inf) is NaN; where m_new is -inf, subtract 0 instead ({exp}(-inf - 0) = 0: "
                        f"nothing to add yet, and l = acc = 0 need no rescaling)")
            if what.startswith("large"):
                return (f"NaN or inf with scores of a few hundred: {exp} of a score that is not shifted by "
                        f"the max overflows to inf ({'past 128 in fp32' if triton else 'past 709 in float64'}) "
                        f"or underflows to 0, and inf / inf or 0 / 0 is NaN; subtract the running max first, "
                        f"so that every exponent is <= 0: p = {exp}(scores - m_new[:, None]), "
                        f"alpha = {exp}(m - m_new)")
            if not this[bad].any():
                return (f"NaN or inf after a block whose keys are all masked (-inf) in rows that had seen "
                        f"keys before: such a block must leave m, l and acc as they are: m stays the "
                        f"running max, {mx}, so alpha = 1 and p = 0")
            if t == 0:
                return (f"NaN or inf already after the first block, from m = -inf, l = 0, acc = 0: alpha = "
                        f"{exp}(m - m_new) is 0 there (not {exp}(m_new - m), which is inf: 0 · inf is NaN)")
            return f"NaN or inf in l or acc after keys {t * block} to {end - 1}"
        m, l, acc = states[-1]
        # 2. finite, but acc / l is not the answer
        if self._rel(acc, ref) <= tol:
            return ("acc is already normalized: keep acc the unnormalized sum (acc · alpha + p @ values); "
                    "the division by l comes once, at the end")
        for t, (mt, _, _) in enumerate(states):
            end = min((t + 1) * block, S)
            run = scores[:, :end].max(axis=1)
            seen = np.isfinite(run)
            if not np.allclose(mt[seen], run[seen], rtol=1e-6, atol=1e-6):
                return (f"after keys 0 to {end - 1}, m is not the largest score so far in every row: "
                        f"m_new = {mx}")
        safe = np.where(np.isfinite(m), m, 0.0)

        def weights(b):
            return b ** (scores - safe[:, None])

        def close(got, want):
            return self._rel(got, want) <= tol

        other = 2.0 if base != 2.0 else math.e
        if close(l, weights(other).sum(axis=1)) and not close(l, weights(base).sum(axis=1)):
            return ("the scores are in base 2 (log2(e) is folded into their scale): use tl.exp2, not tl.exp"
                    if triton else "these scores are in base e: use np.exp, not exp2")
        l_ok, acc_ok = close(l, weights(base).sum(axis=1)), close(acc, weights(base) @ values)
        if what == "one block":
            parts = ([] if l_ok else ["l_new = l · alpha + the sum of p over the keys (axis=1)"]) \
                + ([] if acc_ok else ["acc_new = acc · alpha[:, None] + p @ values (p [rows, keys] @ values [keys, D])"])
            return (f"wrong already for one block from m = -inf, l = 0, acc = 0: with p = {exp}(scores - "
                    f"m_new[:, None]), " + "; ".join(parts or ["acc / l"]))
        alpha = f"alpha = {exp}(m - m_new)"
        if not l_ok and not acc_ok:
            return (f"l and acc are right while the max stays, wrong once a later block raises it: when the "
                    f"max grows, rescale both by {alpha} before adding the new block")
        if not acc_ok:
            return (f"l is right but acc is not: forgot to rescale acc when the max grows: acc_new = "
                    f"acc · alpha[:, None] + p @ values, with {alpha}")
        if not l_ok:
            return (f"acc is right but l is not: forgot to rescale l when the max grows: l_new = "
                    f"l · alpha + the sum of p, with {alpha}")
        return f"acc / l differs from softmax(scores) @ values (relative error {self._rel(acc / l[:, None], ref):.2g})"

    # ------------------------------------------------------------ Triton: the probe and the fused kernel

    @staticmethod
    def _probe(fn):
        """The @triton.jit update as a NumPy function: one launch of the probe kernel per block."""
        import numpy as np
        import torch
        from kernels.triton.exercises import online_update_step

        def update(m, l, acc, s, v):
            t = [torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32)) for x in (m, l, acc, s, v)]
            return tuple(x.cpu().double().numpy() for x in online_update_step(fn, *t))
        return update

    @staticmethod
    def _attention(fn, shape) -> None:
        import warnings
        import numpy as np
        import torch
        from kernels.attention import reference
        from kernels.triton.exercises import online_attention
        from ladder.check import compare
        from ladder.world import device
        B, H, S, D, causal, window, scale = shape
        gen = torch.Generator().manual_seed(6)
        q, k, v = (torch.randn(B, H, S, D, generator=gen) for _ in range(3))
        q, k, v = ((q * scale).half().to(device()), k.half().to(device()), v.half().to(device()))
        if window is None:
            want = reference(q, k, v, causal)
        else:  # fp32 math attention, as kernels.attention.reference, with the window's mask too
            i, j = torch.arange(S, device=q.device)[:, None], torch.arange(S, device=q.device)[None, :]
            s = (q.float() @ k.float().transpose(-1, -2)) / D ** 0.5
            s = s.masked_fill((j > i) | (i - j >= window) if causal else (i - j >= window), float("-inf"))
            want = torch.softmax(s, dim=-1) @ v.float()
        what = (f"{B}x{H}x{S}x{D}" + (", causal" if causal else "") + (f", window {window}" if window else "")
                + (f", Q scaled by {scale:g}" if scale != 1 else ""))
        try:
            with np.errstate(all="ignore"), warnings.catch_warnings():
                warnings.simplefilter("ignore")
                got = online_attention(q, k, v, fn, causal=causal, window=window)
        except Exception as e:  # the function is the student's: say what broke, not where
            first = (str(e).strip().splitlines() or [""])[0][:200]
            raise _Verdict(f"the attention kernel fails with your update at {what} ({type(e).__name__}: "
                           f"{first}); return (m, l, acc) shaped [BLOCK_M], [BLOCK_M], [BLOCK_M, D], fp32") from None
        result = compare(got, want)
        if not result.ok:
            raise _Verdict(f"right block by block, but attention at {what} differs from fp32 math attention "
                           f"({result})")
